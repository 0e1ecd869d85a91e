"""A signing session as a receiver holds it, and how the body of a session
message (docs/protocol.md §11.5) is read into one."""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from typing import final

__all__ = ["Session", "read_session", "session_error"]


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
