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

Each table is read as its record (``_tree_tables.py``) through the package's one
converter (``actorctl._schema``), whether it came from cluster.toml or as
JSON. Every mistake is a ``ConfigError`` naming the key, what was expected
and, for a misspelt key, the key that was meant.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any, Final, final

import attrs

from .._errors import ConfigError
from .._schema import read_table, schema_keys
from ..actors import Actor
from ._specs import ActorSpec, Child, ProcessSpec, SupervisorSpec
from ._tree_tables import ActorChildTable, NestedChildTable, ProcessChildTable, SupervisorTable

__all__ = ["Fail", "NoSuchKey", "child_from_table", "key_error", "supervisor_from_table"]

#: Makes the error for a key: (key, what was expected, what it was).
Fail = Callable[[str, str, object], ConfigError]
#: Turns MODULE:OBJECT into an actor factory.
Load = Callable[[str], Callable[..., Actor]]

#: The keys each table may have: its record's fields (``_tree_tables.py``).
SUPERVISOR_KEYS: Final = schema_keys(SupervisorTable)
ACTOR_KEYS: Final = schema_keys(ActorChildTable)
PROCESS_KEYS: Final = schema_keys(ProcessChildTable)
NESTED_KEYS: Final = schema_keys(NestedChildTable)
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
    """The supervisor a table declares, with its children: the table read as
    a :class:`SupervisorTable`, each child as its kind's record.

    ``nested(name, key)`` gives the spec of a ``supervisor = "NAME"`` child.
    """
    read = _Reader(fail)
    supervisor = read_table(read, table, prefix, "supervisor", SupervisorTable)
    kids = tuple(
        child_from_table(child, f"{prefix}.child[{i}]", fail=fail, load=load, nested=nested)
        for i, child in enumerate(supervisor.child)
    )
    try:
        return SupervisorSpec(
            supervisor.name,
            kids,
            strategy=supervisor.strategy,
            max_restarts=supervisor.max_restarts,
            within=supervisor.within,
            backoff=supervisor.backoff,
            backoff_max=supervisor.backoff_max,
            restart=supervisor.restart,
            remote_start=supervisor.remote_start,
        )
    except ConfigError as exc:  # what only the whole spec shows (two children named alike)
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
    ``supervisor = "NAME"`` (or, as JSON, a supervisor table itself), read as
    its kind's record."""
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
    read = _Reader(fail)
    if kinds[0] == "supervisor":
        value = read_table(read, table, prefix, "nested", NestedChildTable).supervisor
        if isinstance(value, Mapping):
            return supervisor_from_table(value, f"{prefix}.supervisor", fail=fail, load=load)
        if not isinstance(value, str) or nested is None:
            raise fail(f"{prefix}.supervisor", "the name of a [[supervisor]] table", value)
        return nested(value, f"{prefix}.supervisor")
    if kinds[0] == "process":
        process = read_table(read, table, prefix, "process", ProcessChildTable)
        return ProcessSpec(
            process.name,
            process.process,
            restart=process.restart,
            cwd=process.cwd,
            env=dict(process.env) if process.env is not None else None,
            stop_timeout=process.stop_timeout,
        )
    actor = read_table(read, table, prefix, "actor", ActorChildTable)
    try:
        factory = load(actor.actor)
    except ConfigError as exc:
        raise fail(
            f"{prefix}.actor", "MODULE:OBJECT naming an Actor class or factory", str(exc)
        ) from None
    return ActorSpec(factory, actor.args, dict(actor.kwargs), actor.name, actor.restart)


#: Each kind of table ``_declare`` reads, by the ``kind`` ``read_table`` is given.
_SCHEMAS: Final[Mapping[str, type[attrs.AttrsInstance]]] = {
    "supervisor": SupervisorTable,
    "actor": ActorChildTable,
    "process": ProcessChildTable,
    "nested": NestedChildTable,
}


@final
@attrs.frozen
class _Reader:
    """What ``read_table`` needs to read a tree's tables: their keys checked
    against their records' (a missing one named with what it takes, an unknown
    one with the nearest known key), and its errors made by ``fail``."""

    fail: Fail

    def keys(self, table: Mapping[str, Any], prefix: str, kind: str) -> None:
        schema = _SCHEMAS[kind]
        check_keys(table, schema_keys(schema), prefix, self.fail)
        for field in attrs.fields(schema):
            if field.default is attrs.NOTHING and field.name not in table:
                raise self.fail(f"{prefix}.{field.name}", field.metadata["expected"], None)

    def error(self, key: str, expected: str, got: object) -> ConfigError:
        return self.fail(key, expected, got)
