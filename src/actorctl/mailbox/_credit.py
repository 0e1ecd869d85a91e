"""How a mailbox shares its free slots among the links that feed it.

A link is anything with ``credit``, ``flow(n)`` and ``reclaim()``
(:class:`CreditLink`: a proton ``Receiver`` wrapped by the node). A mailbox fed
by one link grants it all that is free (``_mailbox.py``); beside others, each
gets its share, in an order that serves the busy first and starves no one
(:func:`grant_shares`), and a link that was alone gives back what is over its
share once company comes (:func:`reclaim_over_share`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["CreditLink", "grant_shares", "reclaim_over_share"]


class CreditLink(Protocol):
    """One incoming link that feeds a mailbox."""

    @property
    def credit(self) -> int: ...

    def flow(self, n: int) -> None: ...

    def reclaim(self) -> None:
        """Ask the sender to give back the credit it is not using (AMQP drain)."""
        ...

    @property
    def idle(self) -> int:
        """0: the link is active. 1: it held credit it did not use and gave it
        back when asked (drain); 2: it did not, and had it taken. Beside other
        links, an idle one is granted one credit at a time until it uses it."""
        ...


def grant_shares(
    links: Sequence[CreditLink],
    capacity: int,
    free: int,
    last: dict[CreditLink, int],
    grants: int,
    *,
    force: bool,
) -> int:
    """Grant ``free`` credits among several ``links`` of a mailbox of
    ``capacity``: none is granted more than its share, and each is topped up
    once it is down to half of it (``force``: whatever it holds), whatever
    credit the others hold idle (or a busy sender would starve beside idle
    ones). An idle link gets one credit at a time, from what the active ones
    leave: their share keeps one credit for each idle link, up to half the
    capacity. Who goes first: see ``_order``. ``last`` is when each link was
    last granted credit, numbered by ``grants``; returns the grants counted."""
    idle = 0
    for link in links:
        if link.idle:
            idle += 1
    active = len(links) - idle
    share = max(1, (capacity - min(idle, capacity // 2)) // active) if active else 1
    low = max(1, share // 2)
    for link in sorted(links, key=lambda item: _order(item, last)):
        target = 1 if link.idle else share
        if not force and link.credit >= min(low, target):
            continue
        give = min(free, target - max(0, link.credit))
        if give > 0:
            link.flow(give)
            grants += 1
            last[link] = grants
            free -= give
            if free <= 0:
                break
    return grants


def reclaim_over_share(links: Sequence[CreditLink], capacity: int) -> None:
    """A link that was alone got the whole window; with company, each link
    keeps at most its share. Drain the ones holding more (AMQP drain: the
    sender uses the credit at once or gives it back)."""
    share = max(1, capacity // len(links))
    for link in links:
        if link.credit > share:
            link.reclaim()


def _order(link: CreditLink, last: dict[CreditLink, int]) -> tuple[int, int, int]:
    """Which link is granted credit first: active links that were served before,
    then idle ones that gave credit back when asked, then links never served
    (the newest first: a caller attaches a link when it has something to send),
    then idle ones that had to have their credit taken. Within each, the one with
    the least credit, then the one served longest ago."""
    served = last.get(link, 0)
    idle = link.idle
    tier = (1 if idle == 1 else 3) if idle else (2 if served < 0 else 0)
    return (tier, link.credit, served)
