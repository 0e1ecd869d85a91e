"""Authenticated replies (docs/protocol.md §8.1): who may take a reply address,
how a node signs what it sends on a reply link, and what a caller accepts.

- The replying side signs each reply with the MAC key of the newest signing
  session that the caller opened on that connection (both sides hold it: the
  caller handed it over in its Ed25519-signed session message), else with
  Ed25519 under its own identity key, else (a node without keys) not at all:
  :class:`ReplySigning`, one per incoming connection.
- The caller checks each reply that comes back on its reply link to a peer
  before anything reads its body: an HMAC under a session it handed to that
  peer on that connection, or an Ed25519 signature by a trusted key that
  belongs to that peer (its name is the common name of the peer's TLS
  certificate, when the certificate has one): :class:`ReplyCheck`, one per peer.
  Whether the reply answers an ask sent to that peer and actor is the outbox's
  check, once it knows the ask.
- Who may take a reply address, and name it in ``reply-to``, is
  ``_reply_claims.py``'s concern.

The canonical bytes are those of every message (§11.2, ``canonical_bytes``),
with the reply address as the ``to`` field: correlation-id, subject, the
``replier`` application property and the body are covered as for a request.
"""

from __future__ import annotations

import functools
import hmac
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, final

from ..._errors import WireFormatError
from ..._log import log
from ...mailbox import (
    Envelope,
    IdentityKey,
    Keyring,
    SessionOffer,
    SessionSigner,
    Signer,
    canonical_encoded,
    decode,
    encode,
    from_sections,
    read_message,
    sign_ed25519,
)
from ...mailbox._session_read import SessionTail, read_in_session, session_tail
from ...mailbox._signing import (
    ED25519,
    HMAC_SHA256,
    SIG,
    SIG_ALG,
    SIG_KEY,
    AuthError,
    Session,
    keyed_mac,
)
from . import _raw as raw

if TYPE_CHECKING:
    from proton import Link

    from ._engine import Engine

__all__ = [
    "REPLY_CREDIT",
    "REPLY_NODE",
    "UNAUTHORIZED",
    "ReplyCheck",
    "ReplySigning",
    "certificate_names",
    "encode_reply",
]

#: The credit a node keeps on its reply link to each peer.
REPLY_CREDIT: Final = 1000
#: A reply link's credit is looked at (and topped up to ``REPLY_CREDIT`` when
#: below half of it) at every this many deliveries it brings, not at each: a
#: delivery uses one credit and comes as at least one DELIVERY event, so the
#: credit never falls below ``REPLY_CREDIT // 2 - _CREDIT_EVERY`` (436).
_CREDIT_EVERY: Final = 64
#: The link condition of a reply address that this connection may not take.
UNAUTHORIZED: Final = "amqp:unauthorized-access"
#: Canonical field 0 (the node) of a reply or result document, and its
#: ``sig_node``: the empty text (``00 00 00 00``), not absent, since the reply
#: address names the caller's node already (docs/protocol.md §8.1).
REPLY_NODE: Final = ""

lib = raw.lib
_readable = lib.pn_delivery_readable
_partial = lib.pn_delivery_partial
_pending = lib.pn_delivery_pending
_remote_settled = lib.pn_delivery_settled
_update = lib.pn_delivery_update
_settle_delivery = lib.pn_delivery_settle
_link_credit = lib.pn_link_credit
_link_flow = lib.pn_link_flow

# Why a caller refuses a reply (the ``reason`` of ``actorctl:reply:rejected``).
UNSIGNED: Final = "unsigned"
BAD_SIGNATURE: Final = "bad signature"
UNKNOWN_KEY: Final = "unknown key"
WRONG_PEER: Final = "wrong peer"


def certificate_names(engine: Engine) -> tuple[str | None, str | None]:
    """The subject and the common name of the certificate that the other side of
    ``engine`` presented; (None, None) on plain TCP (or before the handshake)."""
    ssl = engine.ssl
    if ssl is None:
        return None, None
    return ssl.get_cert_subject() or None, ssl.get_cert_common_name() or None


