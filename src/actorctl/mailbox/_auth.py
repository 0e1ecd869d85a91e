"""The vocabulary of message authentication and its canonical byte form.

docs/protocol.md §11 is normative; docs/test-vectors.json pins it to this code.
The rest of the feature is in ``_keys`` (Ed25519 keys, the keyring) and
``_signing`` (signing, sessions, verification), which re-exports it all.
"""

from __future__ import annotations

import json
import math
import struct
import uuid
from collections.abc import Mapping
from json.encoder import encode_basestring
from typing import Final, TypeVar

from .._errors import ActorctlError, WireFormatError

__all__ = [
    "ED25519",
    "HMAC_SHA256",
    "ORIGIN_KEY",
    "PREFIX",
    "SESSION_ADDRESS",
    "SESSION_SUBJECT",
    "SIG",
    "SIG_ALG",
    "SIG_KEY",
    "SIG_NODE",
    "VERSION",
    "AuthError",
    "canonical_bytes",
    "canonical_encoded",
    "canonical_time",
]


# The signature application properties and the two forms.
SIG_ALG: Final = "sig_alg"
SIG_KEY: Final = "sig_key"
SIG: Final = "sig"
# The destination node's container id, as the signer wrote it into the canonical
# bytes: a receiver checks it first, to say "signed for another node" plainly.
SIG_NODE: Final = "sig_node"
# What a cluster member that forwards a message (a router) asserts: the key id of
# the identity the message came from, for the receiver's duplicate detection.
ORIGIN_KEY: Final = "origin-key"
ED25519: Final = "ed25519"
HMAC_SHA256: Final = "hmac-sha256"

# Session messages go to this node address, with this subject.
SESSION_ADDRESS: Final = "$session"
SESSION_SUBJECT: Final = "$session"


class AuthError(ActorctlError):
    """A message failed authentication; the receiver settles it ``rejected``.

    Attributes:
        condition: the AMQP error condition (``actorctl:bad-signature``, ...).
        description: what was wrong, for people (logs and the outcome's description).
        message_id, key_id: the refused message's id and the key it claims,
            once known (:meth:`about`).
    """

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(f"{condition}: {description}")
        self.condition = condition
        self.description = description
        #: The refused message's id, and the key it claims, once known (for logs).
        self.message_id: str | None = None
        self.key_id: str | None = None

    def about(self, message_id: str, key_id: str | None) -> AuthError:
        """This error, saying which message it refused and the key it claims."""
        self.message_id, self.key_id = message_id, key_id
        return self


# --- The canonical byte form (docs/protocol.md §11.2) --------------------------------

VERSION: Final = "actorctl-auth-v2"
PREFIX: Final = VERSION.encode() + b"\n"
_ABSENT: Final = b"\xff\xff\xff\xff"
_u32 = struct.Struct(">I").pack
_UNCOVERED: Final = frozenset({"kind", "lang", SIG_ALG, SIG_KEY, SIG, SIG_NODE})
_NO_HEADERS: Final = _u32(0)
_ONE_HEADER: Final = _u32(1)
#: Each length below 256 as the four bytes _u32 packs it to.
_LENGTH: Final = [_u32(n) for n in range(256)]
_json_string = encode_basestring  # what json.dumps(..., ensure_ascii=False) uses


def _uuid_text(value: object) -> object:
    # proton decodes a uuid value to uuid.UUID, actorctl's own reader to its text.
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not a JSON value")


_header_json = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, sort_keys=True, default=_uuid_text
).encode


def canonical_bytes(
    *,
    node: str,
    to: str,
    subject: str,
    message_id: str,
    correlation_id: str | None,
    reply_to: str | None,
    creation_ms: int | None,
    expiry_ms: int | None,
    kind: str,
    headers: Mapping[str, object],
    body: bytes,
) -> bytes:
    """The bytes that both authentication forms cover (docs/protocol.md §11.2).

    ``PREFIX``, then each field as a 4-byte big-endian length and its UTF-8
    bytes, in the order of the parameters. An absent field (None, or an empty
    ``correlation_id``/``reply_to``, or a time of 0) is the length 0xFFFFFFFF
    alone. Times are decimal ASCII. Headers are counted, sorted by key and written
    as key and JSON value; ``kind``, ``lang``, the signature properties and null
    values are left out.

    Args:
        node: the container id of the node the message is for (the receiver's
            own, as its AMQP open frame gives it), so that a message cannot be
            replayed to another node, nor to the same node after a restart.
        to: the *actor name* the message is for, as the receiver resolved it from
            the link target (``calculator``, not a URL), so that a message cannot
            be replayed to another actor; ``$session`` for session messages.
        subject: the handler name.
        message_id: the message-id property.
        correlation_id: the correlation-id property, if any.
        reply_to: the reply-to property, if any.
        creation_ms: the creation-time property, ms since the epoch, as on the wire.
        expiry_ms: the absolute-expiry-time property, ms since the epoch.
        kind: ``command``, ``event`` or ``document``.
        headers: the application properties (those not covered are skipped here).
        body: the bytes of the data section exactly as on the wire.

    Raises:
        WireFormatError: text that is not valid UTF-8, or a header value JSON
            cannot hold (binary, an array, a map with keys that are not strings, ...).
    """
    try:
        m = message_id.encode()
        c = correlation_id.encode() if correlation_id else None
    except UnicodeEncodeError as exc:
        raise WireFormatError(
            f"message {message_id!r}: text that is not valid UTF-8 ({exc.reason})"
        ) from None
    return canonical_encoded(
        node=node,
        to=to,
        subject=subject,
        message_id=m,
        correlation_id=c,
        reply_to=reply_to,
        creation_ms=creation_ms,
        expiry_ms=expiry_ms,
        kind=kind,
        headers=headers,
        body=body,
    )


