"""Plain tells that their receiver gave back without running them, sent again.

A receiving node answers ``released`` for a message its actor took but never
ran (the actor's supervisor gave up on it, or the node stopped), and
``modified`` with ``actorctl:actor-stopping`` for one that arrived while the
actor was stopped. Both mean "not run: send it again" (docs/protocol.md §9). A
plain ``tell`` has returned to its caller by then, so its node sends it again
for it: after 0.05 s, doubling to 1 s between tries, for at most the node's
``resend_window`` (30 s by default) from the first time it came back, and never
past the message's ``absolute-expiry-time``. An actor restarted within that
time (its supervisor's own parent restarts the supervisor, or an operator
``restart_child``) gets it; one that stays away makes the node give up, with an
error line ``actorctl:send:undelivered`` that names the actor, the message and
the receiver's last answer: never silence.

What is not given back is not sent again: ``modified`` with another condition
(a circuit breaker, a router with no instance, ``actorctl:actor-crashed`` for
the message the actor crashed on, which could crash it again), ``rejected``,
and a ``released`` the sending node decided itself (``actorctl:peer-unavailable``).
An ``ask`` or a ``deliver`` is not sent again either: its caller is waiting and
gets the outcome as an error.

Nothing here runs for a message the receiver accepts: :class:`GivenBack` is
asked only on the path of an outcome that is not ``accepted``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, final

import attrs
import trio

from ...._errors import PeerUnavailable
from ...._log import log
from ....mailbox import PEER_UNAVAILABLE, STOPPING, Envelope, Outcome
from .._pending import Pending

__all__ = ["RESEND_FIRST", "RESEND_MAX", "GivenBack", "given_back"]

#: The first pause before a given-back tell is sent again (s); it doubles.
RESEND_FIRST: Final = 0.05
#: The longest pause between two tries (s).
RESEND_MAX: Final = 1.0


def given_back(outcome: Outcome) -> bool:
    """Whether the receiver gave the message back unrun, for it to be sent again."""
    if outcome.state == "released":
        return outcome.condition is None
    return outcome.state == "modified" and outcome.condition == STOPPING


@final
class GivenBack:
    """The given-back plain tells of one peer, waiting to be sent again.

    Args:
        peer: the peer's ``host:port``, for logs.
        window: seconds a given-back tell is sent again for, from the first time.
        clock: wall-clock time (for the message's fresh ``creation-time``).
        transmit: puts a delivery on the wire (``Peer.transmit``).
        free: frees a delivery's bytes in the peer's bound (``_unsettled.py``):
            a tell waiting to be sent again keeps them until it goes, or is
            given up.
    """

    __slots__ = ("_clock", "_free", "_peer", "_transmit", "_window", "nursery", "waiting")

    def __init__(
        self,
        peer: str,
        window: float,
        clock: Callable[[], float],
        transmit: Callable[[Pending], Awaitable[None]],
        free: Callable[[Pending], None],
    ) -> None:
        self._peer = peer
        self._free = free
        self._window = window
        self._clock = clock
        self._transmit = transmit
        #: Where the waits run: the peer's own, while it runs (None: not sent again).
        self.nursery: trio.Nursery | None = None
        #: Tells waiting for their next try (the peer is busy while any does).
        self.waiting = 0

    def take(self, pending: Pending, outcome: Outcome) -> bool:
        """Send ``pending`` again later, or give up on it (logged, resolved):
        True. False: it is not a tell to send again; resolve it as usual."""
        message = pending.message
        nursery = self.nursery
        if not pending.again or nursery is None or not isinstance(message, Envelope):
            return False
        now = trio.current_time()
        if not pending.tries:
            until = now + self._window
            if message.expiry_time is not None:
                until = min(until, now + message.expiry_time - self._clock())
            pending.until = until
            log(
                "actorctl:send:given-back",
                actor=f"{self._peer}/{pending.path}",
                message_id=pending.message_id,
                state=outcome.state,
                condition=outcome.condition,
                description=outcome.description,
                resend_within=round(until - now, 3),
            )
        delay = min(RESEND_FIRST * 2**pending.tries, RESEND_MAX)
        if now + delay > pending.until:
            self._give_up(pending, outcome)
            return True
        pending.tries += 1
        self.waiting += 1
        nursery.start_soon(self._later, pending, delay)
        return True

    async def _later(self, pending: Pending, delay: float) -> None:
        try:
            try:
                await trio.sleep(delay)
            finally:
                self._free(pending)  # counted again once it is sent again
            message = pending.message
            assert isinstance(message, Envelope)
            # Signed anew: the same bytes again would be a replay (§11.6).
            pending.message = attrs.evolve(message, creation_time=self._clock())
            await self._transmit(pending)
        except PeerUnavailable as exc:
            pending.resolve(Outcome("released", PEER_UNAVAILABLE, str(exc)))
        finally:
            self.waiting -= 1

    def _give_up(self, pending: Pending, outcome: Outcome) -> None:
        self._free(pending)
        tries = pending.tries + 1
        description = (
            f"{outcome.description or 'the receiver answered ' + outcome.state}; "
            f"sent {tries} times within the resend window, then given up"
        )
        log(
            "actorctl:send:undelivered",
            actor=f"{self._peer}/{pending.path}",
            message_id=pending.message_id,
            state=outcome.state,
            condition=outcome.condition,
            description=description,
            tries=tries,
        )
        pending.resolve(attrs.evolve(outcome, description=description), quiet=True)
