"""The ``actorctl`` command."""

from ._main import main as main
