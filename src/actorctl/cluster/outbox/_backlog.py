"""The outgoing backlog: what a node has taken on to send, kept until the
receiver accepts it.

A durable send (``outbox.send(..., durable=True)``) returns once the message is
in the node's store (one group commit with a durable store), not once it is on
the wire: a worker hands over its follow-ups this way and is free at once, and
what it handed over outlives the node. One publisher task per target actor sends
its messages oldest first, as credit allows; a message leaves the backlog when
its receiver accepts it, or refuses it for good (rejected: logged). A message
whose peer cannot be reached waits (with the rest of its lane) until the peer
is back, unless it may go elsewhere (a router's, which moves it to another
instance): such a message leaves the lane once the peer has been unreachable
for the connect timeout, as do those queued behind it later. One the receiver
could not take (``modified``, released) is sent again later, with backoff; one
that a router moves on from instance to instance because each refuses it
(``modified``: every circuit breaker open) moves with the same backoff.
Either way for as long as the node lives, and from the store again after a
restart. Order: highest ``priority`` header first (0-9; 4 when it has none),
then oldest first, except that a message sent again goes behind those of its
priority that wait. A message refused past its ``absolute-expiry-time`` (every
instance refused it until its deadline), or whose deadline passes while it
waits for its peer to come back, is not sent again: it goes to the node's dead
letters (``cluster/_deadletters.py``), reason ``expired``.
"""

from __future__ import annotations

import collections
import functools
import itertools
import math
from collections.abc import Callable, Collection
from typing import Final, final

import attrs
import trio

from ..._errors import ActorctlError, PeerUnavailable
from ..._log import log
from ...actors import Address
from ...mailbox import EXPIRED, PEER_UNAVAILABLE, Envelope, Outcome, decode, encode
from ...store._store import Store
from .._deadletters import REASON_EXPIRED, DeadLetters
from ..link._pending import Pending
from ..link.peer._peer import Peer

__all__ = ["BACKLOG_TABLE", "Backlog", "Reroute"]

TABLE: Final = "backlog"
#: The store table of the backlog, for whoever takes another node's rows over.
BACKLOG_TABLE: Final = TABLE
#: The header that orders a lane (AMQP's priority: 0-9, 4 by default).
PRIORITY: Final = "priority"
PRIORITY_DEFAULT: Final = 4
_RETRY_FIRST: Final = 0.1
_RETRY_MAX: Final = 30.0

#: Told each refusal of a message; returns where to send it instead, or None
#: to keep trying the same receiver (a router moves a task to another worker).
Reroute = Callable[[Address, Outcome], Address | None]
#: Told the final outcome of a message (accepted, or rejected for good).
Done = Callable[[Outcome], None]


@final
class _Entry:
    __slots__ = ("address", "attempts", "envelope", "fled", "key", "on_done", "priority", "reroute")

    def __init__(
        self,
        key: str,
        address: Address,
        envelope: Envelope,
        on_done: Done | None = None,
        reroute: Reroute | None = None,
    ) -> None:
        #: Its row in the store: its own, never another entry's (see ``Backlog.add``).
        self.key = key
        self.address = address
        self.envelope = envelope
        self.on_done = on_done
        self.reroute = reroute
        self.attempts = 0
        self.priority = _priority(envelope)
        # It left a lane whose peer was unreachable, and has not been sent
        # since: it waits where it went rather than move again (were every
        # instance down, it would go round them without end).
        self.fled = False


@final
class _Lane:
    """The messages waiting for one target actor, and the task that sends them."""

    __slots__ = ("lot", "queue")

    def __init__(self) -> None:
        self.queue: collections.deque[_Entry] = collections.deque()
        self.lot = trio.lowlevel.ParkingLot()


