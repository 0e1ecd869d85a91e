"""The one composition root: a node, built from its configuration.

Every process that runs a node builds it here: ``actorctl node run`` (the
processes that ``cluster up`` and ``host up`` start), the Foreman's in-process
node (``cluster up --in-process``) and the testing kit. So the three agree on
what a node hosts and how it is made: its actors factory's actors
(``actors = "MODULE:OBJECT"``, with their health checks), its routers, the
supervision trees and boxed workers cluster.toml gives it, its store, its
dead-letter bounds, its limits and its metrics endpoint. A name that two of
these claim is a ``ConfigError`` naming both, never one silently replacing
the other.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from .._errors import ConfigError
from ..actors import Address
from ..cluster._hosting import hosted_actors
from ..cluster._node import Node
from ..cluster._node_records import (
    DEFAULT_SUPERVISION,
    NodeSecurity,
    NodeStorage,
    NodeSupervision,
)
from ..cluster._router import Router
from ..cluster._supervised import Hostable
from ..cluster.config._config import ClusterConfig, NodeConfig
from ..cluster.link._limits import Limits
from ..store import Store

__all__ = ["build_node", "node_actors"]


def node_actors(
    node: NodeConfig,
    config: ClusterConfig | None = None,
    *,
    routes: Iterable[tuple[str, Sequence[str]]] = (),
    actors: Mapping[str, Hostable] | None = None,
) -> dict[str, Hostable]:
    """Everything ``node`` hosts, by the name each is reachable under.

    Args:
        node: the node's table.
        config: its cluster's file (None: a node outside a cluster).
        routes: routers it hosts, each a logical name with its instances'
            addresses (``config.routes(node)``, or ``--route`` of ``node run``).
        actors: the actors themselves, instead of asking ``node.actors``'s
            factory (the testing kit, which holds the app object already).

    Raises:
        ConfigError: naming what is wrong, or a name claimed twice.
    """
    if actors is None:
        hosted: dict[str, Hostable] = dict(
            hosted_actors(node.actors, node.instances, node=node, cluster=config)
        )
    else:
        hosted = dict(actors)
    claimed = dict.fromkeys(hosted, "an actor")

    def add(kind: str, name: str, what: Hostable) -> None:
        if name in hosted:
            raise ConfigError(
                f"{kind} {name!r}: node {node.name!r} has {claimed[name]} of that name "
                f"(give the {kind} another name)"
            )
        hosted[name] = what
        claimed[name] = f"a {kind}"

    for logical, addresses in routes:
        add("router", logical, Router([Address.parse(a) for a in addresses]))
    if config is not None:
        for tree in config.supervisor_specs(node):
            add("supervisor", tree.name, tree)
        for boxed in config.boxed_specs(node):
            add("boxed worker", boxed.name, boxed)
    return hosted


def build_node(
    node: NodeConfig,
    config: ClusterConfig | None,
    hosted: Mapping[str, Hostable],
    *,
    security: NodeSecurity,
    limits: Limits | None = None,
    metrics: str | None = None,
    store: Store | None = None,
    supervision: NodeSupervision | None = None,
    clock: Callable[[], float] = time.time,
) -> Node:
    """The :class:`Node` that ``node``'s table describes, hosting ``hosted``
    (:func:`node_actors`): not started (``nursery.start(node.serve)``).

    Args:
        security: its TLS files and keyring (``config.security(name)``), or
            ``INSECURE``.
        limits: its resource bounds; default its ``[node.limits]``'s.
        metrics: where it serves ``/metrics``; default its ``[node.metrics]``.
        store: its durable store; default its cluster's (``data/NODE/``, or in
            memory for ``durable = false``), in memory outside a cluster.
        supervision: its restart intensity, peers' breaker and timeouts;
            default the defaults, with, in a cluster with ``[etcd]``, its
            lease's ttl as the idle timeout.
        clock: its wall clock (the testing kit's follows trio's clock).
    """
    if store is None and config is not None:
        store = config.store(node)
    if supervision is None:
        supervision = DEFAULT_SUPERVISION
        if config is not None and config.etcd is not None:
            # A peer silent for the lease's ttl is taken for dead, as etcd takes
            # a node whose lease ran out (both within the ttl, docs/deploy.md).
            supervision = attrs.evolve(supervision, idle_timeout=float(config.etcd.ttl))
    return Node(
        node.name,
        hosted,
        host=node.host,
        port=node.port,
        security=security,
        limits=limits if limits is not None else node.bounds,
        storage=NodeStorage(store=store, dead_letters=node.deadletters),
        supervision=supervision,
        clock=clock,
        metrics=metrics or node.metrics,
        cluster_app=config.app if config is not None else None,
    )
