"""The ``[[supervisor]]`` tables of cluster.toml (their format is described in
``actorctl.supervision._declare``).

A table with ``node = "NAME"`` is a tree that node hosts; one without is nested
in exactly one other, as a ``supervisor = "NAME"`` child. The file is checked
when it is read (no user module is imported then: the Controller and the CLI
read it too); each node builds its trees, importing their actors, when it starts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..._errors import ConfigError
from ...actors import Actor
from ...supervision import (
    SUPERVISOR_KEYS,
    SupervisorSpec,
    check_keys,
    import_target,
    key_error,
    supervisor_from_table,
)

__all__ = ["TARGET", "check_supervisors", "supervisor_specs"]

_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?")
#: MODULE:OBJECT, as cluster.toml names an actor, a factory or a tree's child.
TARGET = re.compile(r"[\w.]+:[\w.]+")


def check_supervisors(path: Path, items: object, nodes: list[str]) -> dict[str, tuple[str, ...]]:
    """Check every [[supervisor]] table; return each node's top-level trees.

    Raises:
        ConfigError: naming the file, the key and what was expected.
    """
    tables = _tables(path, items)
    trees: dict[str, list[str]] = {}
    for index, (name, table) in enumerate(tables.items()):
        node = table.get("node")
        if node is not None and node not in nodes:
            raise _fail(path)(f"supervisor[{index}].node", f"one of the nodes {nodes}", node)
        if node is not None:
            trees.setdefault(node, []).append(name)
    # Build every tree with a stand-in loader: the shape is checked, nothing imported.
    nested_in: dict[str, str] = {}
    for name in (n for names in trees.values() for n in names):
        _build(path, tables, name, _check_target, nested_in, parents=())
    for index, (name, table) in enumerate(tables.items()):
        if table.get("node") is None and name not in nested_in:
            raise ConfigError(
                f"{path}: key 'supervisor[{index}]': supervisor {name!r} has no node and no "
                f'other supervisor nests it: add node = "NODE", or a child '
                f'supervisor = "{name}" to another supervisor'
            )
    return {node: tuple(names) for node, names in trees.items()}


def supervisor_specs(path: Path, items: object, node: str) -> list[SupervisorSpec]:
    """The trees ``node`` hosts, their actors imported.

    Raises:
        ConfigError: naming the file, the key and what is wrong.
    """
    tables = _tables(path, items)
    return [
        _build(path, tables, name, _import_factory, {}, parents=())
        for name, table in tables.items()
        if table.get("node") == node
    ]


def _tables(path: Path, items: object) -> dict[str, Mapping[str, Any]]:
    fail = _fail(path)
    if not isinstance(items, list):
        raise fail("supervisor", "[[supervisor]] tables", items)
    tables: dict[str, Mapping[str, Any]] = {}
    for index, table in enumerate(items):
        if not isinstance(table, dict):
            raise fail(f"supervisor[{index}]", "a table", table)
        name = table.get("name")
        if name is None:  # a misspelt name is reported as such
            check_keys(table, SUPERVISOR_KEYS, f"supervisor[{index}]", fail)
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise fail(f"supervisor[{index}].name", "letters, digits, '_', '.' and '-'", name)
        if name in tables:
            raise ConfigError(
                f"{path}: supervisor name {name!r} is used twice: names must be unique"
            )
        tables[name] = table
    return tables


def _build(
    path: Path,
    tables: dict[str, Mapping[str, Any]],
    name: str,
    load: Callable[[str], Callable[..., Actor]],
    nested_in: dict[str, str],
    parents: tuple[str, ...],
) -> SupervisorSpec:
    index = list(tables).index(name)

    def nested(child: str, key: str) -> SupervisorSpec:
        fail = _fail(path)
        if child not in tables:
            raise fail(key, f"the name of a [[supervisor]] table {sorted(tables)}", child)
        if child in (*parents, name):
            raise fail(key, "a supervisor that does not contain this one (a cycle)", child)
        if tables[child].get("node") is not None:
            raise fail(key, f"a supervisor without node = ... ({child!r} has one)", child)
        if nested_in.get(child, name) != name:
            raise fail(
                key, f"a supervisor nested once ({child!r} is in {nested_in[child]!r})", child
            )
        nested_in[child] = name
        return _build(path, tables, child, load, nested_in, (*parents, name))

    return supervisor_from_table(
        tables[name], f"supervisor[{index}]", fail=_fail(path), load=load, nested=nested
    )


def _fail(path: Path) -> Callable[[str, str, object], ConfigError]:
    def fail(key: str, expected: str, got: object) -> ConfigError:
        return key_error(path, key, expected, got)

    return fail


def _check_target(target: str) -> Callable[..., Actor]:
    if not TARGET.fullmatch(target):
        raise ConfigError(f"{target!r} is not MODULE:OBJECT")

    def stand_in() -> Actor:
        raise ConfigError(f"{target} is not imported while the file is checked")

    stand_in.__name__ = target.rpartition(":")[2]
    return stand_in


def _import_factory(target: str) -> Callable[..., Actor]:
    factory = import_target(target)
    if not callable(factory):
        raise ConfigError(f"{target} is not an Actor class or a function that makes one")
    result: Callable[..., Actor] = factory
    return result