def canonical_encoded(
    *,
    node: str,
    to: str,
    subject: str,
    message_id: bytes,
    correlation_id: bytes | None,
    reply_to: str | None,
    creation_ms: int | None,
    expiry_ms: int | None,
    kind: str,
    headers: Mapping[str, object],
    body: bytes,
) -> bytes:
    """:func:`canonical_bytes`, given the message id and the correlation id as
    their UTF-8 bytes already (an encoder that writes them on the wire too
    encodes each once: ``_encoding.py``); an empty or None correlation id is
    absent. The same bytes, the same errors."""
    # Written out flat, not in a loop: this runs on every message a node sends
    # or receives. What comes before the subject is the same for every message
    # to one actor on one node: it is made once (_head); the subject, the
    # kind and the reply address recur, each framed once (_field). A length
    # below 256 is looked up (_LENGTH), not packed: ids always are; a time of
    # 13 digits (2001 to 2286) has its length written as a constant.
    lengths = _LENGTH
    try:
        where = (node, to)
        head = _heads[where] if where in _heads else _head(node, to)
        s = _fields[subject] if subject in _fields else _field(subject)
        k = _fields[kind] if kind in _fields else _field(kind)
        m = (lengths[n] if (n := len(message_id)) < 256 else _u32(n)) + message_id
        if correlation_id:
            c = (lengths[n] if (n := len(correlation_id)) < 256 else _u32(n)) + correlation_id
        else:
            c = _ABSENT
        if reply_to:  # a caller's reply address: it recurs, as the subject does
            r = _fields[reply_to] if reply_to in _fields else _field(reply_to)
        else:
            r = _ABSENT
        # The covered headers' keys in order, by the keys the message has (they
        # recur): most messages have none covered, and then no call is made.
        names = (*headers,)
        order = _orders[names] if names in _orders else _order(names, headers)
        h = _headers(headers, order) if order else _NO_HEADERS_PARTS
    except UnicodeEncodeError as exc:
        said = message_id.decode(errors="replace")
        raise WireFormatError(
            f"message {said!r}: text that is not valid UTF-8 ({exc.reason})"
        ) from None
    cr, ex = canonical_time(creation_ms), canonical_time(expiry_ms)
    b = lengths[n] if (n := len(body)) < 256 else _u32(n)
    return b"".join((head, s, m, c, r, cr, ex, k, *h, b, body))


#: The times of 13 decimal digits (ms since the epoch, 2001 to 2286).
_MS13_LOW: Final = 10**12
_MS13_HIGH: Final = 10**13


def canonical_time(ms: int | None) -> bytes:
    """A time of the canonical bytes (ms since the epoch; None or 0: absent):
    its decimal digits, framed (one place, for the general encoder and the
    shapes alike: a shape signs what this writes)."""
    if not ms:
        return _ABSENT
    if _MS13_LOW <= ms < _MS13_HIGH:  # 13 digits: their length is a constant
        return b"\x00\x00\x00\x0d%d" % ms
    digits = b"%d" % ms
    return _u32(len(digits)) + digits


#: ``_headers`` of a message with no covered header: the count 0 alone.
_NO_HEADERS_PARTS: Final = (_NO_HEADERS,)

# The caches below hold what recurs, each framed or encoded once: a text goes
# in at its second sighting (its ``_seen_*`` set holds those met once, and is
# emptied when full), so that unique ones (task ids, one-off addresses) never
# fill a cache. Each is bounded (_MAX_HEADS) and never emptied: what a reader
# found by ``in`` is still there at ``[]``, whatever another thread adds.
_MAX_HEADS: Final = 4096

# PREFIX, node and to, by (node, to).
_heads: dict[tuple[str, str], bytes] = {}
_seen_heads: set[tuple[str, str]] = set()
# The subjects, kinds and reply addresses, each as its length and UTF-8 bytes.
_fields: dict[str, bytes] = {}
_seen_fields: set[str] = set()
# A header key's length and UTF-8 bytes, by key.
_keys: dict[str, bytes] = {}
_seen_keys: set[str] = set()
# A header's key and JSON value as ``_headers`` writes them, by (key, value),
# for a value that is exactly a str or an int (so True is never taken for 1).
# Its ``_seen_pairs`` is a dict, so that noting a pair is no call.
_pairs: dict[tuple[str, object], bytes] = {}
_seen_pairs: dict[tuple[str, object], None] = {}
#: How many pairs were noted in ``_seen_pairs`` since it was last emptied (at
#: least its size): counted, not measured, so that noting one is no call.
_noted_pairs: Final = [0]
# The covered header keys in their order, by the keys of the headers as given.
_orders: dict[tuple[str, ...], tuple[str, ...]] = {}
_seen_orders: set[tuple[str, ...]] = set()

