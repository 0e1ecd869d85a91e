"""The ``[[boxed]]`` tables of cluster.toml: boxed workers (docs/boxed.md).

    [[boxed]]
    name = "js"                 # the actor it is reachable as
    node = "worker"             # the node whose supervision tree runs it
    command = "node"            # a program, or a list [program, arg, ...]
    args = ["examples/boxed/worker.js"]
    cwd = "."                   # relative to this file (default: the node's own)
    env = { NODE_ENV = "production" }
    instances = 2               # processes
    concurrency = 8             # requests in flight per process (default: its hello's)
    time_limit = 30.0           # seconds per request; past it the process is killed
    memory_limit = 256          # MiB of address space per process (RLIMIT_AS)
    heartbeat = 10.0            # seconds; no record for twice that is a hang (0: off)
    grace = 2.0                 # seconds from SIGTERM to SIGKILL
    max_restarts = 3            # the processes' supervisor: intensity and backoff
    within = 5.0
    pool = "js"                 # serve the task pool "js" (its node lists it in pools)

Each table is read as a :class:`BoxedTable` record (``_schema.py``), its keys
refused as the supervision tables' are; each value has its type (``command``
a program or a list of its words, ``args`` a list of them, ``env`` a table of
strings, which may be empty), read by the converter. Every mistake is a ``ConfigError``
naming the file, the key and what was expected.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, final

import attrs

from ..._errors import ConfigError
from ..._schema import Text, key, read_table, schema_keys
from ...supervision import BoxedSpec, Restart
from ...supervision._declare import check_keys, key_error

__all__ = ["BOXED_KEYS", "BoxedTable", "boxed_specs"]

_SECONDS: Final = "a number (seconds, or MiB for memory_limit)"
_WHOLE: Final = "a whole number"
_RESTARTS: Final = tuple(r.value for r in Restart)


def _seconds() -> Any:
    return key(_SECONDS, lambda v: v >= 0, default=None)


def _whole() -> Any:
    return key(_WHOLE, lambda v: v >= 0, default=None)


@final
@attrs.frozen
class BoxedTable:
    """A ``[[boxed]]`` table (the module docstring shows one); ``node`` is
    checked against the file's nodes before the table is read."""

    name: str
    # a program, or the words of a command line (each a non-empty string)
    command: str | tuple[str, ...] = key('a program, or a list like ["node", "worker.js"]', bool)
    node: str | None = None  # one of the file's nodes: checked before the table is read
    args: tuple[str, ...] = key("a list of strings", default=())  # each a word: non-empty
    # "" is the cluster file's directory, as "." is
    cwd: Text | None = key("a directory (relative to the cluster file)", default=None)
    env: Mapping[str, Text] | None = key("a table of strings", default=None)
    instances: int | None = _whole()
    concurrency: int | None = _whole()
    time_limit: float | None = _seconds()
    memory_limit: float | None = _seconds()
    heartbeat: float | None = _seconds()
    grace: float | None = _seconds()
    start_timeout: float | None = _seconds()
    max_record: int | None = _whole()
    redeliveries: int | None = _whole()
    max_restarts: int | None = _whole()
    within: float | None = _seconds()
    backoff: float | None = _seconds()
    backoff_max: float | None = _seconds()
    restart: str = key(f"one of {list(_RESTARTS)}", lambda v: v in _RESTARTS, default="permanent")
    pool: str | None = key("the name of a task pool", default=None)


#: The keys of a [[boxed]] table: its schema's fields.
BOXED_KEYS: Final = schema_keys(BoxedTable)


@final
@attrs.frozen
class _BoxedReader:
    """Reads [[boxed]] tables with the words of the supervision tables' errors."""

    path: Path

    def keys(self, table: Mapping[str, Any], prefix: str, kind: str) -> None:
        check_keys(table, BOXED_KEYS, prefix, self.error)

    def error(self, key: str, expected: str, got: object) -> ConfigError:
        return key_error(self.path, key, expected, got)


def boxed_specs(path: Path, items: object, nodes: list[str]) -> list[tuple[str, BoxedSpec]]:
    """Each ``[[boxed]]`` table as (its node, its spec).

    Raises:
        ConfigError: naming the file, the key and what was expected.
    """
    reader = _BoxedReader(path)
    if not isinstance(items, list):
        raise reader.error("boxed", "[[boxed]] tables", items)
    specs: list[tuple[str, BoxedSpec]] = []
    for index, table in enumerate(items):
        prefix = f"boxed[{index}]"
        if not isinstance(table, dict):
            raise reader.error(prefix, "a table", table)
        check_keys(table, BOXED_KEYS, prefix, reader.error)
        node = table.get("node")
        if node not in nodes:
            raise reader.error(f"{prefix}.node", f"one of the nodes {nodes}", node)
        boxed = read_table(reader, table, prefix, "boxed", BoxedTable)
        try:
            spec = BoxedSpec(**_options(path, boxed))
        except ConfigError as exc:
            raise reader.error(prefix, "a valid boxed worker", str(exc)) from None
        if any(spec.name == other.name and node == on for on, other in specs):
            raise ConfigError(f"{path}: boxed worker {spec.name!r} is declared twice on {node}")
        specs.append((node, spec))
    return specs


def _options(path: Path, boxed: BoxedTable) -> dict[str, Any]:
    """The arguments of the ``BoxedSpec`` a checked table declares."""
    command = (boxed.command,) if isinstance(boxed.command, str) else boxed.command
    options: dict[str, Any] = {
        "name": boxed.name,
        "command": (*command, *boxed.args),
        "restart": boxed.restart,
        "pool": boxed.pool,
    }
    if boxed.cwd is not None:
        options["cwd"] = str(path.parent.resolve() / boxed.cwd)
    if boxed.env is not None:
        options["env"] = dict(boxed.env)
    fixed = ("name", "node", "command", "args", "cwd", "env", "restart", "pool")
    for name, value in attrs.asdict(boxed, recurse=False).items():
        if name not in fixed and value is not None:  # the spec's default otherwise
            options[name] = value
    return options
