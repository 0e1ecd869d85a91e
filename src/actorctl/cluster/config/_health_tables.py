"""The ``[[node.health]]`` tables of cluster.toml, checked as they are read
(``_health_config.py`` makes the checks of them)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from ..._errors import ConfigError

__all__ = ["HEALTH_KEYS", "check_health_tables"]

#: The keys of a [[node.health]] table.
HEALTH_KEYS: Final = frozenset(
    {"name", "check", "interval", "timeout", "breakers", "peer", "host", "port", "path", "days"}
)
_BUILT_IN: Final = ("peer", "disk", "certificate")
_TARGET = re.compile(r"[\w.]+:[\w.]+")


def check_health_tables(
    where: str, items: object, unknown: Callable[[str, object], ConfigError]
) -> tuple[Mapping[str, Any], ...]:
    """Check a node's ``[[node.health]]`` tables (``where``: the key);
    ``unknown`` makes the error for a key that is not one of HEALTH_KEYS.

    Raises:
        ConfigError: naming the key, what was expected and what it was.
    """
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ConfigError(f"{where}: expected [[node.health]] tables, got {items!r}")
    for index, item in enumerate(items):
        key = f"{where}[{index}]"
        for name in item:
            if name not in HEALTH_KEYS:
                raise unknown(f"{key}.{name}", item[name])
        _need(key, item, "name", isinstance(item.get("name"), str) and item["name"], "a name")
        check = item.get("check")
        _need(
            key, item, "check",
            isinstance(check, str) and (check in _BUILT_IN or _TARGET.fullmatch(check)),
            "'peer', 'disk', 'certificate' or MODULE:FUNCTION",
        )  # fmt: skip
        for seconds in ("interval", "timeout", "days"):
            if seconds in item:
                value = item[seconds]
                ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
                _need(key, item, seconds, ok, "a number > 0")
        if "breakers" in item:
            names = item["breakers"]
            ok = isinstance(names, list) and all(isinstance(n, str) and n for n in names)
            _need(key, item, "breakers", ok, 'a list of breaker names, e.g. ["downstream"]')
        if check == "peer":
            by_node = isinstance(item.get("peer"), str)
            by_address = isinstance(item.get("host"), str) and type(item.get("port")) is int
            _need(key, item, "peer", by_node or by_address, "a node name (or host and port)")
    return tuple(items)


def _need(key: str, item: Mapping[str, Any], name: str, ok: object, expected: str) -> None:
    if not ok:
        got = item.get(name)
        shown = "nothing" if got is None else repr(got)
        raise ConfigError(f"key '{key}.{name}': expected {expected}, got {shown}")
