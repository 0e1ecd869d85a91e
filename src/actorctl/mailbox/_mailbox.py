"""A bounded inbox whose free capacity is the link credit the node grants.

Every message in a mailbox is *unsettled*: the sender holds it until the handler
has finished and the mailbox settles it (acks-late). The mailbox counts queued
and running messages together, and grants credit to the links that feed it only
for the slots that are free, so a fast sender waits for credit instead of
filling the receiver's memory. Nothing here touches a socket: a link is anything
with ``credit`` and ``flow(n)`` (a proton ``Receiver`` wrapped by the node).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Final, Literal, Protocol, final

import attrs
import trio

from ._credit import CreditLink, grant_shares, reclaim_over_share
from ._envelope import Envelope

__all__ = [
    "ACCEPTED",
    "ArrivalListener",
    "CreditLink",
    "Inbound",
    "Mailbox",
    "MailboxStatistics",
    "Outcome",
]

OutcomeState = Literal["accepted", "rejected", "modified", "released"]


@attrs.frozen(slots=True)
class Outcome:
    """How a delivery was settled.

    ``accepted``: handled. ``rejected``: bad input, never to be retried; the
    condition and description say what was wrong. ``modified``: not handled here,
    the sender may send it elsewhere. ``released``: never looked at (the actor
    stopped first).
    """

    state: OutcomeState
    condition: str | None = None
    description: str | None = None

    @classmethod
    def rejected(cls, condition: str, description: str) -> Outcome:
        return cls("rejected", condition, description)

    @classmethod
    def modified(cls, condition: str, description: str) -> Outcome:
        return cls("modified", condition, description)


ACCEPTED: Final = Outcome("accepted")
RELEASED: Final = Outcome("released")


class ArrivalListener(Protocol):
    """Who hears that a message arrived, or that the mailbox closed, while no
    receiver waited (:meth:`Mailbox.on_arrival`): an actor's cell, which has
    no task while its mailbox is empty. An object, not a callback, so that a
    node of a million idle actors keeps no bound method per actor."""

    def arrived(self) -> None:
        """Called at once, in the sender's task: it must not block."""
        ...


@final
class Inbound:
    """A message waiting in (or being handled from) a mailbox.

    ``settle`` is called exactly once, by whoever finishes with the message; it
    answers the sender and frees the slot.
    """

    __slots__ = ("_mailbox", "_on_settle", "envelope", "outcome")

    def __init__(
        self,
        envelope: Envelope,
        on_settle: Callable[[Outcome], None] | None,
        mailbox: Mailbox,
    ) -> None:
        self.envelope = envelope
        self.outcome: Outcome | None = None
        self._on_settle = on_settle
        self._mailbox = mailbox

    def settle(self, outcome: Outcome) -> None:
        if self.outcome is not None:
            return
        self.outcome = outcome
        try:
            if self._on_settle is not None:
                self._on_settle(outcome)
        finally:
            # The slot is free whatever the answer did (the mailbox's release,
            # inline: per message).
            mailbox = self._mailbox
            mailbox._unsettled -= 1
            if not mailbox._unsettled and mailbox._settled is not None:
                mailbox._settled.set()
                mailbox._settled = None
            if not mailbox._batched:
                mailbox._replenish(force=False)


@attrs.frozen
class MailboxStatistics:
    """A snapshot of a mailbox.

    Attributes:
        capacity: the most messages it holds unsettled at once.
        depth: messages held now (queued or being handled).
        max_depth: the most it ever held at once.
        received: messages it has taken in since it was made.
        links: incoming links that feed it.
        credit: credit granted to those links and not yet used.
        queued: messages waiting to be handled (depth less those being handled).
    """

    capacity: int
    depth: int
    max_depth: int
    received: int
    links: int
    credit: int
    queued: int = 0


_EMPTY: Final[tuple[()]] = ()


