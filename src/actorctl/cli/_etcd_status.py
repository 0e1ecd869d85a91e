"""``cluster status`` of a cluster that spans hosts: asked of etcd and of each
registered node, since no one Controller runs it (``host up`` on each host)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncclick as click

from ..cluster import CLI_NAME, ClusterConfig, EtcdClient, hosts_tree, open_node

__all__ = ["etcd_option", "hosts_status"]

etcd_option = click.option(
    "--etcd",
    "etcd",
    multiple=True,
    metavar="URL",
    help="An etcd endpoint (repeat for each member), e.g. http://10.0.0.1:2379; "
    "default: the file's [etcd] endpoints.",
)


async def hosts_status(
    config: ClusterConfig, endpoints: Sequence[str], timeout: float
) -> dict[str, Any]:
    """The tree of ``config``'s cluster across its hosts: who is registered in
    etcd at ``endpoints``, each asked for its own tree as the ``cli`` member.

    Raises:
        EtcdError: etcd did not answer at any endpoint (each named).
        ConfigError: a wrong endpoint, or the ``cli`` member's files missing.
    """
    client = EtcdClient(endpoints, timeout=timeout)
    async with open_node(
        CLI_NAME,
        host=None,
        grace=0.5,
        connect_timeout=min(2.0, timeout),
        **config.security(CLI_NAME),
    ) as node:
        return await hosts_tree(config, client, node.ref)
