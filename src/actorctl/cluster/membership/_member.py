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
moves to the others (``Router.retarget``). A node whose lease *ended* (it
died, or it is cut off: it left without saying ``leaving``) is taken for
dead at once: the connection to it is dropped and what it held unsettled is
released (``NodeOutbox.peer_lost``) and moved by the backlog too
(``outbox/_backlog.py``), without waiting for the AMQP idle timeout (the lease's
ttl too, ``ops/_build.py``) or the connect timeout. A node that stops on
purpose says ``leaving`` first: what it holds it settles as it drains. A task
that ran there but whose settlement was lost runs again elsewhere: at least
once, not exactly once.

**Fencing.** A node whose lease has ended (its last renewal that succeeded
was sent a ttl ago, ``Registration.lease_ends``) while it has heard nothing
from any other host for half a ttl is cut off: the others may have dropped
it. It raises its fence (``_fence.py``) until it registers again or hears
from another host, so that what was sent elsewhere does not also start here
late. While etcd itself is down the nodes still hear from each other, and
keep serving.

**One truth.** The record says whom the node takes for members (its file's
node names, the member keys it trusts): a node that a member would not
accept, or that would not accept a member, is refused before it registers
(``etcd/_membership.py``, ``MembershipRefused``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import final
from urllib.parse import urlsplit

import attrs
import trio

from ..._log import log
from ...actors import Address
from ...etcd._etcd_directory import EtcdDirectory, NodeChange, open_directory
from ...etcd._membership import Registration, open_registration
from ...etcd._node_record import NodeRecord, certificate_fingerprint
from .._node import Node
from .._router import Router
from ..config._config import ClusterConfig, NodeConfig
from ..config._etcd_config import EtcdSettings
from ._fence import Fence

__all__ = ["PoolRouting", "keep_fence", "node_record", "serve_membership"]


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
    node: Node, config: ClusterConfig, node_config: NodeConfig, workers: Mapping[str, Sequence[str]]
) -> NodeRecord:
    """What ``node`` (running, as ``node_config`` of ``config``) says about itself
    in etcd: ``workers`` by pool, and the fields an older release named
    otherwise under those names too (``record_aliases`` of the file's
    application), so that nodes of that release still read them."""
    return NodeRecord(
        name=node.name,
        address=config.url(node_config),
        key_id=node.identity.key_id if node.identity is not None else "",
        fingerprint=certificate_fingerprint(node.tls.cert) if node.tls is not None else "",
        actors=sorted(node.cells),
        workers={pool: list(names) for pool, names in workers.items()},
        started=time.time(),
        knows=config.member_names,
        trusts=sorted(node.keyring.members) if node.keyring is not None else (),
        aliases=config.app.record_aliases if config.app is not None else {},
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
    started once the record is in etcd. The directory reads its peers' records
    with ``record.aliases`` (a peer of an older release wrote a field under
    its old name).

    Raises:
        EtcdError: etcd could not be reached at the start (naming each endpoint).
        ConfigError: a record or ttl that etcd cannot take.
    """
    client = settings.client()
    routers = [cell.actor for cell in node.cells.values() if isinstance(cell.actor, Router)]
    routing = PoolRouting(routers)
    directory: EtcdDirectory | None = None

    def changed(change: NodeChange) -> None:
        where = Address.parse(f"{change.record.address.rstrip('/')}/_node")
        if change.kind == "join":  # (back) up: dial it now, whatever its breaker says
            node.outbox.peer_back(where)
        if directory is not None:  # the first view is applied below, at once
            routing.follow(directory, change)
        if change.kind == "leave" and not change.record.leaving and change.name != node.name:
            # Its lease ended: dead or cut off. Routers route elsewhere (above);
            # what it held unsettled goes elsewhere now.
            node.outbox.peer_lost(where, f"its lease in etcd ended ({settings.ttl} s ttl)")

    async with open_directory(client, cluster, on_change=changed, aliases=record.aliases) as opened:
        directory = opened
        routing.follow(directory)
        async with (
            open_registration(client, cluster, record, ttl=settings.ttl) as registration,
            trio.open_nursery() as nursery,
        ):
            besides = urlsplit(record.address).hostname or ""
            nursery.start_soon(
                keep_fence,
                node.outbox.fence,
                registration,
                functools.partial(node.last_heard, besides),
            )
            log(
                "actorctl:membership:member",
                node=record.name,
                address=record.address,
                workers=dict(record.workers),
                routers=[r.follows_pool for r in routing.routers],
            )

            async def follow(config: ClusterConfig | None) -> None:
                await registration.update(_followed(node, registration.record, config))

            node.followers.append(follow)
            try:
                task_status.started()
                await trio.sleep_forever()
            finally:
                node.followers.remove(follow)


def _followed(node: Node, record: NodeRecord, config: ClusterConfig | None) -> NodeRecord:
    """``record`` once ``node`` followed a reloaded file ``config`` (None: read
    its keys again): whom it knows and whose member keys it trusts now."""
    knows = config.member_names if config is not None else record.knows
    trusts = sorted(node.keyring.members) if node.keyring is not None else record.trusts
    return attrs.evolve(record, knows=knows, trusts=trusts)


async def keep_fence(
    fence: Fence, registration: Registration, last_heard: Callable[[], float | None]
) -> None:
    """Raise ``fence`` while the registration's lease has ended unrenewed and
    ``last_heard()`` (when another host was last heard from) is more than half
    a ttl ago; lower it once the lease is renewed or another host is heard.
    Looks every sixth of a ttl while the lease is past its end; sleeps until
    its end otherwise. Runs until cancelled."""
    ttl = registration.ttl
    while True:
        now = trio.current_time()
        ends = registration.lease_ends
        if now < ends:
            fence.lower()
            await trio.sleep_until(ends)
            continue
        heard = last_heard()
        if heard is None or now - heard > ttl / 2:
            fence.raise_(
                f"its lease in etcd ended {now - ends:.1f} s ago unrenewed, and no other "
                f"host has been heard from for {ttl / 2:g} s: it may be cut off, and its "
                "work sent elsewhere"
            )
        else:
            fence.lower()
        await trio.sleep(ttl / 6)
