"""The ``[[node.health]]`` tables of cluster.toml, each read as a
:class:`HealthTable` record as the file is read (``_health_config.py``
makes the checks of them)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, final

import attrs

from ..._errors import ConfigError
from ..._schema import FileReader, key, read_table, schema_keys

__all__ = ["HEALTH_KEYS", "HealthTable", "check_health_tables"]

_BUILT_IN: Final = ("peer", "disk", "certificate")
_TARGET = re.compile(r"[\w.]+:[\w.]+")
_SECONDS: Final = "a number > 0"
_NAME: Final = "a name"
_CHECKS: Final = "'peer', 'disk', 'certificate' or MODULE:FUNCTION"


def _check(value: str) -> bool:
    return value in _BUILT_IN or _TARGET.fullmatch(value) is not None


def _names(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(n, str) and n for n in value)


@final
@attrs.frozen
class HealthTable:
    """A ``[[node.health]]`` table (``_health_config.py`` shows some). Its
    ``name`` and ``check`` must be given, and a ``peer`` check's target
    (``peer``, or ``host`` and ``port``) fits its ``check``: both are checked
    once the table is read, so that a missing one says what to write."""

    name: str | None = key(_NAME, default=None)
    check: str | None = key(_CHECKS, _check, default=None)
    interval: float | None = key(_SECONDS, lambda v: v > 0, default=None)
    timeout: float | None = key(_SECONDS, lambda v: v > 0, default=None)
    breakers: Any = key('a list of breaker names, e.g. ["downstream"]', _names, default=None)
    peer: Any = None
    host: Any = None
    port: Any = None
    path: Any = None
    days: float | None = key(_SECONDS, lambda v: v > 0, default=None)


#: The keys of a [[node.health]] table: its schema's fields.
HEALTH_KEYS: Final = schema_keys(HealthTable)


def check_health_tables(
    reader: FileReader, where: str, items: object
) -> tuple[Mapping[str, Any], ...]:
    """Check a node's ``[[node.health]]`` tables (``where``: the key), each
    read as a :class:`HealthTable`; the tables as they are written.

    Raises:
        ConfigError: naming the file, the key, what was expected and what it was.
    """
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ConfigError(f"{reader.path}: {where}: expected [[node.health]] tables, got {items!r}")
    for index, item in enumerate(items):
        prefix = f"{where}[{index}]"
        reader.keys(item, prefix, "node.health")  # a misspelt key is named first
        for name, expected in (("name", _NAME), ("check", _CHECKS)):
            if name not in item:
                raise reader.error(f"{prefix}.{name}", expected, None)
        health = read_table(reader, item, prefix, "node.health", HealthTable)
        by_node = isinstance(health.peer, str)
        by_address = isinstance(health.host, str) and type(health.port) is int
        if health.check == "peer" and not (by_node or by_address):
            raise reader.error(f"{prefix}.peer", "a node name (or host and port)", health.peer)
    return tuple(items)
