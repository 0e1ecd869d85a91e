"""HMAC signing sessions (docs/protocol.md §11.5): what a sender offers and signs
with (:class:`SessionOffer`, :class:`SessionSigner`), a session as a receiver holds
it, how the body of a session message is read into one, and the table of the
sessions a receiver holds (:class:`SessionTable`). ``_signing`` re-exports them."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
from collections.abc import Container
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple, final

from ._auth import HMAC_SHA256, SIG, SIG_ALG, SIG_KEY, AuthError
from ._conditions import BAD_SESSION
from ._keys import IdentityKey

__all__ = [
    "DEFAULT_SESSION_LIFETIME",
    "MAX_SESSION_LIFETIME",
    "Session",
    "SessionOffer",
    "SessionSigner",
    "SessionTable",
    "Verified",
    "keyed_mac",
    "read_session",
    "session_error",
]

DEFAULT_SESSION_LIFETIME: Final = 3600.0
MAX_SESSION_LIFETIME: Final = 86400.0


@final
@dataclass(frozen=True, slots=True)
class Session:
    """A MAC key that a receiver holds for one sender (the issuer).

    Attributes:
        id: 32 hex digits; what ``sig_key`` carries.
        mac_key: the 32-byte HMAC-SHA256 key (not shown by repr).
        issuer_key_id: the key id of the Ed25519 key that signed the session message.
        expires: seconds since the epoch; the session is unknown from then on.
    """

    id: str
    mac_key: bytes = field(repr=False)
    issuer_key_id: str
    expires: float


_SESSION_ID = re.compile(r"[0-9a-f]{32}")


def read_session(
    body: bytes, issuer: str, node: str, now: float, max_lifetime: float
) -> Session | None:
    """The session a session message's body opens, or None if it is not valid."""
    try:
        doc = json.loads(body)
        sid, expires_ms = doc["session"], doc["expires_ms"]
        mac_key = base64.b64decode(doc["key"], validate=True)
        for_node = doc["node"]
    except (ValueError, TypeError, KeyError, RecursionError, binascii.Error):
        return None
    if (
        not isinstance(sid, str)
        or not _SESSION_ID.fullmatch(sid)
        or len(mac_key) != 32
        or for_node != node
        or type(expires_ms) is not int
        # in ms: an int of any size compares with a float exactly (no overflow)
        or not now * 1000 < expires_ms <= (now + max_lifetime) * 1000
    ):
        return None
    return Session(sid, mac_key, issuer, expires_ms / 1000)


def session_error(body: bytes, node: str) -> str:
    """Says what is wrong with a session body that :func:`read_session` refused."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return "session body is not JSON"
    if not isinstance(doc, dict):
        return "session body is not a JSON object"
    if doc.get("node") != node:
        return f"session is for node {doc.get('node')!r}, not this node ({node!r})"
    return (
        "session body needs session (32 hex digits), key (32 bytes, base64), node and "
        "expires_ms (an integer, in the future, within the longest session lifetime)"
    )


# --- The sender's side ---------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class SessionOffer:
    """What a sender makes to open a session: see :meth:`new` and :meth:`body`."""

    id: str
    mac_key: bytes = field(repr=False)
    expires: float
    issuer_key_id: str

    @classmethod
    def new(
        cls, identity: IdentityKey, *, now: float, lifetime: float = DEFAULT_SESSION_LIFETIME
    ) -> SessionOffer:
        """A fresh random MAC key and session id, expiring ``lifetime`` s from ``now``.

        Open the next session before this one expires (say at 80% of its
        lifetime): both stay valid until their own expiry.
        """
        return cls(os.urandom(16).hex(), os.urandom(32), now + lifetime, identity.key_id)

    def body(self, node: str) -> bytes:
        """The JSON body of the session message for the receiving ``node``.

        Send it as a command with subject ``$session`` to the address ``$session``,
        signed with :func:`sign_ed25519` by the issuer's key, over TLS only: it
        carries the MAC key in the clear.
        """
        doc = {
            "session": self.id,
            "key": base64.b64encode(self.mac_key).decode(),
            "expires_ms": round(self.expires * 1000),
            "node": node,
        }
        return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()

    def session(self) -> Session:
        """The sender's own copy, for :func:`sign_hmac`."""
        return Session(self.id, self.mac_key, self.issuer_key_id, self.expires)


