"""Reading cluster.toml's ``[[node]]`` tables (with their ``shutdown_grace``,
``[node.limits]``, ``[node.deadletters]``, ``[node.metrics]`` and
``[[node.health]]``) and its ``[[router]]`` tables, each router attached to
the node that hosts it.
"""

from __future__ import annotations

import difflib
import functools
from typing import Any, Final

import attrs

from ..._errors import ConfigError
from ..._schema import key as schema_key
from ..._schema import read_table
from .._deadletters import DeadLetterBounds, bound_error
from ..link._limits import LIMIT_NAMES, Limits
from ._config import NodeConfig
from ._config_keys import unknown_key
from ._health_tables import check_health_tables
from ._reader import TableReader
from ._table_schemas import DeadLettersTable, NodeTable, RouterTable, endpoint
from ._tables import HOST_KEY, KNOWN_KEYS, NODE_KEYS
from ._web_config import metrics_table

__all__ = ["read_node", "read_routers"]


def read_node(reader: TableReader, index: int, item: object) -> NodeConfig:
    """The ``[[node]]`` table at ``index``, checked."""
    prefix = f"node[{index}]"
    if not isinstance(item, dict):
        raise reader.error(prefix, "a table", item)
    node = read_table(reader, item, prefix, "node", NodeTable)
    name = node.name
    host, port = endpoint(node.listen) or ("", 0)  # checked: never the default
    limits = _limits(reader, f"{prefix}.limits", node.limits)
    deadletters = _deadletters(reader, f"{prefix}.deadletters", node.deadletters)
    health = check_health_tables(reader, f"{prefix}.health", node.health)
    settings = {key: value for key, value in item.items() if key not in KNOWN_KEYS["node"]}
    for key in settings:  # a misspelt host would be taken for its actors factory's key
        if difflib.get_close_matches(key, [HOST_KEY], cutoff=0.7):
            raise unknown_key(reader.path, f"{prefix}.{key}", item[key], KNOWN_KEYS["node"])
    if node.actors is None and settings:  # no actors factory here to read them
        key, value = next(iter(settings.items()))
        raise unknown_key(
            reader.path,
            f"{prefix}.{key}",
            value,
            NODE_KEYS,
            "nothing reads it on a node that names no actors (only an actors "
            'factory that actors = "MODULE:OBJECT" names, such as a task app, '
            "reads a node's other keys)",
        )
    return NodeConfig(
        name,
        host,
        port,
        node.actors,
        node.instances,
        durable=node.durable,
        limits=limits,
        settings=settings,
        deadletters=deadletters,
        health=health,
        metrics=metrics_table(reader, f"{prefix}.metrics", node.metrics),
        runs_on=node.host,
        shutdown_grace=node.shutdown_grace,
    )


def _deadletters(reader: TableReader, key: str, table: object) -> DeadLetterBounds:
    """A node's [node.deadletters] table: ``max`` letters, ``ttl`` seconds."""
    if not isinstance(table, dict):
        raise reader.error(key, "a table with max (a count) and ttl (seconds)", table)

    def error(name: str, expected: str, got: object) -> ConfigError:
        # DeadLetterBounds' own words, which name the table and the bound
        return ConfigError(f"{reader.path}: key {key!r}: {bound_error(name, got)}")

    bounds = read_table(reader, table, key, "node.deadletters", DeadLettersTable, error=error)
    return DeadLetterBounds(max=bounds.max, ttl=bounds.ttl)


def _limit_ok(name: str, value: Any) -> bool:
    """Whether ``value`` is a bound ``Limits`` takes for its field ``name``."""
    try:
        Limits(**{name: value})
    except ConfigError:
        return False
    return True


def _limit_key(field: attrs.Attribute[Any]) -> Any:
    """The key of ``[node.limits]`` for a field of ``Limits``: what its value
    is, in the words of its kind (a count or seconds), checked by ``Limits``."""
    count = field.type in (int, "int")
    words = "a whole number above 0" if count else "seconds above 0"
    return schema_key(words, functools.partial(_limit_ok, field.name), default=None)


#: ``[node.limits]``'s schema: a key for each field of ``Limits``, none
#: required, each value as ``Limits`` takes it (kept as written: the node's
#: ``limits`` are the bounds the table sets, the others ``Limits``' defaults).
LimitsTable: Final = attrs.make_class(
    "LimitsTable", {field.name: _limit_key(field) for field in attrs.fields(Limits)}, frozen=True
)


def _limits(reader: TableReader, key: str, table: object) -> dict[str, Any]:
    """A node's [node.limits] table: the resource bounds it sets."""
    if not isinstance(table, dict):
        raise reader.error(key, f"a table of resource bounds ({', '.join(LIMIT_NAMES)})", table)
    bounds: attrs.AttrsInstance = read_table(reader, table, key, "node.limits", LimitsTable)
    return {name: value for name, value in attrs.asdict(bounds).items() if name in table}


def read_routers(
    reader: TableReader, items: object, nodes: tuple[NodeConfig, ...]
) -> tuple[NodeConfig, ...]:
    """Attach each [[router]] to the node that hosts it."""
    if not isinstance(items, list):
        raise reader.error("router", "[[router]] tables", items)
    by_name = {node.name: node for node in nodes}
    routes: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for index, item in enumerate(items):
        prefix = f"router[{index}]"
        if not isinstance(item, dict):
            raise reader.error(prefix, "a table", item)
        router = read_table(reader, item, prefix, "router", RouterTable)
        name, host, instances = router.name, router.node, router.instances
        if host not in by_name:
            raise reader.error(f"{prefix}.node", f"one of the nodes {sorted(by_name)}", host)
        for instance in instances:
            node, _, actor = instance.partition("/")
            if node not in by_name or not actor:
                raise reader.error(f"{prefix}.instances", "NODE/ACTOR with a known NODE", instance)
        routes.setdefault(host, []).append((name, instances))
    return tuple(attrs.evolve(n, routes=tuple(routes.get(n.name, ()))) for n in nodes)
