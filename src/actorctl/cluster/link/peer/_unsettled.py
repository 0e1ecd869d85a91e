"""The bytes a node holds for one peer: what it sent there at least once and
the peer has not settled yet, kept for a resend.

Link credit bounds each link's unsettled messages by count (the receiving
mailbox's capacity), not by size, and a peer may host many actors: without a
bound in bytes, large messages to many of them would grow the sender's memory
without end. :class:`UnsettledBytes` counts them for one peer (``Peer``), the
tells given back and waiting to be sent again (``_given_back.py``) included,
and holds a send back while the count is at ``max_unsettled_bytes``: the
sender waits, as it does for credit (the backpressure), until the peer
settles enough. A message alone goes whatever its size, so that one larger
than the bound is never stuck. Reaching the bound is logged once
(``actorctl:peer:unsettled-full``), and again only after the count has gone
below half of it.
"""

from __future__ import annotations

from typing import final

import trio

from ...._log import log
from .._pending import Pending

__all__ = ["UnsettledBytes"]


@final
class UnsettledBytes:
    """The unsettled bytes of one peer, and the senders waiting for room.

    ``Peer.transmit`` counts a message in itself, on the path of every one
    (no call): it reads :attr:`held` and :attr:`bound` as :meth:`full_for`
    does, and adds the message's size to :attr:`held` and to ``Pending.size``.

    Args:
        peer: the peer's ``host:port``, for logs.
        bound: the most bytes held at once (``max_unsettled_bytes``).
    """

    __slots__ = ("_logged", "_peer", "_room", "bound", "held")

    def __init__(self, peer: str, bound: int) -> None:
        self._peer = peer
        self.bound = bound
        #: Bytes held now.
        self.held = 0
        self._room: trio.Event | None = None  # set when bytes are freed while some wait
        self._logged = False  # the bound was reached, and logged, since the count was low

    def full_for(self, size: int) -> bool:
        """Whether a message of ``size`` bytes must wait for room."""
        held = self.held
        return bool(held) and held + size > self.bound

    async def wait_room(self, size: int) -> None:
        """Wait until a message of ``size`` bytes fits (the caller checks
        again: a connection may have closed meanwhile)."""
        if not self._logged:
            self._logged = True
            log(
                "actorctl:peer:unsettled-full",
                peer=self._peer,
                held=self.held,
                size=size,
                bound=self.bound,
                description=f"{self.held} bytes sent to {self._peer} wait for it to settle "
                f"them (max_unsettled_bytes = {self.bound}): senders wait",
            )
        while self.full_for(size):
            room = self._room
            if room is None:
                room = self._room = trio.Event()
            await room.wait()

    @property
    def waiting(self) -> bool:
        """Whether a sender waits for room."""
        return self._room is not None

    def free(self, pending: Pending) -> None:
        """``pending`` is settled, or given up: its bytes are free."""
        size = pending.size
        if not size:
            return
        pending.size = 0
        self.held -= size
        room = self._room
        if room is not None:
            self._room = None
            room.set()
        if self._logged and self.held < self.bound // 2:
            self._logged = False
