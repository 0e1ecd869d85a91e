"""The keys of cluster.toml that say where metrics and the web page are
served: a node's ``[node.metrics] listen = "HOST:PORT"`` (read as a
:class:`MetricsTable`), and what the cluster's ``web = "HOST:PORT"`` (the
Controller's page and aggregate ``/metrics``, a field of ``[cluster]``'s
schema, ``_table_schemas.py``) takes.
"""

from __future__ import annotations

from typing import Final, final

import attrs

from ..._errors import ConfigError
from ..._schema import TableReader, key, read_table, schema_keys
from .._http import parse_listen

__all__ = ["LISTEN", "METRICS_KEYS", "MetricsTable", "listen_ok", "metrics_table"]

#: What a key that says where to listen takes.
LISTEN: Final = '"HOST:PORT", e.g. 127.0.0.1:9464 (0: any port)'


def listen_ok(value: str) -> bool:
    """Whether ``value`` is ``HOST:PORT`` (port 0: a free one)."""
    try:
        parse_listen(value, "")
    except ConfigError:
        return False
    return True


@final
@attrs.frozen
class MetricsTable:
    """A node's ``[node.metrics]`` table: where it serves ``/metrics``."""

    listen: str = key(
        '"HOST:PORT" where the node serves /metrics, e.g. 127.0.0.1:9464 (0: any port)', listen_ok
    )


#: The keys of a [node.metrics] table: its schema's fields.
METRICS_KEYS: Final = schema_keys(MetricsTable)


def metrics_table(reader: TableReader, key: str, table: object) -> str | None:
    """A node's [node.metrics] table at ``key``: where it serves /metrics
    (None: no table).

    Raises:
        ConfigError: naming the file and the key, for a table that is not
            ``listen = "HOST:PORT"``.
    """
    if table is None:
        return None
    if not isinstance(table, dict):
        why = 'a table with listen = "HOST:PORT" (where the node serves /metrics; 0: any port)'
        raise reader.error(key, why, table)
    return read_table(reader, table, key, "node.metrics", MetricsTable).listen