def encode_reply(envelope: Envelope, signer: Signer | None) -> bytes:
    """A reply or result document as a node writes it on a reply link: signed
    (by ``signer``, if any) for the reply address in ``envelope.to``, with the
    empty node of :data:`REPLY_NODE` (docs/protocol.md §8.1). Every reply a node
    sends is these bytes (``ReplyRoutes.send`` makes this call inline), and
    docs/make_test_vectors.py writes the reply vectors with it."""
    return encode(envelope, signer=signer, actor=envelope.to, node=REPLY_NODE)


@final
class ReplySigning:
    """How the replies sent on one incoming connection are signed: within the
    newest signing session its peer opened on it, else Ed25519 with this node's
    identity key, else (a node without keys) not at all.

    Args:
        identity: the node's own key; None: it sends replies unsigned.
        clock: the wall clock (seconds since the epoch), for session expiry.
    """

    __slots__ = ("_clock", "_ed25519", "_expires", "_session")

    def __init__(self, identity: IdentityKey | None, clock: Callable[[], float]) -> None:
        self._ed25519: Signer | None = (
            None if identity is None else functools.partial(sign_ed25519, identity)
        )
        self._session: Signer | None = None
        self._expires = 0.0
        self._clock = clock

    def session_opened(self, session: Session) -> None:
        """The peer opened ``session`` on this connection: sign within it (the
        newest one) until it expires."""
        if self._session is None or session.expires >= self._expires:
            self._session = SessionSigner(session)
            self._expires = session.expires

    def signer(self) -> Signer | None:
        """What signs the next reply (one clock read; no allocation)."""
        session = self._session
        if session is not None:
            if self._clock() < self._expires:
                return session
            self._session = None
        return self._ed25519