_Key = TypeVar("_Key")
_Value = TypeVar("_Value")


def _admit(cache: dict[_Key, _Value], seen: set[_Key], key: _Key, value: _Value) -> None:
    """Cache ``value`` at ``key`` if it was met before (see ``_MAX_HEADS``)."""
    if key in seen:
        if len(cache) < _MAX_HEADS:
            cache[key] = value
    else:
        if len(seen) >= _MAX_HEADS:
            seen.clear()
        seen.add(key)


def _field(text: str) -> bytes:
    raw = text.encode()
    field = _u32(len(raw)) + raw
    _admit(_fields, _seen_fields, text, field)
    return field


def _head(node: str, to: str) -> bytes:
    n, t = node.encode(), to.encode()
    head = PREFIX + _u32(len(n)) + n + _u32(len(t)) + t
    _admit(_heads, _seen_heads, (node, to), head)
    return head


def _order(names: tuple[str, ...], headers: Mapping[str, object]) -> tuple[str, ...]:
    """The keys of ``headers`` (``names``) that the canonical bytes cover, sorted
    as text (UTF-8 keeps the order of code points, so it is the order of their
    bytes); ``kind``, ``lang`` and the signature properties are left out."""
    covered = {*names} - _UNCOVERED
    try:
        order = tuple(sorted(covered))
    except TypeError:  # keys of several types: one is not a string
        named = [key for key in covered if headers[key] is not None]
        for key in named:
            _key(key)  # raises, naming a key that is not a string (null ones are left out)
        return tuple(sorted(named))
    _admit(_orders, _seen_orders, names, order)
    return order


def _headers(headers: Mapping[str, object], order: tuple[str, ...]) -> list[bytes]:
    """The header count, then each covered header's key and JSON value, in
    ``order`` (``_order``), as the parts of the canonical bytes.

    Per message: a header that recurs (a pool, a state) is found whole in
    ``_pairs``; any other has its key from ``_keys``, and a text or integer
    value skips ``_json_value``; the count is kept as the pairs are written."""
    parts = [_NO_HEADERS]  # the count, set at the end
    pairs, keys, count = _pairs, _keys, 0
    for key in order:
        value = headers[key]
        if type(value) is str or type(value) is int:
            pair = (key, value)
            if pair in pairs:
                parts += (pairs[pair],)
                count += 1
                continue
            head = keys[key] if key in keys else _key(key)
            raw = _json_string(value).encode() if type(value) is str else b"%d" % int(value)
            n = len(raw)
            encoded = head + (_LENGTH[n] if n < 256 else _u32(n)) + raw
            # _admit, inline: a unique value (a task id) comes here per message
            if pair in _seen_pairs:
                if len(pairs) < _MAX_HEADS:
                    pairs[pair] = encoded
            else:
                _seen_pairs[pair] = None
                _noted_pairs[0] += 1
                if _noted_pairs[0] >= _MAX_HEADS:
                    _forget_pairs()
        elif value is None:
            continue
        else:
            head = keys[key] if key in keys else _key(key)
            raw = _json_value(key, value)
            n = len(raw)
            encoded = head + (_LENGTH[n] if n < 256 else _u32(n)) + raw
        parts += (encoded,)
        count += 1
    parts[0] = _LENGTH[count] if count < 256 else _u32(count)
    return parts


def _forget_pairs() -> None:
    """Empty ``_seen_pairs`` (it noted ``_MAX_HEADS`` pairs)."""
    _seen_pairs.clear()
    _noted_pairs[0] = 0


def _key(key: object) -> bytes:
    if not isinstance(key, str):
        raise WireFormatError(f"application property key {key!r} is not a string")
    raw = key.encode()
    head = _u32(len(raw)) + raw
    _admit(_keys, _seen_keys, key, head)
    return head


def _json_value(key: str, value: object) -> bytes:
    """The JSON text of a header value; the common types skip the encoder's setup."""
    if isinstance(value, str):
        return _json_string(value).encode()
    if value is True or value is False:
        return b"true" if value else b"false"
    if isinstance(value, int):
        return b"%d" % value
    if isinstance(value, float) and math.isfinite(value):
        return float.__repr__(value).encode()  # what json writes: shortest round-trip
    try:
        if not _string_keys(value):
            raise TypeError("a map key is not a string")
        return _header_json(value).encode()
    except (TypeError, ValueError) as exc:
        raise WireFormatError(
            f"application property {key!r} cannot be authenticated ({exc}): use null, "
            "boolean, integer, double or string values"
        ) from None


def _string_keys(value: object) -> bool:
    """Whether every map inside ``value`` has string keys (json would write 1 as "1")."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _string_keys(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(_string_keys(v) for v in value)
    return True
