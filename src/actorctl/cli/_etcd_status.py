"""``cluster status`` of a cluster that spans hosts: asked of etcd and of each
registered node, since no one Controller runs it (``host up`` on each host)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncclick as click

from .._errors import ConfigError
from ..cluster import ClusterConfig, EtcdSettings, Node, hosts_tree

__all__ = ["etcd_option", "etcd_settings", "hosts_status"]

etcd_option = click.option(
    "--etcd",
    "etcd",
    multiple=True,
    metavar="URL",
    help="An etcd endpoint (repeat for each member), e.g. http://10.0.0.1:2379; "
    "default: the file's [etcd] endpoints.",
)


def etcd_settings(config: ClusterConfig, endpoints: Sequence[str]) -> EtcdSettings:
    """Where etcd is for ``config``: ``endpoints`` (``--etcd``) over its [etcd] table.

    Raises:
        ConfigError: neither says, or an endpoint is not a URL.
    """
    if config.etcd is None and not endpoints:
        raise ConfigError(
            f"{config.path}: no etcd to register in: add an [etcd] table "
            '(endpoints = ["http://HOST:2379"]) or pass --etcd URL'
        )
    settings = config.etcd or EtcdSettings(tuple(endpoints))
    return settings.with_endpoints(endpoints)


async def hosts_status(
    config: ClusterConfig, settings: EtcdSettings, node: Node, timeout: float
) -> dict[str, Any]:
    """The tree of ``config``'s cluster across its hosts: who is registered in
    the etcd of ``settings``, each asked for its own tree from ``node`` (the
    ``cli`` member's).

    Raises:
        EtcdError: etcd did not answer at any endpoint (each named).
        ConfigError: a wrong endpoint, or a TLS file that cannot be read.
    """
    return await hosts_tree(config, settings.client(timeout), node.ref)
