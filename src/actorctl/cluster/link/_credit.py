"""Fair credit: no incoming link holds an actor's mailbox capacity idle.

An actor's mailbox capacity is the link credit the node grants (``mailbox/_mailbox.py``),
shared among the links that feed it. A link that holds credit it does not use
would starve the others, and AMQP does not let a receiver simply take credit
back; it can ask for it (drain: the sender uses its credit at once or gives the
rest back, AMQP 1.0 §2.6.7). Many clients never answer a drain. So, per node, a
:class:`CreditKeeper` looks at every actor that more than one link feeds, twice
per ``credit_deadline``:

- a link that holds credit and used none since the last look, while another
  link of that actor has none and no slot is free, is drained;
- a drained link that neither answered nor sent anything for half the deadline
  (so within the deadline) has its credit **reclaimed**: the node lowers the
  link's credit to zero with a flow (only the receiver chooses link-credit, and
  the sender MUST take the value it sends, §2.6.7) and gives the freed slots to
  the other links.

A link that gave credit back, or had it reclaimed, is *idle*: it is granted one
credit at a time (so it can show that it has something to send) until it uses
it; then it gets its share again. Idle links get what the active ones leave
(their share keeps one credit for each idle link, up to half the capacity); one
that answered its drain is served before links never served yet, one that had
its credit taken after them (``mailbox._mailbox._order``). An idle link that
sits on its one credit while another link waits loses it too (at the next
look), and counts from then on as one whose credit was taken, so that the
credit goes round instead of back to it. A
transfer that a sender sent beyond the credit it had left (it sent before the
lowering flow reached it, or it ignores credit) is taken if the mailbox has a
free slot, and otherwise settled ``rejected`` with
``amqp:link:transfer-limit-exceeded`` (sent again later, it is taken once there
is room).

The fast path is untouched: nothing here runs per message, and an actor fed by
one link is never looked at.
"""

from __future__ import annotations

from typing import Final, final

import trio

from ..._log import log
from ...mailbox import Mailbox
from ._engine import Engine
from ._raw import lib

__all__ = ["CreditKeeper", "InboxCredit"]

_link_credit = lib.pn_link_credit
_link_flow = lib.pn_link_flow
_queued = lib.pn_link_queued
_get_drain = lib.pn_link_get_drain
_LOOKS_PER_DEADLINE: Final = 2


@final
class InboxCredit:
    """A receiver link seen as a mailbox's credit link (``CreditLink``):
    flowing wakes the writer; the keeper tracks its use between looks."""

    __slots__ = (
        "_idle",
        "_keeper",
        "_probed",
        "drain_mark",
        "drained_at",
        "engine",
        "flows",
        "link",
        "mailbox",
        "receiver",
        "seen",
    )

    def __init__(self, engine: Engine, receiver: object, mailbox: Mailbox, keeper: CreditKeeper):
        self.engine = engine
        self.receiver = receiver  # the wrapper holds a reference: the pointer stays valid
        self.link = receiver._impl  # type: ignore[attr-defined]
        self.mailbox = mailbox
        self._keeper = keeper
        self.flows = 0  # how many grants the mailbox made it
        self.seen = (0, 0)  # (credit, flows) at the keeper's last look
        self.drained_at: float | None = None  # when it was asked to drain, if it was
        self.drain_mark = (0, 0)  # (credit, flows) then
        self._idle = 0
        self._probed = False

    # -- what the mailbox sees -----------------------------------------------------

    @property
    def credit(self) -> int:
        return 0 if self.engine.closed else int(_link_credit(self.link))

    def flow(self, n: int) -> None:
        if not self.engine.closed:
            self.flows += 1
            if self._idle:
                self._probed = True
            # A credit below zero (a sender's drain answer that crossed the flow
            # revoking its credit, or transfers beyond it, already counted in
            # the mailbox) is counted from zero: granted from there, the sender
            # would get less than the mailbox counts it has, none at all for
            # good once it is quiet and nothing settles.
            deficit = -int(_link_credit(self.link))
            _link_flow(self.link, n + deficit if deficit > 0 else n)
            self.engine.wake()

    def reclaim(self) -> None:
        """Ask the sender for the credit it does not use (AMQP drain)."""
        if self.engine.closed:
            return
        if not _get_drain(self.link):
            lib.pn_link_drain(self.link, 0)
            self.engine.wake()
        self.drained_at = trio.current_time()
        self.drain_mark = (self.credit, self.flows)

    @property
    def idle(self) -> int:
        """1: it gave back credit it held unused (it answered a drain); 2: it had
        it taken (it did not); 0: neither, or it has used the one credit it was
        granted since (which makes it active again)."""
        if self._idle and self._probed and self.credit <= 0:
            self._idle = 0
        return self._idle

    # -- the node's side -------------------------------------------------------------

    def attach(self) -> None:
        """Feed the mailbox; it grants credit at the keeper's next rebalance."""
        self.mailbox.attach(self, rebalance=False)
        self._keeper.add(self)

    def detach(self) -> None:
        """Stop feeding the mailbox; its credit is shared at the next rebalance."""
        self.mailbox.detach(self, rebalance=False)
        self._keeper.remove(self)

    def sender_flowed(self) -> None:
        """The sender sent a flow: an answer to a drain gives back the credit it
        had no use for. The answer may come after the node revoked that credit
        (the drain flag cleared, the flows crossed): what it gives back is shared
        whenever it comes, or the mailbox would not grant again until something
        settles."""
        drained = lib.pn_link_drained(self.link)
        if drained > 0 or (_get_drain(self.link) and _link_credit(self.link) <= 0):
            self.answered(drained)

    def answered(self, drained: int) -> None:
        """The sender answered a drain (``drained``: the credit it gave back,
        perhaps after the node revoked it): share what it gave back."""
        lib.pn_link_set_drain(self.link, False)
        if drained > 0:
            self._set_idle(1)  # it had less to send than it held
        self.drained_at = None
        self.mailbox.credit_changed()

    def revoke(self, idle: int = 2) -> int:
        """Take back the credit a drain did not get back (or an idle link's one
        credit, ``idle`` = its idleness so far): lower the link's credit to what
        has arrived. Returns how much was taken."""
        self.drained_at = None
        if self.engine.closed:
            return 0
        taken = max(0, int(_link_credit(self.link)) - int(_queued(self.link)))
        lib.pn_link_set_drain(self.link, False)
        if taken:
            _link_flow(self.link, -taken)
        self._set_idle(idle)
        self.engine.wake()
        return taken

    def _set_idle(self, how: int) -> None:
        self._idle = how
        self._probed = False


