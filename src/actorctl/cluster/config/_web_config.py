"""The keys of cluster.toml that say where metrics and the web page are
served: a node's ``[node.metrics] listen = "HOST:PORT"``, the cluster's
``web = "HOST:PORT"`` (the Controller's page and aggregate ``/metrics``) and
``web_window`` (the rows of each windowed feed the page keeps: a field of
``[cluster]``'s schema, ``_table_schemas.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from ..._errors import ConfigError
from .._http import parse_listen

__all__ = ["METRICS_KEYS", "metrics_table", "web_address"]

#: The keys of a [node.metrics] table.
METRICS_KEYS: Final = frozenset({"listen"})


def metrics_table(path: Path, key: str, table: object) -> str | None:
    """A node's [node.metrics] table: where it serves /metrics (None: no table).

    Raises:
        ConfigError: naming the file and the key, for a table that is not
            ``listen = "HOST:PORT"``.
    """
    if table is None:
        return None
    if not isinstance(table, dict) or set(table) != {"listen"}:
        got = sorted(table) if isinstance(table, dict) else table
        raise ConfigError(
            f"{path}: key '{key}': expected a table with listen = \"HOST:PORT\" only "
            f"(where the node serves /metrics; port 0: any free port), got {got!r}"
        )
    listen = table["listen"]
    if not isinstance(listen, str):
        raise ConfigError(f"{path}: key '{key}.listen': expected \"HOST:PORT\", got {listen!r}")
    try:
        parse_listen(listen, f"{key}.listen")
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return listen


def web_address(path: Path, value: object) -> tuple[str, int] | None:
    """The cluster's ``web`` key: where the Controller serves its page (None: unset).

    Raises:
        ConfigError: naming the file and the key, for a value that is not HOST:PORT.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{path}: key 'cluster.web': expected \"HOST:PORT\", got {value!r}")
    try:
        return parse_listen(value, "cluster.web")
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
