"""The reply routes of a node: the reply links callers attached to it, by
reply address, on which replies go back pre-settled (the reply is the
acknowledgement), signed for the address as the caller reads it off its
link (docs/protocol.md §8.1).

Inbound connections (``_inbound.py``) add and remove them; the node's outbox
(``cluster/outbox/_outbox.py``) sends replies on them. On a node with a keyring a named
reply address names its key, and an attach proves it (``_reply_claims.py``):
nothing is remembered per address. On a node without one, who first attached
each named address (its certificate subject) is remembered here, so that
nobody else takes it while its caller reconnects.
"""

from __future__ import annotations

from typing import final

from proton import Link

from ..._log import log
from ...mailbox import Envelope, encode
from ._engine import Engine
from ._limits import reply_queue_full
from ._raw import lib
from ._reply_auth import REPLY_NODE, ReplySigning

__all__ = ["ReplyRoutes"]

#: How many reply addresses a node without a keyring remembers the owner of
#: (their routes gone).
_MAX_OWNERS = 10_000
_queued = lib.pn_link_queued
_outgoing_bytes = lib.pn_session_outgoing_bytes
_link_session = lib.pn_link_session


@final
class ReplyRoutes:
    """The reply links callers attached to this node, by reply address.

    Inbound connections add and remove them; the outbox sends replies on them.
    A route whose caller grants no credit holds at most ``max_queued`` replies,
    and ``max_queued_bytes`` bytes of them (on its connection's session); more
    are dropped and logged.
    """

    __slots__ = ("_owners", "_routes", "max_queued", "max_queued_bytes")

    def __init__(self, max_queued: int = 1000, max_queued_bytes: int = 16 << 20) -> None:
        self._routes: dict[str, tuple[Engine, Link, ReplySigning | None]] = {}
        # Who each reply address belongs to (the certificate subject of the
        # first connection that attached it), oldest first; kept after its route
        # goes, so that nobody else takes it while its caller reconnects.
        self._owners: dict[str, str] = {}
        self.max_queued = max_queued
        self.max_queued_bytes = max_queued_bytes

    def add(
        self, address: str, engine: Engine, link: Link, signing: ReplySigning | None = None
    ) -> None:
        """A caller attached a reply link; replies to ``address`` go on it, signed
        as ``signing`` says (None: unsigned)."""
        self._routes[address] = (engine, link, signing)

    def claim(self, address: str, identity: str | None) -> bool:
        """Whether ``identity`` may attach ``address`` on a node without a
        keyring: nobody holds it yet (it is ``identity``'s from now on) or
        ``identity`` does. Without an identity (plain TCP) nothing is held.
        (A node with a keyring asks for a proof of the key instead.)"""
        if identity is None:
            return True
        owner = self._owners.get(address)
        if owner is not None:
            return owner == identity
        if len(self._owners) >= _MAX_OWNERS:
            # Forget the oldest addresses that nobody holds a route to any more.
            for old in [a for a in self._owners if a not in self._routes][: _MAX_OWNERS // 10]:
                del self._owners[old]
        self._owners[address] = identity
        return True

    def remove(
        self,
        address: str,
        *,
        engine: Engine | None = None,
        link: Link | None = None,
        release: bool = False,
    ) -> None:
        """Forget a route, if it is still the one on ``engine`` (or ``link``); with
        ``release`` (a dynamic address, which nobody asks for by name) its owner too."""
        route = self._routes.get(address)
        if route is None:
            return
        if (engine is not None and route[0] is not engine) or (
            link is not None and route[1] != link
        ):
            return  # the caller re-attached since: that newer route stays
        del self._routes[address]
        if release:
            self._owners.pop(address, None)

    def __contains__(self, address: object) -> bool:
        return address in self._routes

    def __len__(self) -> int:
        return len(self._routes)

    def send(self, envelope: Envelope) -> int:
        """Send a reply on the route to ``envelope.to``; return its size in bytes
        as encoded, or 0 if there is no route. (A caller that grants no credit
        gets at most ``max_queued``, and ``max_queued_bytes``: the rest are
        dropped and logged.)"""
        route = self._routes.get(envelope.to)
        if route is None:
            return 0
        engine, link, signing = route
        if engine.closed:
            return 0
        # Signed for the reply address, as the caller reads it off its link
        # (encode_reply, inline: per reply).
        signer = None if signing is None else signing.signer()
        data = encode(envelope, signer=signer, actor=envelope.to, node=REPLY_NODE)
        impl = link._impl
        # The bound's check: one C call while no reply waits for credit (the
        # usual case); while some do, their count and their session's bytes
        # (reply_queue_full's test, inline), and its words only once it is full.
        if (queued := _queued(impl)) and (
            queued >= self.max_queued
            or _outgoing_bytes(_link_session(impl)) >= self.max_queued_bytes
        ):
            full = reply_queue_full(impl, self.max_queued, self.max_queued_bytes, queued)
            if full is not None:
                _no_credit(envelope, engine, full)
                return len(data)  # there is a route: the reply was dropped there, and logged
        engine.send_settled(impl, envelope.message_id.encode(), data)
        return len(data)


def _no_credit(envelope: Envelope, engine: Engine, full: str) -> None:
    log(
        "actorctl:reply:dropped",
        reply_to=envelope.to,
        correlation_id=envelope.correlation_id,
        peer=engine.peer,
        reason="no reply credit",
        description=f"{full}: it must grant credit on its reply link",
    )
