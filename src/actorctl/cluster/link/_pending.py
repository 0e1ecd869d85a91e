"""What the outgoing side is made of: how a node makes and signs its
connections (:class:`PeerSettings`), one outgoing delivery until the
receiver settles it (:class:`Pending`), and a sender link to one actor on a
peer (:class:`OutLink`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, final

import attrs
import trio
from proton import Link, SSLDomain

from ..._errors import ActorctlError, Modified, PeerUnavailable, Rejected, UnknownActor
from ..._log import log
from ...mailbox import NOT_FOUND, PEER_UNAVAILABLE, Envelope, IdentityKey, Keyring, Outcome
from ...supervision import BreakerPolicy
from ._engine import Engine
from .peer._peer_dial import BACKOFF

__all__ = ["OutLink", "PeerSettings", "Pending"]


@final
@attrs.frozen
class PeerSettings:
    """How a node makes and signs its outgoing connections (the node makes it).

    Attributes:
        node_id: the node's AMQP container id.
        identity: the key it signs with; None: it sends unsigned (insecure).
        sessions: open a session with each peer (HMAC per message); only over TLS.
        session_lifetime: seconds a session lasts; the next opens at 80% of it.
        idle_timeout: seconds of silence after which a peer is taken for dead.
        client_domain: TLS settings for a connection to a host; None: plain TCP.
        new_message_id: the node's message ids (for session messages).
        clock: wall-clock time in seconds since the epoch.
        stopping: whether the node is stopping (then no reconnect).
        connect_timeout: seconds a peer may stay unreachable before what waits
            for it fails with ``PeerUnavailable`` (the backlog keeps durable sends).
        keyring: the keys whose signatures on replies it trusts; None: it takes
            replies unchecked (a node without keys, for tests and development).
        peer_breaker: the policy of each peer's circuit breaker (``_peer_breaker.py``).
        reconnect_backoff: the first and the longest pause (s) between two failed
            connection attempts to a peer (``peer/_peer_dial.py``).
        resend_window: seconds a plain tell that its receiver gave back unrun
            is sent again for (``peer/_given_back.py``).
        max_unsettled_bytes: bytes of messages sent to one peer and not yet
            settled by it; a send past it waits (``_limits.py``).
    """

    node_id: str
    identity: IdentityKey | None
    sessions: bool
    session_lifetime: float
    idle_timeout: float
    client_domain: Callable[[str], SSLDomain | None]
    new_message_id: Callable[[], str]
    clock: Callable[[], float]
    stopping: Callable[[], bool]
    connect_timeout: float = 5.0
    keyring: Keyring | None = None
    peer_breaker: BreakerPolicy | None = None  # None: ``_peer_breaker.PEER_BREAKER``
    reconnect_backoff: tuple[float, float] = BACKOFF
    resend_window: float = 30.0
    max_unsettled_bytes: int = 64 << 20


@final
class Pending:
    """One outgoing delivery, kept until the receiver settles it."""

    __slots__ = (
        "_done",
        "again",
        "message",
        "message_id",
        "on_outcome",
        "outcome",
        "path",
        "presettled",
        "size",
        "tries",
        "until",
    )

    def __init__(
        self,
        path: str,
        message: Envelope | bytes | bytearray,
        message_id: str,
        *,
        presettled: bool = False,
        on_outcome: Callable[[Outcome], None] | None = None,
        again: bool = False,
    ) -> None:
        self.path = path
        # An envelope is encoded (and signed) when it is sent: a resend after a
        # reconnect is signed again, within the new connection's session.
        self.message = message
        self.message_id = message_id
        self.presettled = presettled
        self.on_outcome = on_outcome
        #: A plain tell: sent again when the receiver gives it back without
        #: running it (``released``, ``modified`` with ``actorctl:actor-stopping``),
        #: with backoff, within the resend window (``Peer``).
        self.again = again
        #: Its bytes as sent, while the peer holds them unsettled (or it waits
        #: to be sent again): counted in the peer's ``max_unsettled_bytes``.
        self.size = 0
        self.tries = 0  # how many times it was given back and sent again
        self.until = 0.0  # (trio time) the end of its resend window, once given back
        self.outcome: Outcome | None = None
        self._done: trio.Event | None = None  # made by the first sender that waits

    @property
    def done(self) -> trio.Event:
        """Set once it has its final outcome. Made at the first look: most
        senders never wait for it (a tell, a task sent unconfirmed), and an
        event costs more than the rest of a delivery's record."""
        event = self._done
        if event is None:
            event = self._done = trio.Event()
            if self.outcome is not None:
                event.set()
        return event

    def resolve(self, outcome: Outcome, *, quiet: bool = False) -> None:
        """The final outcome: the sender is told (``quiet``: the caller logged it)."""
        if self.outcome is not None:
            return
        self.outcome = outcome
        if self._done is not None:
            self._done.set()
        if self.on_outcome is not None:
            self.on_outcome(outcome)
        elif outcome.state != "accepted" and not quiet:
            log(
                f"actorctl:send:{outcome.state}",
                target=self.path,
                message_id=self.message_id,
                condition=outcome.condition,
                description=outcome.description,
            )

    def error(self) -> ActorctlError | None:
        """The error a waiting sender should raise for this outcome, if any."""
        outcome = self.outcome
        if outcome is None or outcome.state == "accepted":
            return None
        condition = outcome.condition or f"amqp:{outcome.state}"
        description = outcome.description or f"the receiver answered {outcome.state}"
        if outcome.condition == PEER_UNAVAILABLE:
            return PeerUnavailable(description)
        if outcome.condition == NOT_FOUND:
            return UnknownActor(condition, description, self.message_id)
        if outcome.state == "rejected":
            return Rejected(condition, description, self.message_id)
        return Modified(condition, description, self.message_id)


@final
class OutLink:
    """A sender link to one actor on the peer."""

    __slots__ = ("draining", "engine", "failure", "link", "lot", "sender", "tag", "unsettled")

    def __init__(self, engine: Engine, sender: Link) -> None:
        self.engine = engine
        self.sender = sender  # the wrapper holds a reference: the pointer stays valid
        self.link = sender._impl
        self.lot = trio.lowlevel.ParkingLot()
        self.failure: Outcome | None = None
        #: The number of its next delivery, whose tag is its hex digits (a
        #: count kept here, not an iterator: no call per message).
        self.tag = 0
        #: Whether the receiver asks for its unused credit back (AMQP drain):
        #: ``pn_link_get_drain`` as of the last flow it sent. Only a flow frame
        #: changes that flag, and each comes as a LINK_FLOW event, which sets
        #: this (``drain_if_idle``): a send reads it with no call to proton.
        self.draining = False
        # Sent at-least-once and not yet settled by the peer, by raw delivery
        # pointer, in sending order.
        self.unsettled: dict[Any, Pending] = {}
