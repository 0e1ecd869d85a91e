"""Primary-backup replication of a node's store, fenced by a role's revision.

A node that holds a role whose work must survive the loss of its host (disk
included) gives its store a :class:`Replication` (``Store.ship_to``). Each
batch the store commits is then also shipped, over the node's signed links, to
the replica keeper (``_replica``, :mod:`._replica`) of every standby: the other
nodes that may take the role over. The store confirms the batch's writes (its
``sync`` returns) only once every standby in sync has acknowledged that it has
applied and committed the batch.

**The fence.** Every batch carries the role's revision (its holder's fence in
etcd, :class:`~actorctl.etcd.EtcdRoleLease`). A replica refuses a batch whose
revision is older than one it has seen: once a standby has taken the role (a
newer revision), the node it took it from can no longer have anything
confirmed (``ShipRefused``), whatever its own view of the role. etcd decides
who holds the role; replication only follows its fence. A node that knows it
does not hold the role (fence 0) ships nothing and confirms from its own disk:
its senders follow the role elsewhere, and what it took while it held the
role was replicated then.

**A standby that does not answer** within ``timeout`` is out of sync: batches
are confirmed without it (**degraded**: logged loudly once, and counted in
:attr:`Replication.unreplicated`) but only after ``still_holder`` has proved,
against etcd, that this node still holds the role: a node cut off from etcd
and from its standby confirms nothing. Meanwhile the standby is brought back
in a task of its own: the store's rows as they are (a snapshot), then the
batches shipped since, in order; from then on it is in sync again. Why
confirm without it rather than refuse: with two services hosts, the loss of
one must not stop the other from taking work (the replication factor falls to
1 for as long as the standby is away, and says so), as Kafka's leader goes on
with a shrunken in-sync set recorded with its controller.

**A node that stops on purpose** (``release``) has its standbys forget their
copies of its store: its work stays on its own disk for when it starts again,
and the node that takes the role over does not run it too. Its host lost,
nothing is released, and the copy is what the next holder runs.

**Order.** Batches go to each standby one at a time, in the order committed,
their parts numbered within the node's run (its epoch), the same numbers for
every standby; a snapshot says the number of the first part it does not
hold. A replica that misses a number, or knows another epoch (it, or this
node, restarted), asks for a snapshot. So a copy's (epoch, number) says how
far it went, and two standbys' copies of one primary can be compared.

**Three services nodes or more.** Every services node but the holder is a
standby, shipped every batch and waited for. When one of them takes the role
over it takes over its copy of the lost holder's store (its rows are the new
holder's own from then on, and shipped as such), and tells every other
standby, with its first snapshot, how far that copy went
(:meth:`Replication.took`): a standby forgets its own copy of the lost holder
if it goes no further, so what the new holder has since run is not run again
if that standby takes the role later. A copy that goes further (the new
holder's was behind: it had been left out of sync) is kept, and run if its
node takes the role (at least once: never lost for that).
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, Final, final

import attrs
import trio

from ..._errors import ActorctlError
from ..._log import log
from ...actors import ActorRef, Address, Outbox
from ...store import ShipRefused, Store, Write
from ._parts import encode_writes, split_writes

__all__ = ["REPLICA", "Replication", "ReplicationStatistics"]

#: The replica keeper's actor name, on every node that may stand by.
REPLICA: Final = "_replica"
#: Writes shipped while a standby is brought back, kept until its snapshot is in;
#: past this the snapshot is taken again.
BUFFER_WRITES: Final = 100_000
#: Seconds between two attempts to bring a standby back (doubling).
_RESYNC_RETRY: Final = (0.1, 5.0)

_OK: Final = "ok"
_FENCED: Final = "fenced"
_FAILED: Final = "failed"

#: Proves, against etcd, that this node still holds the role (the in-sync
#: standbys' names given, to record): True, or False when it cannot.
StillHolder = Callable[[Collection[str]], Awaitable[bool]]


@final
class _Standby:
    """One standby as the primary sees it."""

    __slots__ = ("address", "buffer", "in_sync", "resyncing", "tried")

    def __init__(self, address: Address) -> None:
        self.address = address
        self.in_sync = False  # batches go to it and are waited for
        self.tried = False  # it was asked to take a snapshot once
        self.resyncing = False  # a task brings it back
        #: Parts shipped while it is brought back, with their numbers.
        self.buffer: list[tuple[int, list[Any]]] = []


@final
@attrs.frozen
class ReplicationStatistics:
    """A primary's replication now: its ``role`` and ``fence`` (0: it does not
    hold the role), each standby (by address) and whether it is in sync,
    whether it confirms with fewer standbys than named (``degraded``), and
    its batches replicated, unreplicated (degraded) and refused."""

    role: str
    fence: int
    standbys: Mapping[str, bool]
    degraded: bool
    replicated: int
    unreplicated: int
    refused: int

    def wire(self) -> dict[str, Any]:
        """Its form in a reply (the services role's ``statistics``)."""
        return {
            "role": self.role,
            "fence": self.fence,
            "standbys": dict(self.standbys),
            "degraded": self.degraded,
            "replicated": self.replicated,
            "unreplicated": self.unreplicated,
            "refused": self.refused,
        }


@final
class Replication:
    """Ships one node's store batches to the standbys of one role.

    Args:
        node: this node's name (the replicas' name for its copy).
        role: the role it replicates for.
        outbox: the node's outbox (its signed links).
        store: the node's store (its snapshot brings a standby back).
        standbys: the replica keepers of the nodes that may take the role
            over, as membership says now.
        fence: the role's revision while this node holds it; 0 when it does not.
        still_holder: proves this node still holds the role (see the module's
            text); None: it confirms nothing without its standbys.
        timeout: seconds a standby has to acknowledge a part.
    """

    def __init__(
        self,
        node: str,
        role: str,
        outbox: Outbox,
        store: Store,
        *,
        standbys: Callable[[], Collection[Address]],
        fence: Callable[[], int],
        still_holder: StillHolder | None,
        timeout: float,
    ) -> None:
        self.node = node
        self.role = role
        self.timeout = float(timeout)
        self._outbox = outbox
        self._store = store
        self._standbys_now = standbys
        self._fence = fence
        self._still_holder = still_holder
        self._epoch = secrets.token_hex(8)
        self._standbys: dict[Address, _Standby] = {}
        self._nursery: trio.Nursery | None = None
        self._stopped = False
        self._released = False
        self._degraded = False
        self._term = 0  # the fence of the last batch shipped
        self._position = 0  # the number of the next part, in this run (epoch)
        #: The copies of other primaries' stores this node took over, each as
        #: far as it went (epoch, next part's number): told to every standby.
        self._taken: dict[str, tuple[str, int]] = {}
        self._joined = trio.lowlevel.ParkingLot()  # a standby came in sync
        #: Batches shipped and acknowledged by every standby.
        self.replicated = 0
        #: Batches confirmed with fewer standbys than named (degraded).
        self.unreplicated = 0
        #: Batches refused (a newer fence, or no proof of holding the role).
        self.refused = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the tasks that bring standbys back, until cancelled. Once it
        has stopped (its node stops: the store commits its last batches after
        everything else has stopped), it ships nothing more."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            self._stopped = True

    async def release(self) -> None:
        """Stop shipping, and have every standby forget its copy of this
        node's store (within ``timeout`` each): the node stops on purpose and
        keeps its work on its own disk, for when it starts again, so the
        node that takes the role over does not run it too. A standby that
        does not answer keeps its copy (its holder may run it: at least once)."""
        if self._released:
            return
        self._stopped = self._released = True
        fence = self._fence()
        if not fence:
            return
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for standby in list(self._standbys.values()):
                    nursery.start_soon(self._release, standby, fence)

    async def _release(self, standby: _Standby, fence: int) -> None:
        # Delivered (settled once handled), not asked: a node that stops takes
        # no reply any more.
        ref = ActorRef(standby.address, self._outbox, timeout=self.timeout)
        try:
            with trio.fail_after(self.timeout):
                await ref.deliver("release", self.node, self.role, fence, self._epoch)
        except (ActorctlError, trio.TooSlowError) as exc:
            log(
                "actorctl:replication:release-failed",
                node=self.node,
                standby=str(standby.address),
                error=f"{type(exc).__name__}: {exc}",
                why="that standby keeps its copy: the next holder runs it too (at least once)",
            )
            return
        log("actorctl:replication:released", node=self.node, standby=str(standby.address))

    def statistics(self) -> ReplicationStatistics:
        """The standbys and whether each is in sync, and the batch counts."""
        return ReplicationStatistics(
            self.role,
            self._fence(),
            {str(a): s.in_sync for a, s in self._standbys.items()},
            self._degraded,
            self.replicated,
            self.unreplicated,
            self.refused,
        )

    def took(self, source: str, epoch: str, position: int) -> None:
        """This node took over its copy of ``source``'s store, which went as
        far as part ``position`` of ``source``'s run ``epoch``: each standby is
        told so with its snapshot, and forgets a copy of ``source`` that goes
        no further (the rows are this node's now, and shipped as such)."""
        self._taken[source] = (epoch, position)

    async def wait_in_sync(self) -> None:
        """Wait until every standby named now is in sync (at once if it is)."""
        while not all(standby.in_sync for standby in self._current()):
            await self._joined.park()

    # -- the store's shipper ----------------------------------------------------------

    async def ship(self, batch: Sequence[Write]) -> None:
        """Ship ``batch`` to every standby in sync and wait for each one's
        acknowledgement (see the module's text).

        Raises:
            ShipRefused: a standby has seen a newer fence, or no standby is in
                sync and this node could not prove it still holds the role.
        """
        fence = self._fence()
        if not fence or self._stopped:
            return
        standbys = self._current()
        if fence != self._term:  # a new term: each standby is brought in before it confirms
            self._term = fence
            for standby in standbys:
                standby.tried = standby.in_sync = False
        # Numbered now, in the order committed: a standby takes part N only
        # after N - 1 (or after a snapshot that goes as far).
        parts = list(enumerate((encode_writes(w) for w in split_writes(batch)), self._position))
        self._position += len(parts)
        refusals: list[str] = []
        async with trio.open_nursery() as nursery:
            for standby in standbys:
                nursery.start_soon(self._ship_to, standby, fence, parts, refusals)
        if refusals:
            self.refused += 1
            raise ShipRefused(refusals[0])
        lagging = [s for s in standbys if not s.in_sync]
        if not standbys or lagging:
            await self._degrade(standbys, lagging)
        else:
            self._restored()
            self.replicated += 1

    def _current(self) -> list[_Standby]:
        named = set(self._standbys_now())
        for address in list(self._standbys):
            if address not in named:
                del self._standbys[address]
        for address in named:
            if address not in self._standbys:
                self._standbys[address] = _Standby(address)
        return list(self._standbys.values())

    async def _ship_to(
        self,
        standby: _Standby,
        fence: int,
        parts: list[tuple[int, list[Any]]],
        refusals: list[str],
    ) -> None:
        if not standby.in_sync and not standby.tried:
            # A standby it has not tried yet is brought in before the batch is
            # confirmed (the snapshot holds the batch): a node that starts
            # with its standby up confirms nothing unreplicated.
            standby.tried = standby.resyncing = True
            try:
                outcome = await self._restore(standby, fence)
            finally:
                standby.resyncing = False
            if outcome == _FENCED:
                refusals.append(self._fenced_off(standby))
            elif outcome == _FAILED:
                self._resync(standby, fence)
            return
        if not standby.in_sync:
            if standby.resyncing:
                standby.buffer.extend(parts)
            self._resync(standby, fence)
            return
        for position, part in parts:
            answer = await self._ask(standby, "apply", fence, position, part)
            if answer is not None and answer.get("ok"):
                continue
            standby.in_sync = False
            if answer is not None and answer.get("fenced"):
                refusals.append(self._fenced_off(standby))
                return
            self._resync(standby, fence)  # it did not answer, or asks for a snapshot
            return

    async def _ask(
        self, standby: _Standby, op: str, fence: int, *args: Any
    ) -> dict[str, Any] | None:
        """``op`` of the standby's replica keeper; None (logged) if it did not
        answer in time."""
        ref = ActorRef(standby.address, self._outbox, timeout=self.timeout)
        try:
            with trio.fail_after(self.timeout):
                answer = await ref.ask(op, self.node, self.role, fence, self._epoch, *args)
        except (ActorctlError, trio.TooSlowError) as exc:
            if standby.in_sync:
                log(
                    "actorctl:replication:standby-lost",
                    node=self.node,
                    role=self.role,
                    standby=str(standby.address),
                    error=f"{type(exc).__name__}: {exc}",
                )
            return None
        return answer if isinstance(answer, dict) else {}

    def _fenced_off(self, standby: _Standby) -> str:
        why = (
            f"role {self.role!r}: standby {standby.address} has seen a newer fence than "
            f"this node's {self._fence()}: another node holds the role now; nothing is "
            "confirmed here"
        )
        log("actorctl:replication:fenced-off", node=self.node, role=self.role, why=why)
        return why

    async def _degrade(self, standbys: list[_Standby], lagging: list[_Standby]) -> None:
        """Confirm without ``lagging`` only once etcd says this node holds the role."""
        in_sync = [str(s.address) for s in standbys if s.in_sync]
        proven = self._still_holder is not None and await self._still_holder(in_sync)
        if not proven:
            self.refused += 1
            raise ShipRefused(
                f"role {self.role!r}: no standby acknowledged the batch "
                f"({', '.join(str(s.address) for s in lagging) or 'none is named'}) and this "
                "node could not prove against etcd that it still holds the role"
            )
        self.unreplicated += 1
        if not self._degraded:
            self._degraded = True
            log(
                "actorctl:replication:degraded",
                node=self.node,
                role=self.role,
                lagging=[str(s.address) for s in lagging],
                in_sync=in_sync,
                why="confirming with fewer copies than asked until the standbys are back: "
                "a loss of this host now loses what it confirmed meanwhile",
            )

    def _restored(self) -> None:
        if self._degraded:
            self._degraded = False
            log("actorctl:replication:in-sync", node=self.node, role=self.role)

    # -- bringing a standby back --------------------------------------------------------

    def _resync(self, standby: _Standby, fence: int) -> None:
        if standby.resyncing or self._nursery is None:
            return
        standby.resyncing = True
        self._nursery.start_soon(self._bring_back, standby, fence)

    async def _bring_back(self, standby: _Standby, fence: int) -> None:
        """Snapshot, then what was shipped since, until it is in sync; retried
        with backoff while it does not answer, for as long as this node holds
        the role under ``fence``."""
        first, longest = _RESYNC_RETRY
        delay = first
        try:
            while self._standbys.get(standby.address) is standby and self._fence() == fence:
                if await self._restore(standby, fence) == _OK:
                    return
                await trio.sleep(delay)
                delay = min(delay * 2, longest)
        finally:
            standby.resyncing = False
            standby.buffer.clear()

    async def _restore(self, standby: _Standby, fence: int) -> str:
        """Bring ``standby`` back: ``_OK``, ``_FENCED`` or ``_FAILED``."""
        # Taken now, before any await: the parts shipped from here on go to
        # the buffer, and replaying them on top of it ends where the store is.
        standby.buffer.clear()
        chunks = split_writes(self._store.snapshot()) or [[]]
        upto = self._position  # the snapshot holds every part numbered before
        taken = {source: list(at) for source, at in self._taken.items()}
        for number, writes in enumerate(chunks):
            first, last = number == 0, number == len(chunks) - 1
            answer = await self._ask(
                standby, "restore", fence, encode_writes(writes), first, last, upto, taken
            )
            if answer is None or not answer.get("ok"):
                return _FENCED if answer is not None and answer.get("fenced") else _FAILED
        while True:
            if len(standby.buffer) > BUFFER_WRITES:
                return _FAILED
            if not standby.buffer:
                standby.in_sync = True  # no await since the buffer emptied
                self._joined.unpark_all()
                log(
                    "actorctl:replication:standby-in-sync",
                    node=self.node,
                    role=self.role,
                    standby=str(standby.address),
                )
                return _OK
            position, part = standby.buffer.pop(0)
            if position < upto:  # buffered before the snapshot was taken, which holds it
                continue
            answer = await self._ask(standby, "apply", fence, position, part)
            if answer is None or not answer.get("ok"):
                return _FENCED if answer is not None and answer.get("fenced") else _FAILED
