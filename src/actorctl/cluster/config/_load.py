"""Reading a cluster.toml: :func:`load_cluster`, which reads each table
(``_reader.py``, ``_node_table.py`` and the tables' own modules) and checks
what only the whole file shows: names and ports used twice, boxed workers
that serve a pool on a node with no app, development mode's addresses.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import attrs

from ..._errors import ConfigError
from ..._schema import read_table
from .._http import parse_listen
from ._boxed_config import boxed_specs
from ._config import ClusterApp, ClusterConfig
from ._dev import check_dev_listen
from ._etcd_config import check_hosts, etcd_settings
from ._node_table import read_node, read_routers
from ._reader import TableReader
from ._table_schemas import ClusterTable, endpoint
from ._tree_config import check_supervisors

__all__ = ["load_cluster"]


def load_cluster(path: Path | str, app: ClusterApp | None = None) -> ClusterConfig:
    """Read and check a cluster.toml.

    Args:
        app: the application whose own tables the file may have (their keys
            checked too); without one, only the runtime's tables are known.

    Raises:
        ConfigError: naming the file, the key and what was expected.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    where = TableReader(path, app)
    where.keys(data, "", "")
    cluster = data.get("cluster", {})
    if not isinstance(cluster, dict):
        raise where.error("cluster", "a table [cluster]", cluster)
    table = read_table(where, cluster, "cluster", "cluster", ClusterTable)
    nodes_data = data.get("node")
    if not isinstance(nodes_data, list) or not nodes_data:
        raise where.error("node", "at least one [[node]] table", nodes_data)
    nodes = tuple(read_node(where, i, item) for i, item in enumerate(nodes_data))
    check_hosts(path, [(node.name, node.runs_on) for node in nodes])
    etcd = etcd_settings(where, data.get("etcd"))
    names = [node.name for node in nodes]
    for duplicate in {n for n in names if names.count(n) > 1}:
        raise ConfigError(f"{path}: node name {duplicate!r} is used twice: names must be unique")
    nodes = read_routers(where, data.get("router", []), nodes)
    supervisor_tables = data.get("supervisor", [])
    trees = check_supervisors(path, supervisor_tables, [node.name for node in nodes])
    nodes = tuple(attrs.evolve(n, supervisors=trees.get(n.name, ())) for n in nodes)
    controller = endpoint(table.controller) or ("", 0)  # checked: never the default
    ports = [node.port for node in nodes]
    ports.append(controller[1])
    for duplicate_port in {p for p in ports if ports.count(p) > 1}:
        raise ConfigError(
            f"{path}: port {duplicate_port} is used twice (by nodes or the controller)"
        )
    boxed = boxed_specs(path, data.get("boxed", []), names)
    for on, spec in boxed:
        if spec.pool is not None and next(n for n in nodes if n.name == on).actors is None:
            raise ConfigError(
                f"{path}: boxed worker {spec.name!r} serves pool {spec.pool!r}, but node "
                f'{on!r} hosts no task app: add actors = "MODULE:APP" and '
                f'pools = ["{spec.pool}"] to it'
            )
    web = None if table.web is None else parse_listen(table.web, "cluster.web")  # checked
    if table.dev and not table.dev_public:
        listens = [(f"node {n.name!r}", n.host, n.port) for n in nodes]
        listens.append(("the controller (cluster.controller)", *controller))
        if web is not None:
            listens.append(("the web page (cluster.web)", *web))
        check_dev_listen(path, listens)
    app_read = {name: where.tables(data[name], name) for name in where.app_tables if name in data}
    return ClusterConfig(
        path=path.resolve(),
        name=table.name,
        nodes=nodes,
        certs=path.parent.resolve() / table.certs,
        keys=path.parent.resolve() / table.keys,
        dev=table.dev,
        dev_public=table.dev_public,
        insecure=table.insecure,
        controller=controller,
        web=web,
        web_window=table.web_window,
        supervisor_tables=tuple(supervisor_tables),
        boxed=tuple(boxed),
        etcd=etcd,
        app=app,
        app_tables={name: read[0] for name, read in app_read.items()},
        app_records={name: read[1] for name, read in app_read.items()},
    )
