"""A node's membership of a cluster that spans hosts: its record in etcd, under a lease.

A node that runs is a node whose key, ``/actorctl/<cluster>/nodes/<name>``
(:mod:`._node_record`), is in etcd; a node that dies stops renewing its lease
and etcd deletes the key when the lease runs out, so every directory watching
the prefix (:mod:`._etcd_directory`) sees it leave within the lease's ttl,
with nobody having to notice the death. A node that stops on purpose revokes
its lease: it leaves at once.

The lease is renewed every third of its ttl. Losing etcd for a while must not
lose the membership (the issue's "etcd restarted during the run: nodes keep
serving ... and re-register when it is back"), so a renewal that fails is tried
again, a little later each time (up to a third of the ttl), for as long as the
registration lasts, and once etcd answers:

- if the lease still lives (etcd was restarted: a restarted etcd grants every
  lease a full ttl again), the key is checked and written again only if it is
  missing or not this node's;
- if the lease has ended (this node was cut off from etcd longer than the
  ttl, and etcd deleted the key), a new lease is granted and the same key
  written under it: the node joins again.

Every call to etcd is bounded by the client's timeout; nothing here waits on
etcd for longer, and nothing the node does waits on its registration.

**One truth.** Before its first write, and once more after it (two nodes may
register at once), a node reads the records already there and is refused
(:class:`MembershipRefused`, saying why) when one of them would not accept it
or it would not accept one of them (``_node_record.membership_refusal``: a
name taken, a node not in a member's file, a key unknown): it is a member
everywhere, or nowhere.

**Leaving on purpose.** A graceful stop writes the record once more with
``leaving`` set, then revokes the lease: the others tell its leave from a
death. :attr:`Registration.lease_ends` is when the lease ends, as far as this
node can tell (the last renewal that succeeded was sent then minus the ttl):
a node that passes it unrenewed may have been dropped by the others
(``cluster/membership/_member.py`` fences it).

Used by a node started with etcd (``actorctl host up``): :mod:`._member`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final, final

import attrs
import trio

from .._errors import ConfigError
from .._log import log
from ._etcd import MAX_LEASE_TTL, EtcdClient
from ._etcd_data import Compare, Get, Put
from ._etcd_wire import EtcdError
from ._node_record import NodeRecord, membership_refusal, node_key, nodes_prefix

__all__ = [
    "DEFAULT_NODE_TTL",
    "MembershipRefused",
    "Registration",
    "RegistrationStatistics",
    "open_registration",
    "register_node",
]

#: Seconds a dead node stays in the directory (its lease's ttl) by default.
DEFAULT_NODE_TTL: Final = 10


class MembershipRefused(ConfigError):
    """A node may not register: a member would not accept it, or it would not
    accept a member (the message says which, and what to do)."""


@attrs.frozen
class RegistrationStatistics:
    """What a registration has done (:meth:`Registration.statistics`).

    Attributes:
        lease: the lease the key lives under now.
        registered: whether the last call to etcd found the record in place
            (False from a failed renewal until etcd answers again).
        writes: how many times the key was written (1: only the first time).
        outages: how many times a renewal failed after one had succeeded.
    """

    lease: int
    registered: bool
    writes: int
    outages: int


@final
class Registration:
    """A node's record kept in etcd, inside :func:`open_registration`'s block.

    Attributes:
        key: the record's key in etcd.
        record: the record.
        ttl: the lease's ttl, seconds.
    """

    def __init__(
        self, client: EtcdClient, key: str, record: NodeRecord, ttl: int, cluster: str = ""
    ) -> None:
        self.key = key
        self.cluster = cluster
        self.record = record
        self.ttl = ttl
        self._client = client
        self._value = record.to_json()
        self._lease = 0
        self._renewed = 0.0  # when the last renewal (or grant) that succeeded was sent
        self._registered = False
        self._writes = 0
        self._outages = 0
        self._back = trio.Event()  # set while registered
        self._lost = trio.Event()  # set while not

    @property
    def lease(self) -> int:
        """The lease the key lives under now (a new one after the old one ended)."""
        return self._lease

    @property
    def lease_ends(self) -> float:
        """When the lease ends (trio's clock) unless renewed, as far as this
        node can tell: its last renewal that succeeded was sent a ttl before.
        etcd ends it no sooner."""
        return self._renewed + self.ttl

    def statistics(self) -> RegistrationStatistics:
        return RegistrationStatistics(self._lease, self._registered, self._writes, self._outages)

    async def wait_registered(self) -> None:
        """Wait until the last call to etcd found the record in place."""
        await self._back.wait()

    async def wait_unregistered(self) -> None:
        """Wait until a call to etcd fails (or finds the lease ended)."""
        await self._lost.wait()

    async def _register(self) -> None:
        """Put the record in etcd: renew the lease if it lives, else take a new
        one, and write the key unless it already holds the record under it.

        Raises:
            EtcdError: etcd could not be reached (or refused) within the
                client's timeout.
        """
        sent = trio.current_time()
        left = await self._client.keepalive(self._lease) if self._lease else 0
        if left <= 0:
            if self._lease:
                log("actorctl:membership:lease-ended", key=self.key, lease=f"{self._lease:x}")
            # Kept at once: if the write below fails, the next try renews this
            # lease instead of leaving it to run out unused.
            self._lease = await self._client.grant(self.ttl)
        self._renewed = sent
        await self._write_unless_held()
        self._set_registered(True)

    async def _check(self) -> None:
        """Refuse this node if a registered one would not accept it, or it one.

        Raises:
            MembershipRefused: why, and what to do.
            EtcdError: etcd could not be read.
        """
        if not self.cluster:
            return
        snapshot = await self._client.get_prefix(nodes_prefix(self.cluster))
        others = []
        for kv in snapshot.kvs:
            try:
                others.append(NodeRecord.from_json(kv.value))
            except ConfigError:
                continue  # the directory says so (bad-record); it is no member
        why = membership_refusal(self.record, others)
        if why is not None:
            log("actorctl:membership:refused", key=self.key, why=why)
            raise MembershipRefused(
                f"node {self.record.name!r} cannot join cluster {self.cluster!r}: {why}"
            )

    async def _write_unless_held(self) -> None:
        held = [Compare.under_lease(self.key, self._lease), Compare.holds(self.key, self._value)]
        put = Put(self.key, self._value, self._lease)
        answer = await self._client.txn(held, [], [Get(self.key), put])
        if answer.succeeded:
            return
        self._writes += 1
        before = answer.ranges[0]
        if before and before[0].lease not in (0, self._lease):
            # Another lease held this node's name: a node started under the
            # same name (or this one's former process, whose lease has not run out).
            log(
                "actorctl:membership:replaced",
                key=self.key,
                was=before[0].value.decode(errors="replace"),
            )
        event = "registered" if self._writes == 1 else "reregistered"
        log(f"actorctl:membership:{event}", key=self.key, lease=f"{self._lease:x}", ttl=self.ttl)

    def _set_registered(self, registered: bool, *, outage: bool = True) -> None:
        if registered == self._registered:
            return
        self._registered = registered
        if registered:
            self._back.set()
            self._lost = trio.Event()
        else:
            if outage:
                self._outages += 1
            self._lost.set()
            self._back = trio.Event()

    async def keep(self) -> None:
        """Renew the lease every third of its ttl, and register again after
        any failure, until cancelled. Raises nothing but cancellation."""
        while True:
            await trio.sleep_until(self._renewed + self.ttl / 3)
            sent = trio.current_time()
            try:
                left = await self._client.keepalive(self._lease)
            except EtcdError as exc:
                self._failed(str(exc))
                await self._recover()
                continue
            if left > 0:
                self._renewed = sent
            else:
                self._failed(f"etcd says lease {self._lease:x} has ended")
                await self._recover()

    def _failed(self, why: str) -> None:
        log("actorctl:membership:renewal-failed", key=self.key, error=why)
        self._set_registered(False)

    async def _recover(self) -> None:
        """Register again, retrying (each wait longer, up to a third of the ttl)
        until etcd answers."""
        start = trio.current_time()
        delay = self.ttl / 12
        tries = 0
        while True:
            try:
                await self._register()
            except EtcdError as exc:
                tries += 1
                if tries == 1:  # once per outage: the retries say nothing new
                    log("actorctl:membership:register-failed", key=self.key, error=str(exc))
            else:
                log(
                    "actorctl:membership:back",
                    key=self.key,
                    lease=f"{self._lease:x}",
                    seconds=round(trio.current_time() - start, 3),
                )
                return
            await trio.sleep(delay)
            delay = min(delay * 2, self.ttl / 3)

    async def update(self, record: NodeRecord) -> None:
        """Say ``record`` from now on (the node followed a reloaded file: whom
        it knows and trusts changed): written under the lease it lives under
        now. If etcd cannot be reached, the next renewal that registers again
        writes it."""
        self.record, self._value = record, record.to_json()
        if not self._lease:
            return
        try:
            await self._write_unless_held()
        except EtcdError as exc:
            log("actorctl:membership:update-failed", key=self.key, error=str(exc))

    async def deregister(self) -> None:
        """Revoke the lease (the key goes with it), within the client's timeout,
        even when cancelled. If etcd cannot be reached, the key goes when the
        lease runs out."""
        if not self._lease:
            return
        leaving = attrs.evolve(self.record, leaving=True).to_json()
        with trio.CancelScope(shield=True), trio.move_on_after(self._client.timeout):
            try:
                if self._registered:  # the others tell this leave from a death
                    await self._client.put(self.key, leaving, lease=self._lease)
                await self._client.revoke(self._lease)
            except EtcdError as exc:
                log("actorctl:membership:revoke-failed", key=self.key, error=str(exc))
            else:
                log("actorctl:membership:deregistered", key=self.key)
        self._set_registered(False, outage=False)


@asynccontextmanager
async def open_registration(
    client: EtcdClient, cluster: str, record: NodeRecord, *, ttl: int = DEFAULT_NODE_TTL
) -> AsyncIterator[Registration]:
    """Register ``record`` in ``cluster`` for the duration of the block: the
    block is entered once the record is in etcd; the lease is kept alive (and
    the node registered again after any outage) while it runs; leaving it
    revokes the lease, and the node leaves every directory at once.

    Args:
        client: the etcd client.
        cluster: the cluster's name (its keys are under ``/actorctl/<cluster>/``).
        record: what the node says about itself.
        ttl: the lease's ttl, whole seconds: how long a node that died stays listed.

    Raises:
        EtcdError: the first registration failed: etcd could not be reached
            within the client's timeout, or refused it.
        MembershipRefused: a registered node would not accept this one, or
            this one a registered node (a name taken, a node not in the file,
            a key unknown).
        ConfigError: a ttl out of range, or a name that cannot be part of a key.
    """
    if isinstance(ttl, bool) or not isinstance(ttl, int) or not 1 <= ttl <= MAX_LEASE_TTL:
        raise ConfigError(
            f"registration of node {record.name!r}: ttl must be whole seconds in "
            f"1..{MAX_LEASE_TTL}, got {ttl!r}"
        )
    registration = Registration(client, node_key(cluster, record.name), record, ttl, cluster)
    await registration._check()
    try:
        await registration._register()
        await registration._check()  # one that registered meanwhile checked too late
        async with trio.open_nursery() as nursery:
            nursery.start_soon(registration.keep)
            yield registration
            nursery.cancel_scope.cancel(reason="the registration's block ended")
    finally:
        await registration.deregister()


async def register_node(
    client: EtcdClient,
    cluster: str,
    record: NodeRecord,
    ttl: int = DEFAULT_NODE_TTL,
    *,
    task_status: trio.TaskStatus[Registration] = trio.TASK_STATUS_IGNORED,
) -> None:
    """:func:`open_registration` as a task:
    ``await nursery.start(register_node, client, cluster, record, ttl)`` returns
    the :class:`Registration` once the record is in etcd; the node stays
    registered until the task is cancelled, and then leaves at once."""
    async with open_registration(client, cluster, record, ttl=ttl) as registration:
        task_status.started(registration)
        await trio.sleep_forever()
