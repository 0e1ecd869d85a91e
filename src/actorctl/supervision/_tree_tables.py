"""The records a supervision tree declared as data is read as: a
``[[supervisor]]`` table of cluster.toml (or the ``{"supervisor": {...}}`` of a
JSON child) and each kind of child, an actor, a process or a nested
supervisor.

Each is a frozen attrs record read by the package's one converter
(``actorctl._schema.read_table``): its fields are the keys the table may have,
those without a default the keys it must have, each field's type and
``key(...)`` what its value is, in the words of the error for a wrong one.
``_declare.py`` reads the tables into these records and builds the specs;
what only the whole file shows (a tree's node exists, a nested supervisor is
declared once) is ``cluster/config/_tree_config.py``'s to check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, final

import attrs

from .._schema import Text, key
from ._child import Restart, Strategy

__all__ = ["ActorChildTable", "NestedChildTable", "ProcessChildTable", "SupervisorTable"]

_STRING: Final = "a non-empty string"
_WHOLE: Final = "a whole number >= 0"
_SECONDS: Final = "a number of seconds >= 0"
_STRATEGIES: Final = f"one of {[s.value for s in Strategy]}"
_RESTARTS: Final = f"one of {[r.value for r in Restart]}"


def _at_least_0(value: float) -> bool:
    return value >= 0


@final
@attrs.frozen
class SupervisorTable:
    """A supervisor: its name, its node (a top-level tree's), its strategy and
    restart intensity, its own restart type, and its children (each read by
    its kind's record)."""

    name: str = key(_STRING)
    node: str | None = key(_STRING, default=None)  # one of the file's: _tree_config.py
    strategy: Strategy = key(_STRATEGIES, default=Strategy.ONE_FOR_ONE)
    max_restarts: int = key(_WHOLE, _at_least_0, default=3)
    within: float = key(_SECONDS, _at_least_0, default=5.0)
    backoff: float = key(_SECONDS, _at_least_0, default=0.1)
    backoff_max: float = key(_SECONDS, _at_least_0, default=5.0)
    restart: Restart = key(_RESTARTS, default=Restart.PERMANENT)
    # [[supervisor.child]] tables as they came: which record reads each one
    # is its kind's (the key it has: actor, process or supervisor)
    child: Any = key(
        "[[supervisor.child]] tables", lambda v: isinstance(v, list), default=attrs.Factory(list)
    )
    remote_start: bool = key("true or false", default=False)


@final
@attrs.frozen
class ActorChildTable:
    """An actor child: ``actor = "MODULE:OBJECT"`` made with ``args`` and
    ``kwargs``, under ``name`` (default: the actor's default name)."""

    actor: str = key(_STRING)  # imported by the tree's loader, which names what is wrong
    name: str | None = key(_STRING, default=None)
    args: tuple[Any, ...] = key("a list", default=())
    kwargs: Mapping[str, Any] = key("a table", default=attrs.Factory(dict))
    restart: Restart = key(_RESTARTS, default=Restart.PERMANENT)


@final
@attrs.frozen
class ProcessChildTable:
    """A process child: a command, run in ``cwd`` with ``env``, stopped
    within ``stop_timeout`` seconds."""

    # the program and its arguments, each a non-empty string
    process: tuple[str, ...] = key('a command as a list, e.g. ["python", "-V"]', bool)
    name: str = key(_STRING)
    restart: Restart = key(_RESTARTS, default=Restart.PERMANENT)
    cwd: str | None = key("a directory", default=None)
    env: Mapping[str, Text] | None = key("a table of strings", default=None)
    stop_timeout: float = key(_SECONDS, _at_least_0, default=5.0)


@final
@attrs.frozen
class NestedChildTable:
    """A nested supervisor: the name of another ``[[supervisor]]`` table, or
    (in a JSON child) the supervisor's table itself."""

    supervisor: Any = key(
        "the name of a [[supervisor]] table",
        lambda v: isinstance(v, Mapping) or (isinstance(v, str) and bool(v)),
    )
