"""``python -m actorctl`` is the ``actorctl`` command."""

from .cli import main

main()