@final
class CreditKeeper:
    """Looks after the credit of every actor fed by more than one incoming link
    (see the module docstring). One per node; runs in the node's nursery.

    Args:
        node: the node's name, for logs.
        deadline: ``credit_deadline``: seconds.
    """

    def __init__(self, node: str, deadline: float) -> None:
        self.node = node
        self.deadline = deadline
        self._links: dict[Mailbox, dict[InboxCredit, None]] = {}
        self._shared = 0  # mailboxes fed by more than one link
        self._wake = trio.Event()
        # Mailboxes whose links changed since the last rebalance.
        self._unbalanced: set[Mailbox] = set()

    def add(self, link: InboxCredit) -> None:
        links = self._links.setdefault(link.mailbox, {})
        links[link] = None
        self._unbalanced.add(link.mailbox)
        if len(links) == 2:
            self._shared += 1
            self._wake.set()

    def remove(self, link: InboxCredit) -> None:
        links = self._links.get(link.mailbox)
        if links is None or link not in links:
            return
        del links[link]
        self._unbalanced.add(link.mailbox)
        if len(links) == 1:
            self._shared -= 1
        elif not links:
            del self._links[link.mailbox]

    def rebalance(self) -> None:
        """Share the credit of the mailboxes whose links changed: once for all
        the links a batch of frames attached or detached (a connection that
        attaches a thousand links costs one pass per batch, not per link)."""
        if self._unbalanced:
            unbalanced, self._unbalanced = self._unbalanced, set()
            for mailbox in unbalanced:
                mailbox.rebalance()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Look twice per deadline while some actor is fed by several links."""
        task_status.started()
        while True:
            while not self._shared:
                self._wake = trio.Event()
                await self._wake.wait()
            await trio.sleep(self.deadline / _LOOKS_PER_DEADLINE)
            self.look(trio.current_time())

    def look(self, now: float) -> None:
        for mailbox, links in list(self._links.items()):
            if len(links) > 1:
                self._look(mailbox, list(links), now)

    def _look(self, mailbox: Mailbox, links: list[InboxCredit], now: float) -> None:
        granted = 0
        wanting = False
        for link in links:
            credit = link.credit
            granted += max(0, credit)
            wanting = wanting or credit <= 0
        stats = mailbox.statistics()
        wanting = wanting and stats.capacity - stats.depth - granted <= 0
        taken = 0
        patience = self.deadline / _LOOKS_PER_DEADLINE
        for link in links:
            mark = (link.credit, link.flows)
            if link.drained_at is not None:
                if not _get_drain(link.link) or mark != link.drain_mark:
                    link.drained_at = None  # answered, or it sends: it is not idle
                elif now - link.drained_at >= patience:
                    took = link.revoke()
                    taken += took
                    log(
                        "actorctl:credit:reclaimed",
                        node=self.node,
                        peer=link.engine.peer,
                        actor=_name(link),
                        credit=took,
                        reason=f"a drain was not answered within {patience:g} s",
                    )
            elif wanting and mark[0] > 0 and mark == link.seen:
                idle = link.idle
                if not idle:
                    link.reclaim()  # it held this credit unused since the last look
                else:
                    # An idle link's one credit goes round the idle links: it
                    # had it taken, so it is served after the others (kept in
                    # its rank, one that answered a drain would get it back
                    # at once, in this look's own grant).
                    taken += link.revoke()
            link.seen = (link.credit, link.flows)
        if taken:
            mailbox.credit_changed()


def _name(link: InboxCredit) -> str:
    target = link.receiver.target.address  # type: ignore[attr-defined]
    return str(target or "")