@final
class SessionSigner:
    """Signs within ``session`` (what :func:`sign_hmac` does), keying the HMAC
    once instead of on every message."""

    __slots__ = ("_id", "keyed", "session")

    def __init__(self, session: Session) -> None:
        self.session = session
        self._id = session.id
        #: The session's HMAC, keyed and fed nothing (:func:`keyed_mac`): the
        #: encoder signs with a copy of it itself, without this call's dict.
        self.keyed = keyed_mac(session.mac_key)

    def __call__(self, canonical: bytes) -> dict[str, object]:
        mac = self.keyed.copy()
        mac.update(canonical)
        return {SIG_ALG: HMAC_SHA256, SIG_KEY: self._id, SIG: mac.digest()}


def keyed_mac(key: bytes) -> Any:
    """An HMAC-SHA256 keyed with ``key`` and fed nothing yet: ``copy()`` it, then
    ``update`` and ``digest`` the copy, once per message (keying costs more than
    a copy). OpenSSL's own object when the hmac module has one, without the
    pure-Python wrapper around it: one message costs three C calls, not six."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    inner = getattr(mac, "_hmac", None)  # CPython's _hashlib.HMAC, when OpenSSL keys it
    if inner is not None and all(hasattr(inner, name) for name in ("copy", "update", "digest")):
        return inner
    return mac


# --- The receiver's table -------------------------------------------------------------


class Verified(NamedTuple):
    """Who vouched for a message: an Ed25519 key id, and the form (``ed25519`` or
    ``hmac-sha256``; for a session, ``key_id`` is the session's issuer)."""

    key_id: str
    form: str


@final
class SessionTable:
    """The sessions a receiver holds, at most ``max_sessions`` in all and
    ``per_issuer`` for one issuer (the oldest one goes first). Expired sessions
    are dropped when looked up."""

    def __init__(self, max_sessions: int = 4096, per_issuer: int = 16) -> None:
        if max_sessions < 1 or per_issuer < 1:
            raise ValueError("a session table holds at least one session")
        self.max_sessions = max_sessions
        self.per_issuer = per_issuer
        # Each session with who vouched for it and its keyed HMAC, made once:
        # copying a keyed HMAC costs a fraction of keying one per message.
        self._sessions: dict[str, tuple[Session, Verified, Any]] = {}
        # Sessions dropped because their issuer is no longer trusted, with that
        # issuer: so that a refusal can say why (at most max_sessions of them).
        self._dropped: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def add(self, session: Session, now: float) -> None:
        """Hold ``session`` until it expires (or the bounds push it out). Sessions
        that have expired at ``now`` go first. O(n): sessions open rarely.

        Raises:
            AuthError: ``actorctl:bad-session`` if its id is in use already.
        """
        same_issuer = []
        for sid, (held, _, _) in list(self._sessions.items()):
            if held.expires <= now:
                del self._sessions[sid]
            elif held.issuer_key_id == session.issuer_key_id:
                same_issuer.append(sid)
        if session.id in self._sessions:
            raise AuthError(BAD_SESSION, f"session {session.id} is open already")
        if len(same_issuer) >= self.per_issuer:
            del self._sessions[same_issuer[0]]
        elif len(self._sessions) >= self.max_sessions:
            del self._sessions[next(iter(self._sessions))]
        self._sessions[session.id] = (
            session,
            Verified(session.issuer_key_id, HMAC_SHA256),
            keyed_mac(session.mac_key),
        )

    def drop_untrusted(self, trusted: Container[str]) -> list[Session]:
        """Drop every session whose issuer's key id is not in ``trusted`` (its key
        was revoked or removed from the keyring): their messages are refused
        from now on.

        Returns:
            the sessions dropped.
        """
        sessions = self._sessions
        dropped = [held for held, _, _ in sessions.values() if held.issuer_key_id not in trusted]
        for session in dropped:
            del self._sessions[session.id]
            self._dropped[session.id] = session.issuer_key_id
        while len(self._dropped) > self.max_sessions:
            del self._dropped[next(iter(self._dropped))]
        return dropped

    def dropped_issuer(self, session_id: str) -> str | None:
        """The issuer of a session that :meth:`drop_untrusted` dropped, or None."""
        return self._dropped.get(session_id)

    def get(self, session_id: str, now: float) -> Session | None:
        """The session with that id unless it has expired at ``now``."""
        entry = self._find(session_id, now)
        return None if entry is None else entry[0]

    def _find(self, session_id: str, now: float) -> tuple[Session, Verified, Any] | None:
        entry = self._sessions.get(session_id)
        if entry is not None and entry[0].expires <= now:
            del self._sessions[session_id]
            return None
        return entry