@final
class Backlog:
    """A node's outgoing backlog (the outbox owns it; see the module docstring).

    Args:
        name: the node's name, for logs.
        store: where entries are kept (durable, or in memory).
        open_peer: the connection to a node (the outbox's).
        clock: wall-clock seconds (a message is signed afresh when it goes out).
        dead_letters: where a message refused past its expiry goes (None: it
            is dropped, and logged).
    """

    def __init__(
        self,
        name: str,
        store: Store,
        open_peer: Callable[[Address], Peer],
        clock: Callable[[], float],
        dead_letters: DeadLetters | None = None,
    ) -> None:
        self.name = name
        self._dead_letters = dead_letters
        self._store = store
        self._open_peer = open_peer
        self._clock = clock
        self._lanes: dict[Address, _Lane] = {}
        # The serial numbers of its rows' keys; once started, past those kept.
        self._keys = itertools.count(1)
        self._nursery: trio.Nursery | None = None
        self._emptied = trio.lowlevel.ParkingLot()
        # Entries read back from the store, by their row's key, until they are
        # done: their sender (a router) may claim them again (adopt).
        self._resumed: dict[str, _Entry] = {}
        # Told when entries were resumed from the store while it runs (by name:
        # a router that starts again replaces its own).
        self._on_resume: dict[str, Callable[[], None]] = {}
        #: Messages it sent again after a refusal (``modified``, released, an
        #: unreachable peer) since the node started.
        self.resent = 0

    def __len__(self) -> int:
        return self._store.count(TABLE)

    async def wait_empty(self) -> None:
        """Wait until every message it holds has been settled by its receiver."""
        while len(self):
            await self._emptied.park()

    def start(self, nursery: trio.Nursery) -> None:
        """Publish from now on, starting with what the store kept from before."""
        self._nursery = nursery
        kept = self._store.items(TABLE)
        self._keys = itertools.count(1 + max((_serial(key) for key, _ in kept), default=0))
        for key, value in kept:
            self._send_kept(key, value)
        if kept:
            log("actorctl:backlog:resumed", node=self.name, messages=len(kept))

    def _send_kept(self, key: str, value: bytes) -> bool:
        """Send the row ``key`` the store holds (kept from before, or taken
        over); one that cannot be read is logged and deleted (False)."""
        try:
            address, envelope = _unpack(value)
        except (ActorctlError, ValueError) as exc:
            log("actorctl:backlog:unreadable", node=self.name, key=key, error=str(exc))
            self._store.delete(TABLE, key)
            return False
        entry = self._resumed[key] = _Entry(key, address, envelope)
        self._queue(entry)
        return True

    async def add(
        self,
        address: Address,
        envelope: Envelope,
        *,
        on_done: Done | None = None,
        reroute: Reroute | None = None,
    ) -> None:
        """Take ``envelope`` on: returns once it is stored (committed, with a
        durable store); it is sent until its receiver settles it, from the
        start: on its way while the commit is (a sender that dies before the
        commit has not settled what made it send, which is then sent again:
        at least once, as ever).

        Each entry is a row of its own, keyed by its message id and a serial
        number: the same message may be held twice here, for two receivers (a
        task a node sends to its own pool's router, which hands it back to
        this backlog for a worker under the same id). The first one's
        settlement deletes its own row, never the other's."""
        key = f"{envelope.message_id}#{next(self._keys)}"
        entry = _Entry(key, address, envelope, on_done, reroute)
        self._store.put(TABLE, key, _pack(address, entry.envelope))
        self._queue(entry)
        await self._store.sync()

    def resume(self, keys: Collection[str]) -> int:
        """Send the entries under ``keys`` that were put in the store while the
        node runs (rows taken over from another node's store, a replica's),
        as :meth:`start` sends what the store kept from before; then tell
        whoever asked (:meth:`on_resume`: a router adopts those for its
        instances). Returns how many."""
        resumed = 0
        for key in keys:
            value = self._store.get(TABLE, key)
            if value is not None and key not in self._resumed:
                resumed += self._send_kept(key, value)
        # Rows taken over keep their keys: this node's next ones come after them.
        top = max((_serial(key) for key in keys), default=0)
        self._keys = itertools.count(max(next(self._keys), top + 1))
        if resumed:
            log("actorctl:backlog:resumed", node=self.name, messages=resumed, taken_over=True)
            for tell in list(self._on_resume.values()):
                tell()
        return resumed

    def on_resume(self, name: str, tell: Callable[[], None]) -> None:
        """Call ``tell`` after each :meth:`resume` (``name``'s: a later call
        under the same name replaces it)."""
        self._on_resume[name] = tell

    def adopt(
        self, addresses: Collection[Address], claim: Callable[[Address, str], tuple[Done, Reroute]]
    ) -> int:
        """Give the entries read back from the store that go to one of
        ``addresses`` the outcome handler and the reroute that ``claim`` makes for
        each: a router that restarted takes back the tasks its node held for its
        instances (so they move to another instance again). Returns how many."""
        adopted = 0
        for entry in self._resumed.values():
            if entry.reroute is None and entry.on_done is None and entry.address in addresses:
                entry.on_done, entry.reroute = claim(entry.address, entry.envelope.message_id)
                adopted += 1
                lane = self._lanes.get(entry.address)
                if lane is not None:  # one that waits for its peer may go elsewhere now
                    lane.lot.unpark()
        return adopted

    def evacuate(self, addresses: Collection[Address], why: str) -> int:
        """Move what waits here for ``addresses`` (actors a router no longer
        routes to: ``cluster reload`` drains their node) to where each entry's
        router sends it now. The first of each lane stays: it may be on its way
        out, and the node it goes to finishes what it has before it stops.
        Returns how many moved."""
        released = Outcome("released", None, why)
        moved: list[_Entry] = []
        for address in addresses:
            lane = self._lanes.get(address)
            if lane is None or len(lane.queue) < 2:
                continue
            staying = [lane.queue[0]]
            for entry in list(lane.queue)[1:]:
                elsewhere = entry.reroute(address, released) if entry.reroute else None
                if elsewhere is None or elsewhere == address:
                    staying.append(entry)
                    continue
                entry.address = elsewhere
                entry.envelope = attrs.evolve(entry.envelope, to=str(elsewhere))
                self._store.put(TABLE, entry.key, _pack(elsewhere, entry.envelope))
                moved.append(entry)
            lane.queue.clear()
            lane.queue.extend(staying)
        for entry in moved:
            self._queue(entry)
        return len(moved)

    def reconsider(self, endpoint: tuple[str, int]) -> None:
        """Let what waits here for the node at ``endpoint`` ask its reroute again,
        however often it asked before: where it may go has changed (the role
        of that node moved to another). What goes to a node that answers stays
        on its way there."""
        for address, lane in self._lanes.items():
            if address.endpoint == endpoint and lane.queue:
                for entry in lane.queue:
                    entry.fled = False
                lane.lot.unpark()

    def _queue(self, entry: _Entry) -> None:
        lane = self._lanes.get(entry.address)
        if lane is None:
            if self._nursery is None:
                raise ActorctlError(f"node {self.name!r} is not running: its backlog cannot send")
            lane = self._lanes[entry.address] = _Lane()
            self._nursery.start_soon(self._publish, entry.address, lane)
        queue = lane.queue
        if not queue or queue[-1].priority >= entry.priority:
            queue.append(entry)
        else:
            # Ahead of the lower priorities that wait, behind its equals; never
            # ahead of the first, which may be on its way out.
            at = len(queue)
            while at > 1 and queue[at - 1].priority < entry.priority:
                at -= 1
            queue.insert(at, entry)
        lane.lot.unpark()

    def waiting_for(self, endpoint: tuple[str, int]) -> bool:
        """Whether messages for the node at ``endpoint`` wait here to be sent."""
        return any(
            lane.queue for address, lane in self._lanes.items() if address.endpoint == endpoint
        )

    async def _publish(self, address: Address, lane: _Lane) -> None:
        queue = lane.queue
        while True:
            while not queue:
                await lane.lot.park()
            entry = queue[0]
            # Looked up for each message: an idle connection may have been
            # closed and forgotten since the last one (``_idle.py``).
            peer = self._open_peer(address)
            envelope = attrs.evolve(entry.envelope, creation_time=self._clock())
            pending = Pending(
                address.name,
                envelope,
                envelope.message_id,
                on_outcome=functools.partial(self._settled, entry),
            )
            try:
                await peer.transmit(pending)
            except PeerUnavailable as exc:
                log(
                    "actorctl:backlog:waiting",
                    node=self.name,
                    target=str(address),
                    messages=len(queue),
                    reason=str(exc),
                )
                await self._wait_for_peer(peer, lane, str(exc))
                continue
            queue.popleft()
            entry.fled = False

    async def _wait_for_peer(self, peer: Peer, lane: _Lane, reason: str) -> None:
        """Wait until ``peer`` is back; meanwhile, what may go elsewhere leaves
        the lane, as it comes."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._flee, lane, reason)
            await peer.wait_connected()
            nursery.cancel_scope.cancel(reason="the peer is back")

    async def _flee(self, lane: _Lane, reason: str) -> None:
        """Hand each entry of ``lane`` that has a reroute (and did not just come
        from another unreachable peer) to it, now and whenever more are queued;
        the others keep their place, until their ``absolute-expiry-time``
        passes: then they are dead letters (the peer may never come back)."""
        outcome = Outcome("released", PEER_UNAVAILABLE, reason)
        while True:
            queue = lane.queue
            now = self._clock()
            moving = [e for e in queue if _expired(e, now) or (e.reroute and not e.fled)]
            if moving:
                staying = [e for e in queue if not (_expired(e, now) or (e.reroute and not e.fled))]
                queue.clear()
                queue.extend(staying)
                for entry in moving:
                    if _expired(entry, now):
                        self._expire(entry, outcome, waited=True)
                    else:
                        entry.fled = True
                        self._settled(entry, outcome)  # elsewhere, or back here
            deadlines = [e.envelope.expiry_time for e in queue if e.envelope.expiry_time]
            wait = min(deadlines) - self._clock() if deadlines else math.inf
            with trio.move_on_after(max(wait, 0.0)):
                await lane.lot.park()

    def _settled(self, entry: _Entry, outcome: Outcome) -> None:
        message_id = entry.envelope.message_id
        if outcome.state == "accepted" or (outcome.state == "rejected" and entry.reroute is None):
            self._done(entry, outcome)
            return
        expiry = entry.envelope.expiry_time
        if expiry is not None and expiry <= self._clock():
            self._expire(entry, outcome)
            return
        self.resent += 1  # it goes again (elsewhere, or later): read by the metrics
        if entry.reroute is not None:
            elsewhere = entry.reroute(entry.address, outcome)
            if elsewhere is None and outcome.state == "rejected":
                self._done(entry, outcome)
                return
            if elsewhere is not None and elsewhere != entry.address:
                entry.address = elsewhere
                entry.envelope = attrs.evolve(entry.envelope, to=str(elsewhere))
                self._store.put(TABLE, entry.key, _pack(elsewhere, entry.envelope))
                if outcome.state == "modified":
                    # Refused again (every instance's breaker open, say): it
                    # goes round them with backoff, not as fast as they answer.
                    entry.attempts += 1
                    if entry.attempts > 1:
                        delay = min(_RETRY_FIRST * 2 ** (entry.attempts - 2), _RETRY_MAX)
                        assert self._nursery is not None
                        self._nursery.start_soon(self._later, entry, delay)
                        return
                self._queue(entry)
                return
        if outcome.condition == PEER_UNAVAILABLE:
            # Its lane waits for the peer to come back before it sends anything.
            self._queue(entry)
            return
        entry.attempts += 1
        delay = min(_RETRY_FIRST * 2 ** (entry.attempts - 1), _RETRY_MAX)
        log(
            "actorctl:backlog:retry",
            node=self.name,
            target=str(entry.address),
            message_id=message_id,
            attempts=entry.attempts,
            delay=delay,
            condition=outcome.condition,
            description=outcome.description,
        )
        assert self._nursery is not None
        self._nursery.start_soon(self._later, entry, delay)

    async def _later(self, entry: _Entry, delay: float) -> None:
        await trio.sleep(delay)
        self._queue(entry)

    def _expire(self, entry: _Entry, refused: Outcome, *, waited: bool = False) -> None:
        """``entry`` was refused (or ``waited`` for its peer) and its deadline
        has passed: a dead letter."""
        why = f"refused ({refused.condition}: {refused.description}) until it expired"
        if waited:
            why = f"waited for its peer ({refused.description}) until it expired"
        if self._dead_letters is not None:
            self._dead_letters.add(
                reason=REASON_EXPIRED,
                target=str(entry.address),
                envelope=entry.envelope,
                error={"type": "Expired", "message": why},
            )
        self._done(entry, Outcome.rejected(EXPIRED, why))

    def _done(self, entry: _Entry, outcome: Outcome) -> None:
        self._store.delete(TABLE, entry.key)
        self._resumed.pop(entry.key, None)
        if outcome.state != "accepted":
            log(
                "actorctl:backlog:refused",
                node=self.name,
                target=str(entry.address),
                message_id=entry.envelope.message_id,
                condition=outcome.condition,
                description=outcome.description,
            )
        if entry.on_done is not None:
            entry.on_done(outcome)
        if not len(self):
            self._emptied.unpark_all()


def _priority(envelope: Envelope) -> int:
    """A message's ``priority`` header (0-9, higher first; 4 when absent),
    which orders what waits in a lane."""
    given = envelope.headers.get(PRIORITY)
    if isinstance(given, int) and not isinstance(given, bool):
        return max(0, min(9, given))
    return PRIORITY_DEFAULT


def _expired(entry: _Entry, now: float) -> bool:
    expiry = entry.envelope.expiry_time
    return expiry is not None and expiry <= now


def _serial(key: str) -> int:
    """The serial number of a row's key (``message-id#serial``); 0 for a row
    of an older version, keyed by its message id alone."""
    _, mark, serial = key.rpartition("#")
    return int(serial) if mark and serial.isdigit() else 0


def _pack(address: Address, envelope: Envelope) -> bytes:
    return str(address).encode() + b"\n" + bytes(encode(envelope))


def _unpack(value: bytes) -> tuple[Address, Envelope]:
    head, _, data = value.partition(b"\n")
    return Address.parse(head.decode()), decode(data)
