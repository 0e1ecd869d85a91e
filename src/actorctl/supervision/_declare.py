"""Supervision trees declared as data: the ``[[supervisor]]`` tables of
cluster.toml, and the child that ``start_child`` receives as JSON.

    [[supervisor]]
    name = "pipeline"          # reachable as an actor under this name
    node = "worker-1"          # top-level trees name their node; nested ones don't
    strategy = "rest_for_one"  # one_for_one (default), one_for_all, rest_for_one
    max_restarts = 3
    within = 5.0
    backoff = 0.1
    backoff_max = 5.0
    restart = "permanent"      # under its parent

      [[supervisor.child]]
      actor = "examples.workers:WordCounter"   # MODULE:OBJECT, a class or factory
      name = "words"           # default: the actor's default name
      args = []
      kwargs = {}
      restart = "permanent"

      [[supervisor.child]]
      supervisor = "inner"     # another [[supervisor]] table, nested here

      [[supervisor.child]]
      process = ["python", "-m", "http.server", "8000"]
      name = "static"

Every mistake is a ``ConfigError`` naming the key, what was expected and, for a
misspelt key, the key that was meant.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any, Final

from .._errors import ConfigError
from ..actors import Actor
from ._child import Restart, Strategy
from ._specs import ActorSpec, Child, ProcessSpec, SupervisorSpec

__all__ = ["Fail", "NoSuchKey", "child_from_table", "key_error", "supervisor_from_table"]

#: Makes the error for a key: (key, what was expected, what it was).
Fail = Callable[[str, str, object], ConfigError]
#: Turns MODULE:OBJECT into an actor factory.
Load = Callable[[str], Callable[..., Actor]]

SUPERVISOR_KEYS: Final = frozenset(
    {
        "name",
        "node",
        "strategy",
        "max_restarts",
        "within",
        "backoff",
        "backoff_max",
        "restart",
        "child",
        "remote_start",
    }
)
ACTOR_KEYS: Final = frozenset({"actor", "name", "args", "kwargs", "restart"})
PROCESS_KEYS: Final = frozenset({"process", "name", "restart", "cwd", "env", "stop_timeout"})
NESTED_KEYS: Final = frozenset({"supervisor"})
#: The keys a [[supervisor.child]] table may have: an actor's, a process's, or a
#: nested supervisor's (which go with which is checked per child).
CHILD_KEYS: Final = ACTOR_KEYS | PROCESS_KEYS | NESTED_KEYS


class NoSuchKey(str):
    """What a :data:`Fail` is given as ``expected`` for a key that nothing
    reads: the fix (the key meant, or the keys the table may have)."""

    __slots__ = ()


def key_error(path: object, key: str, expected: str, got: object) -> ConfigError:
    """The error for ``key`` of the file at ``path`` (None: no file), which
    should have been ``expected`` and was ``got``; a :class:`NoSuchKey` says
    the key is not one the table may have."""
    where = f"{path}: " if path is not None else ""
    if isinstance(expected, NoSuchKey):
        return ConfigError(f"{where}no such key {key!r} (= {got!r}): {expected}")
    shown = "nothing" if got is None else f"{got!r}"
    return ConfigError(f"{where}key {key!r}: expected {expected}, got {shown}")


def plain_fail(key: str, expected: str, got: object) -> ConfigError:
    """Errors for a child sent as JSON: no file to name."""
    return key_error(None, key, expected, got)


def check_keys(table: Mapping[str, Any], allowed: frozenset[str], prefix: str, fail: Fail) -> None:
    for key in table:
        if key not in allowed:
            close = difflib.get_close_matches(key, sorted(allowed), n=1)
            fix = f"did you mean {close[0]!r}?" if close else f"use one of {sorted(allowed)}"
            raise fail(f"{prefix}.{key}", NoSuchKey(fix), table[key])


def supervisor_from_table(
    table: Mapping[str, Any],
    prefix: str,
    *,
    fail: Fail,
    load: Load,
    nested: Callable[[str, str], SupervisorSpec] | None = None,
) -> SupervisorSpec:
    """The supervisor a table declares, with its children.

    ``nested(name, key)`` gives the spec of a ``supervisor = "NAME"`` child.
    """
    check_keys(table, SUPERVISOR_KEYS, prefix, fail)
    name = _string(table, "name", prefix, fail)
    children = table.get("child", [])
    if not isinstance(children, list):
        raise fail(f"{prefix}.child", "[[supervisor.child]] tables", children)
    kids = tuple(
        child_from_table(child, f"{prefix}.child[{i}]", fail=fail, load=load, nested=nested)
        for i, child in enumerate(children)
    )
    strategy = table.get("strategy", Strategy.ONE_FOR_ONE.value)
    if not isinstance(strategy, str) or strategy not in {s.value for s in Strategy}:
        raise fail(f"{prefix}.strategy", f"one of {[s.value for s in Strategy]}", strategy)
    try:
        return SupervisorSpec(
            name,
            kids,
            strategy=strategy,
            max_restarts=_number(table, "max_restarts", prefix, fail, 3, whole=True),
            within=_number(table, "within", prefix, fail, 5.0),
            backoff=_number(table, "backoff", prefix, fail, 0.1),
            backoff_max=_number(table, "backoff_max", prefix, fail, 5.0),
            restart=_restart(table, prefix, fail),
            remote_start=_flag(table, "remote_start", prefix, fail),
        )
    except ConfigError as exc:
        raise fail(prefix, "a valid supervisor", str(exc)) from None


def child_from_table(
    table: object,
    prefix: str,
    *,
    fail: Fail,
    load: Load,
    nested: Callable[[str, str], SupervisorSpec] | None = None,
) -> Child:
    """One child: ``actor = "MODULE:OBJECT"``, ``process = [...]`` or
    ``supervisor = "NAME"`` (or, as JSON, a supervisor table itself)."""
    if not isinstance(table, Mapping):
        raise fail(prefix, "a table", table)
    kinds = [kind for kind in ("actor", "process", "supervisor") if kind in table]
    if not kinds:  # perhaps a misspelt kind: say which key was meant
        check_keys(table, CHILD_KEYS, prefix, fail)
    if len(kinds) != 1:
        raise fail(
            prefix,
            'exactly one of actor = "MODULE:OBJECT", process = [COMMAND, ...] or '
            'supervisor = "NAME"',
            dict(table),
        )
    if kinds[0] == "supervisor":
        check_keys(table, NESTED_KEYS, prefix, fail)
        value = table["supervisor"]
        if isinstance(value, Mapping):
            return supervisor_from_table(value, f"{prefix}.supervisor", fail=fail, load=load)
        if not isinstance(value, str) or nested is None:
            raise fail(f"{prefix}.supervisor", "the name of a [[supervisor]] table", value)
        return nested(value, f"{prefix}.supervisor")
    if kinds[0] == "process":
        check_keys(table, PROCESS_KEYS, prefix, fail)
        command = table["process"]
        if (
            not isinstance(command, list)
            or not command
            or not all(isinstance(part, str) and part for part in command)
        ):
            raise fail(f"{prefix}.process", 'a command as a list, e.g. ["python", "-V"]', command)
        env = table.get("env")
        if env is not None and not (
            isinstance(env, Mapping) and all(isinstance(v, str) for v in env.values())
        ):
            raise fail(f"{prefix}.env", "a table of strings", env)
        cwd = table.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise fail(f"{prefix}.cwd", "a directory", cwd)
        return ProcessSpec(
            _string(table, "name", prefix, fail),
            tuple(command),
            restart=_restart(table, prefix, fail),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stop_timeout=_number(table, "stop_timeout", prefix, fail, 5.0),
        )
    check_keys(table, ACTOR_KEYS, prefix, fail)
    target = _string(table, "actor", prefix, fail)
    args = table.get("args", [])
    if not isinstance(args, list):
        raise fail(f"{prefix}.args", "a list", args)
    kwargs = table.get("kwargs", {})
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise fail(f"{prefix}.kwargs", "a table", kwargs)
    name = table.get("name")
    if name is not None and (not isinstance(name, str) or not name):
        raise fail(f"{prefix}.name", "a non-empty string", name)
    try:
        factory = load(target)
    except ConfigError as exc:
        raise fail(
            f"{prefix}.actor", "MODULE:OBJECT naming an Actor class or factory", str(exc)
        ) from None
    return ActorSpec(factory, tuple(args), dict(kwargs), name, _restart(table, prefix, fail))


def _string(table: Mapping[str, Any], key: str, prefix: str, fail: Fail) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value:
        raise fail(f"{prefix}.{key}", "a non-empty string", value)
    return value


def _number(
    table: Mapping[str, Any],
    key: str,
    prefix: str,
    fail: Fail,
    default: float,
    *,
    whole: bool = False,
) -> Any:
    value = table.get(key, default)
    ok = type(value) is int if whole else type(value) in (int, float)
    if not ok or value < 0:
        raise fail(f"{prefix}.{key}", "a whole number" if whole else "a number of seconds", value)
    return value


def _restart(table: Mapping[str, Any], prefix: str, fail: Fail) -> Restart:
    value = table.get("restart", Restart.PERMANENT.value)
    if not isinstance(value, str) or value not in {r.value for r in Restart}:
        raise fail(f"{prefix}.restart", f"one of {[r.value for r in Restart]}", value)
    return Restart(value)


def _flag(table: Mapping[str, Any], key: str, prefix: str, fail: Fail) -> bool:
    value = table.get(key, False)
    if type(value) is not bool:
        raise fail(f"{prefix}.{key}", "true or false", value)
    return value
