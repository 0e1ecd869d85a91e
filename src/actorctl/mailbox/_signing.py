"""Message authentication: signing, HMAC sessions, replays and verification.

docs/protocol.md §11 is normative and docs/test-vectors.json pins it to this
code. This is the feature's one front module: it re-exports the canonical form
(``_auth``), the keys (``_keys``) and the HMAC sessions (``_session``), and holds
the signers and the :class:`Verifier`. Everything is pure (no sockets, no tasks).
A receiver calls :func:`canonical_bytes` and :meth:`Verifier.verify` on every
message (:meth:`Verifier.verify_in_session` for one signed within a session
whose signature it read itself), so the hot path is a few dictionary lookups,
one HMAC (or one Ed25519 verification) and no allocation it can avoid.
"""

from __future__ import annotations

import hmac
import struct
import time
from collections.abc import Callable, Mapping
from typing import Final, final

from ._auth import ED25519 as ED25519
from ._auth import HMAC_SHA256 as HMAC_SHA256
from ._auth import ORIGIN_KEY as ORIGIN_KEY
from ._auth import PREFIX as PREFIX
from ._auth import SESSION_ADDRESS as SESSION_ADDRESS
from ._auth import SESSION_SUBJECT as SESSION_SUBJECT
from ._auth import SIG as SIG
from ._auth import SIG_ALG as SIG_ALG
from ._auth import SIG_KEY as SIG_KEY
from ._auth import SIG_NODE as SIG_NODE
from ._auth import VERSION as VERSION
from ._auth import AuthError as AuthError
from ._auth import canonical_bytes as canonical_bytes
from ._auth import canonical_encoded as canonical_encoded
from ._conditions import AUTH_VERSION as AUTH_VERSION
from ._conditions import BAD_SESSION as BAD_SESSION
from ._conditions import BAD_SIGNATURE as BAD_SIGNATURE
from ._conditions import REPLAY as REPLAY
from ._conditions import REVOKED_KEY as REVOKED_KEY
from ._conditions import STALE as STALE
from ._conditions import UNAUTHENTICATED as UNAUTHENTICATED
from ._conditions import UNKNOWN_KEY as UNKNOWN_KEY
from ._conditions import UNKNOWN_SESSION as UNKNOWN_SESSION
from ._conditions import WRONG_NODE as WRONG_NODE
from ._keyring import Keyring as Keyring
from ._keys import IdentityKey as IdentityKey
from ._keys import PublicKey as PublicKey
from ._keys import key_id as key_id
from ._refusals import unsigned, wrong_node
from ._replay import ReplayCache as ReplayCache
from ._roles import Role, weakest
from ._session import DEFAULT_SESSION_LIFETIME as DEFAULT_SESSION_LIFETIME
from ._session import MAX_SESSION_LIFETIME as MAX_SESSION_LIFETIME
from ._session import Session as Session
from ._session import SessionOffer as SessionOffer
from ._session import SessionSigner as SessionSigner
from ._session import SessionTable as SessionTable
from ._session import Verified as Verified
from ._session import keyed_mac as keyed_mac
from ._session import read_session, session_error

__all__ = [
    "AUTH_VERSION",
    "BAD_SESSION",
    "BAD_SIGNATURE",
    "DEFAULT_SESSION_LIFETIME",
    "DEFAULT_WINDOW",
    "ED25519",
    "HMAC_SHA256",
    "MAX_SESSION_LIFETIME",
    "ORIGIN_KEY",
    "PREFIX",
    "REPLAY",
    "REVOKED_KEY",
    "SESSION_ADDRESS",
    "SESSION_SUBJECT",
    "SIG",
    "SIG_ALG",
    "SIG_KEY",
    "SIG_NODE",
    "STALE",
    "UNAUTHENTICATED",
    "UNKNOWN_KEY",
    "UNKNOWN_SESSION",
    "VERSION",
    "WRONG_NODE",
    "AuthError",
    "IdentityKey",
    "Keyring",
    "PublicKey",
    "ReplayCache",
    "Session",
    "SessionOffer",
    "SessionSigner",
    "SessionTable",
    "Verified",
    "Verifier",
    "canonical_bytes",
    "canonical_encoded",
    "key_id",
    "keyed_mac",
    "sign_ed25519",
    "sign_hmac",
]

