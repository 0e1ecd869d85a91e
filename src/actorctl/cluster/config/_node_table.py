"""Reading cluster.toml's ``[[node]]`` tables (with their ``shutdown_grace``,
``[node.limits]``, ``[node.deadletters]``, ``[node.metrics]`` and
``[[node.health]]``) and its ``[[router]]`` tables, each router attached to
the node that hosts it.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Final

import attrs

from ..._errors import ConfigError
from .._deadletters import DeadLetterBounds
from ..link._limits import LIMIT_NAMES, Limits
from ._config import SHUTDOWN_GRACE, NodeConfig
from ._config_keys import unknown_key
from ._health_tables import HEALTH_KEYS, check_health_tables
from ._reader import TableReader
from ._tables import HOST_KEY, KNOWN_KEYS, NODE_KEYS
from ._tree_config import TARGET
from ._web_config import metrics_table

__all__ = ["read_node", "read_routers"]

_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?")
#: The longest shutdown_grace (s): a day; a stop that may wait longer is no stop.
_MOST_GRACE: Final = 86_400.0


def read_node(reader: TableReader, index: int, item: object) -> NodeConfig:
    """The ``[[node]]`` table at ``index``, checked."""
    prefix = f"node[{index}]"
    if not isinstance(item, dict):
        raise reader.error(prefix, "a table", item)
    reader.keys(item, prefix, "node")
    name = reader.string(item, f"{prefix}.name")
    if not _NAME.fullmatch(name):
        raise reader.error(f"{prefix}.name", "letters, digits, '.' and '-'", name)
    host, port = reader.endpoint(item, f"{prefix}.listen", default="")
    runs_on = reader.string(item, f"{prefix}.host", default=None) if "host" in item else ""
    if runs_on and not _NAME.fullmatch(runs_on):
        raise reader.error(f"{prefix}.host", "a host's name: letters, digits, '.' and '-'", runs_on)
    actors = item.get("actors")
    if actors is not None and (not isinstance(actors, str) or not TARGET.fullmatch(actors)):
        raise reader.error(
            f"{prefix}.actors", "MODULE:OBJECT, e.g. examples.workers:actors", actors
        )
    instances = item.get("instances", 1)
    if type(instances) is not int or not 1 <= instances <= 1000:
        raise reader.error(f"{prefix}.instances", "a whole number from 1 to 1000", instances)
    durable = item.get("durable", True)
    if not isinstance(durable, bool):
        why = f"true or false (whether node {name!r} keeps its store on disk)"
        raise reader.error(f"{prefix}.durable", why, durable)
    grace = item.get("shutdown_grace", SHUTDOWN_GRACE)
    if type(grace) not in (int, float) or not 0 <= grace <= _MOST_GRACE:
        why = (
            f"seconds from 0 to {_MOST_GRACE:g} that node {name!r} gives its running "
            "handlers to finish when it stops (e.g. shutdown_grace = 20.0; 0: a stop "
            "cancels them at once, and they run again elsewhere)"
        )
        raise reader.error(f"{prefix}.shutdown_grace", why, grace)
    limits = _limits(reader, f"{prefix}.limits", item.get("limits", {}))
    deadletters = _deadletters(reader, f"{prefix}.deadletters", item.get("deadletters", {}))
    try:
        health = check_health_tables(
            f"{prefix}.health",
            item.get("health", []),
            lambda key, value: unknown_key(reader.path, key, value, HEALTH_KEYS),
        )
    except ConfigError as exc:
        message = str(exc)
        raise (
            exc
            if message.startswith(str(reader.path))
            else ConfigError(f"{reader.path}: {message}")
        ) from None
    settings = {key: value for key, value in item.items() if key not in KNOWN_KEYS["node"]}
    for key in settings:  # a misspelt host would be taken for its actors factory's key
        if difflib.get_close_matches(key, [HOST_KEY], cutoff=0.7):
            raise unknown_key(reader.path, f"{prefix}.{key}", item[key], KNOWN_KEYS["node"])
    if actors is None and settings:  # no actors factory here to read them
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
        actors,
        instances,
        durable=durable,
        limits=limits,
        settings=settings,
        deadletters=deadletters,
        health=health,
        metrics=metrics_table(reader.path, f"{prefix}.metrics", item.get("metrics")),
        runs_on=runs_on,
        shutdown_grace=float(grace),
    )


def _deadletters(reader: TableReader, key: str, table: object) -> DeadLetterBounds:
    """A node's [node.deadletters] table: ``max`` letters, ``ttl`` seconds."""
    if not isinstance(table, dict):
        raise reader.error(key, "a table with max (a count) and ttl (seconds)", table)
    known = KNOWN_KEYS["node.deadletters"]
    for name, value in table.items():
        if name not in known:
            raise unknown_key(reader.path, f"{key}.{name}", value, known)
    try:
        return DeadLetterBounds(**table)
    except ConfigError as exc:
        raise ConfigError(f"{reader.path}: key '{key}': {exc}") from None


def _limits(reader: TableReader, key: str, table: object) -> dict[str, Any]:
    """A node's [node.limits] table: the resource bounds it sets."""
    if not isinstance(table, dict):
        raise reader.error(key, f"a table of resource bounds ({', '.join(LIMIT_NAMES)})", table)
    reader.keys(table, key, "node.limits")
    for name, value in table.items():
        try:
            Limits(**{name: value})
        except ConfigError as exc:
            raise ConfigError(f"{reader.path}: key '{key}.{name}': {exc}") from None
    return dict(table)


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
        reader.keys(item, prefix, "router")
        name = reader.string(item, f"{prefix}.name")
        host = reader.string(item, f"{prefix}.node")
        if host not in by_name:
            raise reader.error(f"{prefix}.node", f"one of the nodes {sorted(by_name)}", host)
        instances = item.get("instances")
        if not isinstance(instances, list) or not instances:
            raise reader.error(f"{prefix}.instances", 'a list like ["n1/emails"]', instances)
        for instance in instances:
            node, _, actor = str(instance).partition("/")
            if node not in by_name or not actor:
                raise reader.error(f"{prefix}.instances", "NODE/ACTOR with a known NODE", instance)
        routes.setdefault(host, []).append((name, tuple(str(i) for i in instances)))
    return tuple(attrs.evolve(n, routes=tuple(routes.get(n.name, ()))) for n in nodes)