@final
class Mailbox:
    """A bounded inbox tied to link credit.

    An idle mailbox is small (a node may host 100,000 idle actors): its queue,
    its links and the event a waiting receiver parks on are made when first
    needed. One task receives from it (the actor's), or waits for arrivals
    (:meth:`wait_arrival`) while others take what is queued without waiting
    (an actor's runners, ``actors/_runners.py``).
    """

    __slots__ = (
        "_arrived",
        "_batched",
        "_closed",
        "_grants",
        "_last_grant",
        "_links",
        "_max_unsettled",
        "_on_arrival",
        "_queue",
        "_received",
        "_settled",
        "_unsettled",
        "capacity",
    )

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"mailbox capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._queue: deque[Inbound] | None = None
        self._arrived: trio.Event | None = None  # set when a waiting receiver may go on
        self._closed = False
        self._links: list[CreditLink] | tuple[()] = _EMPTY
        self._unsettled = 0
        self._max_unsettled = 0
        self._received = 0
        self._settled: trio.Event | None = None  # wait_settled's, set when none is unsettled
        # When each link was last granted credit (a grant number), or, for one
        # never granted any, minus when it attached (an attach number).
        self._last_grant: dict[CreditLink, int] | None = None
        self._grants = 0  # how many grants (and attaches) were made: orders _last_grant
        self._on_arrival: ArrivalListener | None = None
        self._batched = False  # settlements grant no credit until end_batch

    # -- the node's side -------------------------------------------------------

    def attach(self, link: CreditLink, *, rebalance: bool = True) -> None:
        """Feed this mailbox from a new link and grant it what credit is free
        (with ``rebalance=False``, not yet: the caller calls :meth:`rebalance`
        once for many links that attached at once)."""
        if not self._links:
            self._links = []
        assert isinstance(self._links, list)
        self._links.append(link)
        if self._last_grant is None:
            self._last_grant = {}
        self._grants += 1
        self._last_grant[link] = -self._grants
        if rebalance:
            self.rebalance()

    def detach(self, link: CreditLink, *, rebalance: bool = True) -> None:
        """Stop granting credit to a link (it closed)."""
        if link in self._links:
            assert isinstance(self._links, list)
            self._links.remove(link)
            if self._last_grant is not None:
                self._last_grant.pop(link, None)
            if rebalance:
                self._replenish(force=True)

    def rebalance(self) -> None:
        """Grant what credit is free, and ask links holding more than their
        share for the rest (after links attached or detached)."""
        self._replenish(force=True)
        if len(self._links) > 1:
            reclaim_over_share(self._links, self.capacity)

    def put_nowait(
        self, envelope: Envelope, on_settle: Callable[[Outcome], None] | None
    ) -> Inbound:
        """Queue a message that arrived on a link.

        Raises:
            trio.WouldBlock: the mailbox is full (the sender ignored its credit).
            trio.ClosedResourceError: the mailbox is closed.
        """
        if self._closed:
            raise trio.ClosedResourceError("the mailbox is closed")
        if self._unsettled >= self.capacity:
            raise trio.WouldBlock
        inbound = Inbound(envelope, on_settle, self)
        queue = self._queue
        if queue is None:
            queue = self._queue = deque()
        queue.append(inbound)
        arrived = self._arrived
        if arrived is not None:
            self._arrived = None
            arrived.set()
        elif self._on_arrival is not None:
            self._on_arrival.arrived()
        self._unsettled += 1
        self._received += 1
        if self._unsettled > self._max_unsettled:
            self._max_unsettled = self._unsettled
        return inbound

    def close(self) -> list[Inbound]:
        """Stop taking messages; return those that were queued and never handled."""
        self._closed = True
        arrived = self._arrived
        if arrived is not None:
            self._arrived = None
            arrived.set()  # a waiting receiver sees the end
        elif self._on_arrival is not None:
            self._on_arrival.arrived()  # so does one that is not running now
        queue, self._queue = self._queue, None
        return list(queue) if queue else []

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def links(self) -> tuple[CreditLink, ...]:
        """The links that feed this mailbox."""
        return tuple(self._links)

    def on_arrival(self, listener: ArrivalListener | None) -> None:
        """Have ``listener`` told (at once, in the sender's task: it must not
        block) when a message arrives or the mailbox closes while no receiver
        waits: an actor with no task of its own starts one then."""
        self._on_arrival = listener

    @property
    def depth(self) -> int:
        """Messages it holds now, queued or being handled (``statistics().depth``
        alone: a node that stops reads it for each of its actors)."""
        return self._unsettled

    @property
    def pending(self) -> int:
        """Messages queued and not yet taken by the receiver."""
        return len(self._queue) if self._queue else 0

    def requeue(self, inbounds: list[Inbound]) -> None:
        """Put messages taken and not finished back at the head of the queue,
        in their order (still unsettled: their slots stay taken), for the
        receiver's next turn: an actor stopped mid-message by its supervisor
        handles them in its next incarnation. A closed mailbox releases them."""
        if not inbounds:
            return
        if self._closed:
            for inbound in inbounds:
                inbound.settle(RELEASED)
            return
        queue = self._queue
        if queue is None:
            queue = self._queue = deque()
        queue.extendleft(reversed(inbounds))

    def reopen(self) -> None:
        """Take messages again after :meth:`close`: a stopped actor that its
        supervisor starts again keeps its mailbox, and the links feeding it."""
        if not self._closed:
            return
        self._closed = False
        self._replenish(force=True)

    # -- the actor's side ------------------------------------------------------

    def receive_nowait(self) -> Inbound:
        """The next message if one is queued. Raises ``trio.WouldBlock`` if none is,
        ``trio.EndOfChannel`` once closed."""
        queue = self._queue
        if queue:
            return queue.popleft()
        if self._closed:
            raise trio.EndOfChannel
        raise trio.WouldBlock

    async def receive(self) -> Inbound:
        """Wait for the next message. Raises ``trio.EndOfChannel`` once closed."""
        await trio.lowlevel.checkpoint()
        while True:
            queue = self._queue
            if queue:
                return queue.popleft()
            if self._closed:
                raise trio.EndOfChannel
            arrived = self._arrived
            if arrived is None:
                arrived = self._arrived = trio.Event()
            try:
                await arrived.wait()
            except BaseException:
                # Nobody waits any more (cancelled): the next arrival must go
                # to on_arrival, not to this event.
                if self._arrived is arrived:
                    self._arrived = None
                raise

    async def wait_arrival(self) -> None:
        """Wait until the next message arrives, or the mailbox closes (at once
        if it is closed), taking none: for a receiver whose messages other
        tasks take (an actor's runners). The one task that waits here is then
        its receiver, and no other may wait in :meth:`receive` meanwhile."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        arrived = self._arrived
        if arrived is None:
            arrived = self._arrived = trio.Event()
        try:
            await arrived.wait()
        except BaseException:
            if self._arrived is arrived:
                self._arrived = None  # as in receive: the next arrival goes to on_arrival
            raise

    async def wait_settled(self) -> None:
        """Wait until every message it took has been settled (none queued,
        none being handled): an actor with nothing to do (a test's ``wait_idle``)."""
        while self._unsettled:
            if self._settled is None:
                self._settled = trio.Event()
            await self._settled.wait()

    def statistics(self) -> MailboxStatistics:
        return MailboxStatistics(
            capacity=self.capacity,
            depth=self._unsettled,
            max_depth=self._max_unsettled,
            received=self._received,
            links=len(self._links),
            credit=sum(max(0, link.credit) for link in self._links),
            queued=len(self._queue) if self._queue else 0,
        )

    # -- credit ---------------------------------------------------------------

    def credit_changed(self) -> None:
        """A sender gave credit back (it answered a drain): grant what is free."""
        self._replenish(force=True)

    def refused(self) -> None:
        """A message used a link's credit and was never queued (refused before
        the mailbox: unauthenticated, undecodable, too large, aborted): top the
        links up as a settled message's slot does, or a link whose credit it
        used would wait at 0 for a settlement that never comes."""
        self._replenish(force=False)

    def begin_batch(self) -> None:
        """The settlements until :meth:`end_batch` (made in one step, with no
        checkpoint between) grant the links credit once, at its end: one look
        at the links, and one flow, for the batch, not one per message."""
        self._batched = True

    def end_batch(self) -> None:
        """Grant what the batch's settlements freed (see :meth:`begin_batch`)."""
        self._batched = False
        self._replenish(force=False)

    def _replenish(self, *, force: bool) -> None:
        links = self._links
        if not links:
            return
        granted = 0
        for link in links:
            granted += max(0, link.credit)
        free = self.capacity - self._unsettled - granted
        if free <= 0:
            return
        # Top credit up in batches, not one flow frame per settled message, unless
        # a link has no credit left (then its sender is waiting on us).
        if len(links) == 1:
            if force or free >= max(1, self.capacity // 2) or granted <= 0:
                link = links[0]
                link.flow(free)
                if self._last_grant is not None:  # (one store per batch, not per message)
                    self._grants += 1
                    self._last_grant[link] = self._grants
            return
        # Several links: each its share, in the order _credit.py gives.
        last = self._last_grant
        if last is None:
            last = self._last_grant = {}
        self._grants = grant_shares(links, self.capacity, free, last, self._grants, force=force)
