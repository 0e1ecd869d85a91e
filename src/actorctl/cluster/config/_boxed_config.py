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

Every mistake is a ``ConfigError`` naming the file, the key and what was expected.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from ..._errors import ConfigError
from ...supervision import BoxedSpec, Restart
from ...supervision._declare import check_keys, key_error

__all__ = ["BOXED_KEYS", "boxed_specs"]

BOXED_KEYS: Final = frozenset(
    {
        "name", "node", "command", "args", "cwd", "env", "instances", "concurrency",
        "time_limit", "memory_limit", "heartbeat", "grace", "start_timeout", "max_record",
        "redeliveries", "max_restarts", "within", "backoff", "backoff_max", "restart", "pool",
    }
)  # fmt: skip
_SECONDS: Final = ("heartbeat", "grace", "start_timeout", "within", "backoff", "backoff_max")
_WHOLE: Final = ("instances", "concurrency", "max_record", "redeliveries", "max_restarts")


def boxed_specs(path: Path, items: object, nodes: list[str]) -> list[tuple[str, BoxedSpec]]:
    """Each ``[[boxed]]`` table as (its node, its spec).

    Raises:
        ConfigError: naming the file, the key and what was expected.
    """

    def fail(key: str, expected: str, got: object) -> ConfigError:
        return key_error(path, key, expected, got)

    if not isinstance(items, list):
        raise fail("boxed", "[[boxed]] tables", items)
    specs: list[tuple[str, BoxedSpec]] = []
    for index, table in enumerate(items):
        prefix = f"boxed[{index}]"
        if not isinstance(table, dict):
            raise fail(prefix, "a table", table)
        check_keys(table, BOXED_KEYS, prefix, fail)
        node = table.get("node")
        if node not in nodes:
            raise fail(f"{prefix}.node", f"one of the nodes {nodes}", node)
        try:
            spec = BoxedSpec(**_options(path, table, prefix, fail))
        except ConfigError as exc:
            raise fail(prefix, "a valid boxed worker", str(exc)) from None
        if any(spec.name == other.name and node == on for on, other in specs):
            raise ConfigError(f"{path}: boxed worker {spec.name!r} is declared twice on {node}")
        specs.append((node, spec))
    return specs


def _options(path: Path, table: Mapping[str, Any], prefix: str, fail: Any) -> dict[str, Any]:
    name = table.get("name")
    if not isinstance(name, str) or not name:
        raise fail(f"{prefix}.name", "a non-empty string", name)
    command = table.get("command")
    if isinstance(command, str) and command:
        command = [command]
    args = table.get("args", [])
    if (
        not isinstance(command, list)
        or not command
        or not all(isinstance(part, str) and part for part in command)
    ):
        raise fail(f"{prefix}.command", 'a program, or a list like ["node", "worker.js"]', command)
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise fail(f"{prefix}.args", "a list of strings", args)
    options: dict[str, Any] = {"name": name, "command": (*command, *args)}
    cwd = table.get("cwd")
    if cwd is not None:
        if not isinstance(cwd, str):
            raise fail(f"{prefix}.cwd", "a directory (relative to the cluster file)", cwd)
        options["cwd"] = str(path.parent.resolve() / cwd)
    env = table.get("env")
    if env is not None:
        if not isinstance(env, Mapping) or not all(isinstance(v, str) for v in env.values()):
            raise fail(f"{prefix}.env", "a table of strings", env)
        options["env"] = dict(env)
    for key in (*_SECONDS, "time_limit", "memory_limit"):
        if key in table:
            value = table[key]
            if type(value) not in (int, float) or value < 0:
                raise fail(f"{prefix}.{key}", "a number (seconds, or MiB for memory_limit)", value)
            options[key] = float(value)
    for key in _WHOLE:
        if key in table:
            value = table[key]
            if type(value) is not int or value < 0:
                raise fail(f"{prefix}.{key}", "a whole number", value)
            options[key] = value
    restart = table.get("restart", Restart.PERMANENT.value)
    if restart not in {r.value for r in Restart}:
        raise fail(f"{prefix}.restart", f"one of {[r.value for r in Restart]}", restart)
    options["restart"] = restart
    pool = table.get("pool")
    if pool is not None and (not isinstance(pool, str) or not pool):
        raise fail(f"{prefix}.pool", "the name of a task pool", pool)
    options["pool"] = pool
    return options
