"""How a peer signs what it sends on its connection (docs/protocol.md §11):
per message with Ed25519, or within a session (HMAC) once the peer took the
session key this side handed it, renewed before it ends; nothing at all
without keys.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from typing import final

import trio

from ...._log import log
from ....mailbox import (
    SESSION_ADDRESS,
    SESSION_SUBJECT,
    Envelope,
    IdentityKey,
    Outcome,
    SessionOffer,
    SessionSigner,
    Signer,
    sign_ed25519,
)
from .._engine import Engine
from .._pending import PeerSettings, Pending
from .._reply_auth import ReplyCheck

__all__ = ["PeerSigning"]

#: Sends one pending message on the connection before it is ready for all.
TransmitNow = Callable[[Engine, Pending], Awaitable[None]]


@final
class PeerSigning:
    """The signer of one peer's current connection.

    Args:
        name: the peer's, for the logs.
        settings: its identity, whether sessions are used and how long one lasts.
        replies: told of each session offered (the peer may sign replies with it).
    """

    def __init__(self, name: str, settings: PeerSettings, replies: ReplyCheck) -> None:
        self.name = name
        self.settings = settings
        self._replies = replies
        identity = settings.identity
        #: How the next message is signed (None: the node has no keys).
        self.signer: Signer | None = (
            None if identity is None else functools.partial(sign_ed25519, identity)
        )

    async def start(self, engine: Engine, transmit_now: TransmitNow) -> None:
        """A new connection: sign per message, then within a session if the
        settings use them (sessions only over TLS: the offer carries the key)."""
        identity = self.settings.identity
        if identity is None:
            return
        self.signer = functools.partial(sign_ed25519, identity)
        if self.settings.sessions:
            await self._open_session(engine, identity, transmit_now)

    async def renew(self, engine: Engine, transmit_now: TransmitNow) -> None:
        """Keep the session renewed before it ends, while the connection lasts
        (returns at once when no session is used)."""
        identity = self.settings.identity
        if identity is None or not self.settings.sessions:
            return
        while True:
            await trio.sleep(self.settings.session_lifetime * 0.8)
            await self._open_session(engine, identity, transmit_now)

    async def _open_session(
        self, engine: Engine, identity: IdentityKey, transmit_now: TransmitNow
    ) -> None:
        """Hand the peer a fresh MAC key in an Ed25519-signed session message
        (over this TLS link only); sign with it from then on."""
        settings = self.settings
        now = settings.clock()
        offer = SessionOffer.new(identity, now=now, lifetime=settings.session_lifetime)
        self._replies.offered(offer)  # the peer may sign replies with it at once
        envelope = Envelope(
            message_id=settings.new_message_id(),
            to=SESSION_ADDRESS,
            subject=SESSION_SUBJECT,
            body=json.loads(offer.body(engine.connection.remote_container or "")),
            creation_time=now,
        )
        pending = Pending(SESSION_ADDRESS, envelope, envelope.message_id, on_outcome=_ignore)
        await transmit_now(engine, pending)
        await pending.done.wait()
        if pending.outcome is not None and pending.outcome.state == "accepted":
            self.signer = SessionSigner(offer.session())
            log("actorctl:peer:session", peer=self.name, session=offer.id, key=identity.key_id)
        else:
            outcome = pending.outcome
            self.signer = functools.partial(sign_ed25519, identity)
            log(
                "actorctl:peer:session-refused",
                peer=self.name,
                condition=outcome.condition if outcome else None,
                description=outcome.description if outcome else None,
                fallback="every message signed with ed25519",
            )


def _ignore(outcome: Outcome) -> None:
    """For deliveries whose outcome the sender reads itself."""
