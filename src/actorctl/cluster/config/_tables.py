"""Every table of cluster.toml with the keys it may and must have: the one
place to add a table or a key (``KNOWN_KEYS``, ``REQUIRED_KEYS``), and the
keys of a file read for an application that declares tables of its own
(``file_keys``). ``_reader.py`` checks a table against them;
docs/cluster-toml.md describes each (tests/docs/test_cluster_toml_doc.py checks it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ..._schema import schema_keys, schema_required
from ...supervision import CHILD_KEYS, SUPERVISOR_KEYS
from ..link._limits import LIMIT_NAMES
from ._boxed_config import BOXED_KEYS
from ._etcd_config import ETCD_KEYS, EtcdTable
from ._health_tables import HEALTH_KEYS
from ._table_schemas import ClusterTable, NodeTable, RouterTable
from ._web_config import METRICS_KEYS, MetricsTable

if TYPE_CHECKING:
    from ._config import ClusterApp

__all__ = [
    "HOST_KEY",
    "KNOWN_KEYS",
    "NODE_KEYS",
    "OPEN_TABLES",
    "REQUIRED_KEYS",
    "SINGLE_TABLES",
    "file_keys",
]

#: The key of a [[node]] table that says where it runs (read by `host up`, not the node).
HOST_KEY: Final = "host"
#: The keys of a [[node]] table this layer reads; an actors factory reads others.
NODE_KEYS: Final = schema_keys(NodeTable) - {HOST_KEY}
#: Every table of the file ("" is the top level) with the keys it may have: the one
#: place to add a table (a table read as a record: its schema's fields, _table_schemas.py).
#: A key that is not here is refused, with the nearest
#: known key; a [[node]] table may also have those its actors factory reads (_hosting).
#: docs/cluster-toml.md describes each (tests/docs/test_cluster_toml_doc.py checks it).
KNOWN_KEYS: Final[dict[str, frozenset[str]]] = {
    "": frozenset(
        {"cluster", "node", "router", "supervisor", "boxed"} | {"etcd"}  # read by _etcd_config.py
    ),
    "cluster": schema_keys(ClusterTable),
    "node": NODE_KEYS | {HOST_KEY},
    "node.limits": frozenset(LIMIT_NAMES),
    "node.metrics": METRICS_KEYS,
    "node.deadletters": frozenset({"max", "ttl"}),
    "node.health": HEALTH_KEYS,  # _health_tables.py
    "router": schema_keys(RouterTable),
    "supervisor": SUPERVISOR_KEYS,  # _tree_config.py, with supervision's words
    "supervisor.child": CHILD_KEYS,
    "boxed": BOXED_KEYS,  # _boxed_config.py
    "etcd": ETCD_KEYS,  # a cluster on several hosts (_etcd_config.py)
}
#: The keys a table must have: a missing one is reported as missing, naming a
#: key of the table that looks like a misspelling of it.
REQUIRED_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "node": schema_required(NodeTable),
    "router": schema_required(RouterTable),
    "etcd": schema_required(EtcdTable),
    "node.metrics": schema_required(MetricsTable),
}
#: The tables that are one table ([etcd]), not an array of them ([[node]]).
SINGLE_TABLES: Final = frozenset({"cluster", "etcd", "node.limits", "node.metrics"})
#: Tables that may have keys besides the known ones (read by someone else).
OPEN_TABLES: Final = frozenset({"node"})


def file_keys(app: ClusterApp | None = None) -> dict[str, frozenset[str]]:
    """Every table a file read with ``app`` may have, with its keys: the
    runtime's (``KNOWN_KEYS``) and the application's own arrays of tables.
    (A ``[[node]]`` table may also have the keys its actors factory reads.)"""
    known = dict(KNOWN_KEYS)
    for table in app.tables if app is not None else ():
        known[table.name] = table.known
    known[""] = known[""] | {table.name for table in (app.tables if app is not None else ())}
    return known