DEFAULT_WINDOW: Final = 300.0
_u32 = struct.Struct(">I").pack


def sign_ed25519(key: IdentityKey, canonical: bytes) -> dict[str, object]:
    """The signature application properties of the per-message form."""
    return {SIG_ALG: ED25519, SIG_KEY: key.key_id, SIG: key.sign(canonical)}


def sign_hmac(session: Session, canonical: bytes) -> dict[str, object]:
    """The signature application properties of a message within ``session``."""
    return {
        SIG_ALG: HMAC_SHA256,
        SIG_KEY: session.id,
        SIG: hmac.digest(session.mac_key, canonical, "sha256"),
    }


# --- Verification --------------------------------------------------------------------


@final
class Verifier:
    """Authenticates incoming messages (docs/protocol.md §11.6).

    Args:
        keyring: the trusted keys and the members among them. When they change
            (its ``generation``), the next message sees the change, and the
            sessions of keys that are no longer trusted are dropped.
        sessions: the sessions opened with this receiver.
        node: the receiver's container id: a message whose ``sig_node`` names
            another node is refused before its signature is checked (the
            canonical bytes the receiver makes name this node anyway). None:
            not checked here (a caller that verifies for no one node).
        clock: the wall clock, seconds since the epoch.
        window: how far (s) a message's creation-time may be from the clock.
        replay: remembers accepted message ids; by default a fresh :class:`ReplayCache`.
        max_session_lifetime: the longest session (s) this receiver accepts.

    Attributes:
        signer_roles: the role each trusted key's own messages act with (what
            :meth:`role` gives for a message its signer sends for itself), by
            key id, as of the last message verified: read per message without
            a call. A key not in it: ask :meth:`role`.
    """

    def __init__(
        self,
        keyring: Keyring,
        sessions: SessionTable,
        *,
        node: str | None = None,
        clock: Callable[[], float] = time.time,
        window: float = DEFAULT_WINDOW,
        replay: ReplayCache | None = None,
        max_session_lifetime: float = MAX_SESSION_LIFETIME,
    ) -> None:
        self.sessions = sessions
        self.node = node
        self.members = keyring.members
        self.replay = ReplayCache() if replay is None else replay
        self.window = window
        self.max_session_lifetime = max_session_lifetime
        self._clock = clock
        self._window_ms = window * 1000.0
        self._keyring = keyring
        self._generation = -1
        self._keys: dict[str, tuple[PublicKey, Verified]] = {}
        self._roles: dict[str, Role] = {}
        self.signer_roles: dict[str, Role | None] = {}
        self._self = keyring.identity.key_id
        self._refresh()

    def _refresh(self) -> None:
        """Take the keyring's keys as they are now; drop the sessions of keys no
        longer trusted."""
        keyring = self._keyring
        self._generation = keyring.generation
        self.members = keyring.members
        self._roles = keyring.roles()
        self._keys = {k.key_id: (k, Verified(k.key_id, ED25519)) for k in keyring.public_keys()}
        self.signer_roles = {key: self._role_of(key) for key in self._keys}
        self.sessions.drop_untrusted(self._keys)

    def _role_of(self, key: str) -> Role | None:
        """What :meth:`role` gives for a message ``key`` signs for itself."""
        return None if key == self._self else self._roles.get(key, Role.CLIENT)

    def verify(
        self,
        headers: Mapping[str, object],
        canonical: bytes,
        *,
        message_id: str,
        creation_ms: int | None,
    ) -> Verified:
        """Check a message's destination, signature, time and novelty, in that order.

        Args:
            headers: its application properties (``sig_alg``, ``sig_key``, ``sig``).
            canonical: its :func:`canonical_bytes`.
            message_id: its message-id.
            creation_ms: its creation-time property (ms since the epoch).

        Returns:
            who vouched for it. Its (key id, message id) is now remembered.

        Raises:
            AuthError: with the condition that says why it is refused.
        """
        get = headers.get
        alg, sig_key, sig = get(SIG_ALG), get(SIG_KEY), get(SIG)
        if not isinstance(sig_key, str) or not isinstance(sig, bytes):
            raise unsigned(message_id, alg, sig_key, sig)
        if self._generation != self._keyring.generation:
            self._refresh()  # keys were added or revoked while the node runs
        node = self.node
        if node is not None and get(SIG_NODE) != node:
            raise wrong_node(message_id, get(SIG_NODE), node)
        if alg == HMAC_SHA256:
            return self.verify_in_session(sig_key, sig, canonical, message_id, creation_ms)
        if alg != ED25519:
            raise unsigned(message_id, alg, sig_key, sig)
        now = self._clock()
        found = self._keys.get(sig_key)
        if found is None and self._looked_again():
            found = self._keys.get(sig_key)
        if found is None:
            raise self._unknown_key(message_id, sig_key)
        try:
            found[0].verify(sig, canonical)
        except AuthError as exc:
            raise AuthError(BAD_SIGNATURE, f"message {message_id}: {exc.description}") from None
        return self._fresh(found[1], message_id, creation_ms, now)

    def verify_in_session(
        self,
        session_id: str,
        sig: bytes,
        canonical: bytes,
        message_id: str,
        creation_ms: int | None,
    ) -> Verified:
        """:meth:`verify` of a message signed within a session, its signature
        read already (``sig_key`` is ``session_id``) and its ``sig_node`` found
        to name this node: the session, its HMAC, the time and the novelty,
        checked as :meth:`verify` checks them, in the same order, with the same
        errors. Per message: no look at the headers.

        Raises:
            AuthError: with the condition that says why it is refused.
        """
        if self._generation != self._keyring.generation:
            self._refresh()  # keys were added or revoked while the node runs
        now = self._clock()
        # SessionTable._find, inline (per message): in and [], no call
        held = self.sessions._sessions
        entry = held[session_id] if session_id in held else None  # noqa: SIM401
        if entry is not None and entry[0].expires <= now:
            entry = self.sessions._find(session_id, now)  # expired: it drops it
        if entry is None:
            raise self._unknown_session(message_id, session_id)
        mac = entry[2].copy()
        mac.update(canonical)
        if not hmac.compare_digest(mac.digest(), sig):
            raise AuthError(BAD_SIGNATURE, f"message {message_id}: HMAC does not match")
        return self._fresh(entry[1], message_id, creation_ms, now)

    def _fresh(
        self, verified: Verified, message_id: str, creation_ms: int | None, now: float
    ) -> Verified:
        """``verified``, once its message is found in the time window and not
        seen before (now remembered). A replay is a copy: same signer, id and
        creation time. A sender that sends a message again signs it anew with a
        fresh creation time, and the copy goes on to the receiver's duplicate
        detection instead."""
        now_ms = now * 1000.0
        window_ms = self._window_ms
        if not creation_ms or not (now_ms - window_ms <= creation_ms <= now_ms + window_ms):
            raise self._stale(message_id, creation_ms, now_ms)
        # Named as entry_name names it, inline (per message: no tuple, no call).
        if self.replay.check_and_add_name(
            f"{verified.key_id} {message_id}@{creation_ms}", creation_ms + window_ms, now_ms
        ):
            raise self._replayed(message_id, verified)
        return verified

    def _replayed(self, message_id: str, verified: Verified) -> AuthError:
        return AuthError(
            REPLAY, f"message {message_id} from key {verified.key_id} was accepted already"
        )

    def _looked_again(self) -> bool:
        """A key it does not know: whether the keyring's directory, looked at
        again now, changed what is trusted (a key added a moment ago is
        trusted at its first message, not at the watch's next look)."""
        look = self._keyring.on_unknown
        if look is None or not look():
            return False
        self._refresh()
        return True

    def _unknown_key(self, message_id: str, key: str) -> AuthError:
        revoked = self._keyring.revoked(key)
        if revoked is not None:
            return AuthError(
                REVOKED_KEY, f"message {message_id}: signed by revoked key {key} ({revoked.name})"
            )
        return AuthError(UNKNOWN_KEY, f"message {message_id}: signed by unknown key {key}")

    def _unknown_session(self, message_id: str, session_id: str) -> AuthError:
        issuer = self.sessions.dropped_issuer(session_id)
        if issuer is None:
            return AuthError(
                UNKNOWN_SESSION, f"message {message_id}: session {session_id} is unknown or over"
            )
        revoked = self._keyring.revoked(issuer) is not None
        return AuthError(
            REVOKED_KEY if revoked else UNKNOWN_KEY,
            f"message {message_id}: session {session_id} was opened by key {issuer}, "
            f"which is {'revoked' if revoked else 'no longer trusted'}: the session is closed",
        )

    def _stale(self, message_id: str, creation_ms: int | None, now_ms: float) -> AuthError:
        return AuthError(
            STALE,
            f"message {message_id}: creation-time {creation_ms} is not within "
            f"{self.window:g} s of the receiver's clock ({now_ms:.0f})",
        )

    def is_member(self, key_id: str) -> bool:
        """Whether ``key_id`` is a cluster member's (it may assert an origin)."""
        return key_id in self.members

    def origin(self, verified: Verified, headers: Mapping[str, object]) -> str | None:
        """The origin a verified message asserts (``origin-key``: the identity a
        router forwards it for), if its signer is a cluster member and the value a
        non-empty string; else None: the message counts as its signer's."""
        origin = headers.get(ORIGIN_KEY)
        if isinstance(origin, str) and origin and verified.key_id in self.members:
            return origin
        return None

    def role(self, verified: Verified, sender: str) -> Role | None:
        """The role a verified message acts with: its signer's, or, when a member
        forwards it for ``sender`` (another identity), the lesser of the two
        (forwarding raises no one's role). None for the node's own key speaking
        for itself: the node is not checked against itself."""
        signer = verified.key_id
        if sender == signer:
            return self._role_of(signer)
        role = self._roles.get(signer, Role.CLIENT)
        return weakest(role, self._roles.get(sender, Role.CLIENT))

    def forget(self, verified: Verified, message_id: str, creation_ms: int | None) -> None:
        """Let the same message in again: call it when the receiver did not execute
        it (settled ``released``/``modified``, or refused for a full mailbox), since
        a sender may then send the same bytes again."""
        self.replay.forget((verified.key_id, f"{message_id}@{creation_ms}"))

    def accept_session(
        self,
        headers: Mapping[str, object],
        canonical: bytes,
        *,
        message_id: str,
        creation_ms: int | None,
        body: bytes,
        node: str,
    ) -> Session:
        """Verify a session message (subject ``$session``) and hold its session.

        Args:
            headers, canonical, message_id, creation_ms: as for :meth:`verify`.
            body: the raw body that ``canonical`` ends with.
            node: this receiver's node name; the session must name it.

        Raises:
            AuthError: any condition of :meth:`verify`, or ``actorctl:bad-session``:
                not Ed25519-signed, for another node, a bad body or expiry.
        """
        if not canonical.endswith(_u32(len(body)) + body):
            raise ValueError("body is not the body that the canonical bytes cover")
        verified = self.verify(headers, canonical, message_id=message_id, creation_ms=creation_ms)
        if verified.form != ED25519:
            raise AuthError(
                BAD_SESSION, f"message {message_id}: a session message must be signed ed25519"
            )
        now = self._clock()
        session = read_session(body, verified.key_id, node, now, self.max_session_lifetime)
        if session is None:
            raise AuthError(BAD_SESSION, f"message {message_id}: {session_error(body, node)}")
        self.sessions.add(session, now)
        return session