@final
class ReplyCheck:
    """What a node accepts on the reply link of its connection to one peer.

    Args:
        keyring: the node's trusted keys; None: the node is insecure and takes
            replies unchecked (tests and development only).
        address: the reply address the node attaches there (``own_reply_address``):
            the canonical ``to`` of every reply it takes.
        peer: the peer's ``host:port``, for logs.
        clock: the wall clock (seconds since the epoch), for session expiry.
    """

    __slots__ = ("_clock", "_events", "_identity", "_keyring", "_last", "_macs", "address", "peer")

    def __init__(
        self, keyring: Keyring | None, address: str, peer: str, clock: Callable[[], float]
    ) -> None:
        self._keyring = keyring
        self.address = address
        self.peer = peer
        self._clock = clock
        # The sessions this node handed the peer on the current connection, by
        # id: the keyed HMAC (made once) and the expiry.
        self._macs: dict[str, tuple[Any, float]] = {}
        # The session the last reply was signed in (its id, keyed HMAC and
        # expiry), one of ``_macs``: a peer signs all its replies in its newest
        # session, so most replies find it without a look-up.
        self._last: tuple[str, Any, float] = ("", None, 0.0)
        self._identity: str | None = None
        self._events = 0  # the reply link's DELIVERY events since its credit was looked at

    def connected(self, identity: str | None) -> None:
        """A new connection to the peer, whose certificate names ``identity``
        (its common name, or None): sessions of the last connection are over."""
        self._macs = {}
        self._last = ("", None, 0.0)
        self._identity = identity

    def offered(self, offer: SessionOffer) -> None:
        """This node hands the peer ``offer`` on the current connection (call it
        before the session message goes out: the peer signs with it at once)."""
        now = self._clock()
        self._macs = {sid: held for sid, held in self._macs.items() if held[1] > now}
        self._macs[offer.id] = (keyed_mac(offer.mac_key), offer.expires)
        if self._last[0] not in self._macs:  # an expired session is not kept
            self._last = ("", None, 0.0)

    def link_closed(self, link: Link) -> None:
        """The peer detached the reply link: log why, if it refused it."""
        condition = link.remote_condition
        if condition is not None:
            log(
                "actorctl:peer:reply-link-refused",
                peer=self.peer,
                address=self.address,
                condition=condition.name,
                description=condition.description,
            )

    def receive(self, engine: Engine, link: Any, delivery: Any) -> Envelope | None:
        """Take a delivery off the reply link (raw pointers): settle it, keep the
        link's credit topped up (``_CREDIT_EVERY``), and return the reply if it
        holds (see :meth:`check`)."""
        events = self._events + 1
        if events >= _CREDIT_EVERY:
            events = 0
            credit = _link_credit(link)
            if credit < REPLY_CREDIT // 2:
                _link_flow(link, REPLY_CREDIT - credit)
                engine.wake()
        self._events = events
        if not _readable(delivery) or _partial(delivery):
            return None
        data = raw.recv(link, _pending(delivery))
        if not _remote_settled(delivery):
            _update(delivery, raw.ACCEPTED)
        _settle_delivery(delivery)
        try:
            return self.check(data)
        except WireFormatError as exc:
            log("actorctl:reply:undecodable", peer=self.peer, error=str(exc))
            return None

    def check(self, data: bytes) -> Envelope | None:
        """The reply in ``data`` if its signature holds; else None, logged as
        ``actorctl:reply:rejected`` with the reason.

        A reply signed within a session in the layout actorctl writes has its
        signature read where the replier put it (``_session_read.read_in_session``, as
        a node's inbound path reads a request), not decoded into its
        application properties first; any other is read whole. Both are
        checked alike, with the same reasons.

        Raises:
            WireFormatError: it verifies but cannot be decoded.
        """
        if self._keyring is None:
            return decode(data)  # an insecure node: nothing to check against
        found = read_in_session(data, _IN_SESSION)
        if found is not None:  # (per reply: its properties padded to ten already)
            sections, sig_key, sig = found
            properties, app, body = sections
            problem = self._verify_signed(properties, app, body, HMAC_SHA256, sig_key, sig)
        else:
            read = read_message(data)
            if read is None:
                self._reject(
                    None,
                    None,
                    UNSIGNED,
                    "not one properties, application-properties and data section: "
                    "it cannot carry a signature (docs/protocol.md §11.6)",
                )
                return None
            sections = read
            properties, app, body = sections
            if len(properties) < 10:
                properties = properties + [None] * (10 - len(properties))
            problem = self._verify(properties, app, body)
        if problem is not None:
            self._reject(properties[0], properties[5], *problem)
            return None
        return from_sections(sections)

    def _verify(
        self, properties: list[Any], app: dict[Any, Any], body: bytes
    ) -> tuple[str, str] | None:
        """Why the signature of a reply read whole does not hold: (reason,
        description), or None (see :meth:`_verify_signed`)."""
        try:  # a signed reply has them all: found without a call
            alg, sig_key, sig = app[SIG_ALG], app[SIG_KEY], app[SIG]
        except KeyError:
            alg, sig_key, sig = app.get(SIG_ALG), app.get(SIG_KEY), app.get(SIG)
        return self._verify_signed(properties, app, body, alg, sig_key, sig)

    def _verify_signed(
        self,
        properties: list[Any],
        app: dict[Any, Any],
        body: bytes,
        alg: object,
        sig_key: object,
        sig: object,
    ) -> tuple[str, str] | None:
        """Why the signature (``alg``, ``sig_key``, ``sig``) does not hold:
        (reason, description), or None.

        Per reply, so written flat: the canonical bytes (§11.2) are made here,
        and the session of the last reply is found without a look-up."""
        if alg != HMAC_SHA256 and alg != ED25519:
            return UNSIGNED, "no sig_alg ed25519 or hmac-sha256"
        # Exact types: what the reader gives for a string and for binary.
        if type(sig_key) is not str or type(sig) is not bytes:
            return BAD_SIGNATURE, "sig_key must be a string and sig binary"
        message_id, subject, reply_to = properties[0], properties[3], properties[4]
        correlation_id, expiry, creation = properties[5], properties[8], properties[9]
        kind = app["kind"] if "kind" in app else None  # noqa: SIM401 (in and []: no call)
        # Only an AMQP timestamp is covered as written (as for a request).
        if not (type(creation) is int or creation is None) or not (
            type(expiry) is int or expiry is None
        ):
            return BAD_SIGNATURE, (
                "its fields cannot be signed: creation-time and absolute-expiry-time "
                "must be timestamps"
            )
        message_id = message_id if type(message_id) is str else _text(message_id)
        try:
            # canonical_bytes' work, its ids encoded here (without its call)
            canonical = canonical_encoded(
                # A reply names its destination node in ``to`` already: the
                # reply address is the caller's own (§8, §8.1).
                node=REPLY_NODE,
                to=self.address,
                # Text as it is (no call per field); else its text, "" when
                # absent (an empty correlation-id or reply-to is absent in the
                # canonical form).
                subject=subject if type(subject) is str else _text(subject),
                message_id=message_id.encode(),
                correlation_id=(
                    correlation_id if type(correlation_id) is str else _text(correlation_id)
                ).encode(),
                reply_to=reply_to if reply_to is None or type(reply_to) is str else str(reply_to),
                creation_ms=creation,
                expiry_ms=expiry,
                kind=str(kind or "command"),
                headers=app,
                body=body,
            )
        except (WireFormatError, TypeError) as exc:
            return BAD_SIGNATURE, f"its fields cannot be signed: {exc}"
        except UnicodeEncodeError as exc:  # an id, as canonical_bytes words it
            return BAD_SIGNATURE, (
                f"its fields cannot be signed: message {message_id!r}: text that is not "
                f"valid UTF-8 ({exc.reason})"
            )
        if alg == HMAC_SHA256:
            last = self._last
            if last[0] == sig_key:
                _, keyed, expires = last
            else:
                held = self._macs.get(sig_key)
                if held is None:
                    return UNKNOWN_KEY, f"session {sig_key} was not handed to this peer"
                keyed, expires = held
                self._last = (sig_key, keyed, expires)
            if expires <= self._clock():
                return UNKNOWN_KEY, f"session {sig_key} handed to this peer is over"
            mac = keyed.copy()
            mac.update(canonical)
            if not hmac.compare_digest(mac.digest(), sig):
                return BAD_SIGNATURE, "HMAC does not match"
            return None
        return self._verify_ed25519(sig_key, sig, canonical)

    def _verify_ed25519(self, sig_key: str, sig: bytes, canonical: bytes) -> tuple[str, str] | None:
        """Why an Ed25519 signature over ``canonical`` does not hold, or None."""
        assert self._keyring is not None
        key = self._keyring.trusted(sig_key)
        if key is None:
            return UNKNOWN_KEY, f"signed by key {sig_key}, which this node does not trust"
        if self._identity is not None and key.name != self._identity:
            return WRONG_PEER, (
                f"signed by key {sig_key} ({key.name!r}), but the peer's certificate "
                f"names {self._identity!r}"
            )
        try:
            key.verify(sig, canonical)
        except AuthError as exc:
            return BAD_SIGNATURE, exc.description
        return None

    def _reject(
        self, message_id: object, correlation_id: object, reason: str, description: str
    ) -> None:
        log(
            "actorctl:reply:rejected",
            peer=self.peer,
            reason=reason,
            description=description,
            message_id=None if message_id is None else str(message_id),
            correlation_id=None if correlation_id is None else str(correlation_id),
        )


#: Where a reply signed within a session ends its application properties:
#: ``sig_node`` naming ``REPLY_NODE`` (``_session_read.session_tail``).
def _reply_tail() -> SessionTail:
    tail = session_tail(REPLY_NODE)
    if tail is None:  # pragma: no cover (the empty name fits the layout)
        raise AssertionError("the reply node's sig_node pair does not fit the session layout")
    return tail


_IN_SESSION: Final = _reply_tail()


def _text(value: object) -> str:
    """A property as the canonical form has it: its text, or empty if absent."""
    return "" if value is None else str(value)
