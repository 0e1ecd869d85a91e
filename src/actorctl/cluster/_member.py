"""A node's part in a cluster that spans hosts: its record in etcd, and routing by it.

A node started with etcd endpoints (``actorctl host up``, which runs
``node run ... --etcd URL``) runs :func:`serve_membership` once it listens:

- it **registers** itself (:mod:`._membership`): a :class:`NodeRecord` with its
  address, the id of the key it signs with, its certificate's fingerprint, its
  actors and the pools it serves, under a lease it renews; a graceful stop
  revokes the lease (it leaves every directory at once), a death lets the
  lease run out (it leaves within the ttl);
- it keeps **one directory** of the cluster's nodes (:mod:`._etcd_directory`),
  in memory and watched, and each router that follows a pool
  (``Router.follows_pool``: a task pool's router on the services node) is
  retargeted to the pool's workers as the directory lists them
  (:class:`PoolRouting`). Routing a message reads the router's instances, as
  on one host: no etcd round trip per message.

Nothing is lost when a node leaves: what waits in the backlog for its workers
moves to the others (``Router.retarget``), and what was on its way to them,
unsettled when the connection died, is released by the peer once its node has
been unreachable for the connect timeout and moved by the backlog too
(``_backlog.py``). A task that ran there but whose settlement was lost runs
again elsewhere: at least once, not exactly once.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import final

import trio

from .._log import log
from ..actors import Address
from ..etcd._etcd_directory import EtcdDirectory, NodeChange, open_directory
from ..etcd._membership import open_registration
from ..etcd._node_record import NodeRecord, certificate_fingerprint
from ._node import Node
from ._router import Router
from .config._config import ClusterConfig, NodeConfig
from .config._etcd_config import EtcdSettings

__all__ = ["PoolRouting", "node_record", "serve_membership"]


@final
class PoolRouting:
    """Keeps each router that follows a pool routing to that pool's workers as
    the directory lists them.

    A router starts with the workers its cluster file names: a node that has
    not registered yet (it starts later, or etcd is slow) is routed to as on
    one host. Once a node has been seen in the directory, the directory has
    the last word on it: its workers are routed to while it is listed, and
    not once it has left (until it joins again).

    Args:
        routers: the node's routers; those without ``follows_pool`` are left alone.
    """

    def __init__(self, routers: Sequence[Router]) -> None:
        self._routers = [(r, tuple(r.instances)) for r in routers if r.follows_pool]
        self._seen: set[tuple[str, int]] = set()  # endpoints of nodes ever listed

    @property
    def routers(self) -> list[Router]:
        return [router for router, _ in self._routers]

    def follow(self, directory: EtcdDirectory, change: NodeChange | None = None) -> None:
        """Retarget each router to its pool's workers as ``directory`` lists them
        now (told of ``change``, or the first view)."""
        for record in directory.nodes.values():
            self._seen.add(Address.parse(f"{record.address.rstrip('/')}/_node").endpoint)
        why = (
            f"node {change.name} {'left' if change.kind == 'leave' else 'changed'}"
            if change is not None
            else "the membership in etcd"
        )
        for router, start in self._routers:
            assert router.follows_pool is not None
            wanted = list(directory.pool_workers(router.follows_pool))
            wanted += [a for a in start if a.endpoint not in self._seen and a not in wanted]
            if not wanted:
                # Every worker gone: what it holds waits for one to join.
                log("actorctl:router:no-workers", router=router.follows_pool, why=why)
                continue
            if set(wanted) != set(router.instances):
                router.retarget(wanted, why)


def node_record(
    node: Node, config: ClusterConfig, node_config: NodeConfig, pools: Mapping[str, Sequence[str]]
) -> NodeRecord:
    """What ``node`` (running, as ``node_config`` of ``config``) says about itself in etcd."""
    return NodeRecord(
        name=node.name,
        address=config.url(node_config),
        key_id=node.identity.key_id if node.identity is not None else "",
        fingerprint=certificate_fingerprint(node.tls.cert) if node.tls is not None else "",
        actors=sorted(node.cells),
        pools={pool: list(workers) for pool, workers in pools.items()},
        started=time.time(),
    )


async def serve_membership(
    node: Node,
    record: NodeRecord,
    cluster: str,
    settings: EtcdSettings,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Follow ``cluster``'s directory (retargeting ``node``'s pool routers by it)
    and keep ``record`` registered, until cancelled; then deregister. Reports
    started once the record is in etcd.

    Raises:
        EtcdError: etcd could not be reached at the start (naming each endpoint).
        ConfigError: a record or ttl that etcd cannot take.
    """
    client = settings.client()
    routers = [cell.actor for cell in node.cells.values() if isinstance(cell.actor, Router)]
    routing = PoolRouting(routers)
    directory: EtcdDirectory | None = None

    def changed(change: NodeChange) -> None:
        if change.kind == "join":  # (back) up: dial it now, whatever its breaker says
            node.outbox.peer_back(Address.parse(f"{change.record.address.rstrip('/')}/_node"))
        if directory is not None:  # the first view is applied below, at once
            routing.follow(directory, change)

    async with open_directory(client, cluster, on_change=changed) as opened:
        directory = opened
        routing.follow(directory)
        async with open_registration(client, cluster, record, ttl=settings.ttl):
            log(
                "actorctl:membership:member",
                node=record.name,
                address=record.address,
                pools=dict(record.pools),
                routers=[r.follows_pool for r in routing.routers],
            )
            task_status.started()
            await trio.sleep_forever()
