"""The AMQP 1.0 encoding of an envelope (docs/protocol.md, normative): the bare
message bytes of an :class:`~._envelope.Envelope`, signed over its canonical bytes
(docs/protocol.md §11.2) when a signer is given. The hot path writes the fixed
layout itself; what it does not know goes through proton's general encoder.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any, Final

from proton import Message

from .._errors import WireFormatError
from ._auth import (
    HMAC_SHA256,
    SIG,
    SIG_ALG,
    SIG_KEY,
    SIG_NODE,
    canonical_bytes,
    canonical_encoded,
)
from ._envelope import CONTENT_TYPE_JSON, Envelope, _dumps, json_dumps
from ._session import SessionSigner
from ._shapes import Shape, learn, shape_of
from ._wire import (
    APP_PROPERTIES,
    DATA,
    FALSE,
    JSON_SYMBOL,
    KIND_LANG,
    LANG,
    LENGTHS,
    NULL,
    PROPERTIES,
    SIG_NODE_KEY,
    TRUE,
    binary,
    pack_double,
    pack_list32,
    pack_long,
    pack_size32,
    string,
)

__all__ = ["Signer", "canonical", "encode", "to_ms"]


#: Signs a message's canonical bytes (docs/protocol.md §11); returns the
#: application properties that carry the signature.
Signer = Callable[[bytes], Mapping[str, object]]


def encode(
    envelope: Envelope, *, signer: Signer | None = None, actor: str = "", node: str = ""
) -> bytes:
    """Encode an envelope as one AMQP 1.0 message (bare message bytes).

    Every message crosses this on the hot path, so the fixed layout of
    docs/protocol.md is written directly; headers whose values are not simple
    AMQP types (lists, maps) go through proton's general encoder instead.

    Args:
        signer: signs the message (per message, or within a session); None sends
            it unauthenticated.
        actor: the name of the actor it is for, which the signature covers.
        node: the container id of the node it is for, which the signature covers
            (and ``sig_node`` names).
    """
    value = envelope.body
    try:
        if type(value) is int:  # a count, a sum (a task's result): JSON is its digits
            body = b"%d" % value
        elif value is None:
            body = b"null"
        else:
            try:
                body = _dumps(value).encode()
            except (TypeError, ValueError):
                body = json_dumps(value)  # raises, saying what is not JSON
        extra = signature = None
        # The times as on the wire (ms), made once for the signature and the properties.
        creation, expiry = envelope.creation_time, envelope.expiry_time
        try:
            times = (
                round(creation * 1000) if creation else None,
                round(expiry * 1000) if expiry else None,
            )
        except ValueError:  # NaN: no number of ms at all
            raise OverflowError from None  # (said below, as for a time past 64 bits)
        # The ids' bytes, made once for the signature and the properties.
        correlation_id = envelope.correlation_id
        ids = (
            envelope.message_id.encode(),
            correlation_id.encode() if correlation_id else None,
        )
        # A message of a shape that recurs (an actor's replies to one caller,
        # one caller's requests to one handler): its fixed parts are encoded
        # once (_shapes).
        shaped = None
        if signer is None or type(signer) is SessionSigner:
            shaped = shape_of(envelope, signer, actor, node, times)
            if type(shaped) is Shape:
                return shaped.render(body, times, ids, correlation_id, signer)
        if signer is not None:
            # canonical(), written out: one call fewer per message signed
            canonical = canonical_encoded(
                node=node,
                to=actor,
                subject=envelope.subject,
                message_id=ids[0],
                correlation_id=ids[1],
                reply_to=envelope.reply_to,
                creation_ms=times[0],
                expiry_ms=times[1],
                kind=envelope.kind,
                headers=envelope.headers,
                body=body,
            )
            if type(signer) is SessionSigner:
                # Within a session (per message): the signature's three
                # properties written here, as the signer's own call would give them.
                mac = signer.keyed.copy()
                mac.update(canonical)
                sid = signer.session.id
                try:  # (no call per message: the session's head is made once)
                    head = _session_heads[sid]
                except KeyError:
                    head = _session_head(sid)
                signature = head + mac.digest()
            else:
                extra = signer(canonical)
        app = _app_properties(envelope, extra, signature, node)
        if app is None:
            if signature is not None and signer is not None:
                extra = signer(canonical)  # the same signature, as properties
            return _encode_with_proton(envelope, body, extra, node)
        encoded = _encode(envelope, body, app, times, ids)
        if isinstance(shaped, tuple):  # its key: noted, or made at its second message
            session = signer if type(signer) is SessionSigner else None  # (it is, or None)
            learn(shaped, body, times, ids, correlation_id, session, encoded)
        return encoded
    except UnicodeEncodeError as exc:
        raise WireFormatError(
            f"message {envelope.message_id!r}: text that is not valid UTF-8 ({exc.reason})"
        ) from None
    except (struct.error, OverflowError):  # a number no AMQP type here holds
        raise WireFormatError(
            f"message {envelope.message_id!r}: a number past what AMQP can carry: a time "
            f"(creation {envelope.creation_time!r} s, expiry {envelope.expiry_time!r} s) "
            "must be finite and within a signed 64-bit count of ms since 1970, a header's "
            "integer within 64 bits"
        ) from None


def canonical(envelope: Envelope, actor: str, body: bytes, node: str = "") -> bytes:
    """The bytes a signature over this envelope covers (docs/protocol.md §11.2),
    for ``actor`` on the node whose container id is ``node``."""
    creation, expiry = envelope.creation_time, envelope.expiry_time
    return canonical_bytes(
        node=node,
        to=actor,
        subject=envelope.subject,
        message_id=envelope.message_id,
        correlation_id=envelope.correlation_id,
        reply_to=envelope.reply_to,
        creation_ms=round(creation * 1000) if creation else None,  # to_ms, inline
        expiry_ms=round(expiry * 1000) if expiry else None,
        kind=envelope.kind,
        headers=envelope.headers,
        body=body,
    )


def to_ms(seconds: float | None) -> int | None:
    return None if not seconds else round(seconds * 1000)


def _encode(
    envelope: Envelope,
    body: bytes,
    app: tuple[bytes, int],
    times: tuple[int | None, int | None],
    ids: tuple[bytes, bytes | None],
) -> bytes:
    """The message's bytes, its application properties encoded already, its
    creation and expiry times in ms (as the signature covers them), its
    message id and correlation id (None: none) as UTF-8 bytes."""
    names = _names  # the recurring strings, encoded once (_name), looked up inline
    to, reply_to = envelope.to, envelope.reply_to
    subject = envelope.subject
    creation, expiry = times
    message_id, raw = ids  # (its encoding, done once in encode)
    size = len(message_id)
    if raw:  # _wire.string, inline (per message: a task id)
        n = len(raw)
        correlation = (b"\xa1" + LENGTHS[n] if n < 256 else b"\xb1" + pack_size32(n)) + raw
    else:
        correlation = NULL
    fields = [
        (b"\xa1" + LENGTHS[size] if size < 256 else b"\xb1" + pack_size32(size)) + message_id,
        NULL,  # user-id
        (names[to] if to in names else _name(to)) if to else NULL,
        names[subject] if subject in names else _name(subject),
        (names[reply_to] if reply_to in names else _name(reply_to)) if reply_to else NULL,
        correlation,
        JSON_SYMBOL,
        NULL,  # content-encoding
        # _timestamp, inline (per message)
        NULL if expiry is None else b"\x83" + pack_long(expiry),
        NULL if creation is None else b"\x83" + pack_long(creation),
    ]
    count = 10  # len(fields), kept as the null ones at the end go: no call
    while fields[-1] is NULL:
        fields.pop()
        count -= 1
    props = b"".join(fields)
    return b"".join(
        (
            PROPERTIES,
            pack_list32(len(props) + 4, count),
            props,
            APP_PROPERTIES,
            pack_list32(len(app[0]) + 4, app[1]),
            app[0],
            DATA,
            pack_size32(len(body)),
            body,
        )
    )


def _app_properties(
    envelope: Envelope, extra: Mapping[str, object] | None, signature: bytes | None, node: str
) -> tuple[bytes, int] | None:
    """The application-properties map, or None if a value is not a simple type.
    A signed message names the node it was signed for (``sig_node``); its
    signature comes as properties (``extra``), or within a session as their
    bytes (``signature``: ``sig_alg``, ``sig_key`` and ``sig``, three pairs).

    Per message: the usual values (text, integers) are told by their exact type
    first, and the recurring strings (keys, states, key ids) come from ``_names``
    without a call (a membership test and an index: no method call per item)."""
    kind = envelope.kind
    parts = [KIND_LANG[kind] if kind in KIND_LANG else string("kind") + string(kind) + LANG]
    names, once = _names, _once
    count = 4
    for items in (envelope.headers, extra):
        if not items:
            continue
        for key, value in items.items():
            if type(value) is str:
                if value in names:
                    encoded = names[value]
                elif value in once:  # its second sighting (it was short): cached now
                    encoded = _name(value)
                else:
                    # Met the first time (a unique value, such as a task id,
                    # comes here per message): _wire.string, and _name's noting
                    # for a short one (of at most 40 characters), inline.
                    raw = value.encode()
                    n = len(raw)
                    encoded = (b"\xa1" + LENGTHS[n] if n < 256 else b"\xb1" + pack_size32(n)) + raw
                    if n <= 40 or len(value) <= 40:
                        once[value] = None
                        _noted[0] += 1
                        if _noted[0] >= _MAX_NAMES:
                            _forget_once()
            elif type(value) is int and -(2**63) <= value < 2**63:
                encoded = b"\x81" + pack_long(value)
            elif type(value) is bytes and len(value) < 256:  # a signature
                encoded = b"\xa0" + LENGTHS[len(value)] + value
            elif value is None:
                continue
            else:
                found = _value(value)
                if found is None:
                    return None
                encoded = found
            parts += (names[key] if key in names else _name(key), encoded)
            count += 2
    if signature is not None:
        parts += (signature, SIG_NODE_KEY, names[node] if node in names else _name(node))
        count += 8
    elif extra:
        parts += (SIG_NODE_KEY, names[node] if node in names else _name(node))
        count += 2
    return b"".join(parts), count


def _value(value: object) -> bytes | None:
    """An application property value that ``_app_properties`` does not write
    itself (a boolean, a double, a long binary, a subclass of ``str`` or
    ``int``), or None if it is not a simple AMQP type."""
    if isinstance(value, bytes):
        return binary(value)
    if value is True or value is False:
        return TRUE if value else FALSE
    if isinstance(value, str):
        return _name(value) if len(value) <= 40 else string(value)
    if isinstance(value, int) and -(2**63) <= value < 2**63:
        return b"\x81" + pack_long(value)
    if isinstance(value, float):
        return b"\x82" + pack_double(value)
    return None


#: The strings that recur (header names, subjects, reply addresses, session ids,
#: node names), each as ``_wire.string`` encodes it, and the strings met once since
#: ``_once`` was last emptied (a dict, so that noting one is no call). Each
#: holds at most ``_MAX_NAMES``: ``_names`` is never emptied (a name found by
#: ``in`` is still there at ``[]``, whatever another thread encodes
#: meanwhile), ``_once`` is when it is full.
_names: dict[str, bytes] = {}
_once: dict[str, None] = {}
_MAX_NAMES: Final = 4096
#: How many strings were noted in ``_once`` since it was last emptied (at
#: least its size): counted, not measured, so that noting one is no call.
_noted: Final = [0]


def _forget_once() -> None:
    """Empty ``_once`` (it noted ``_MAX_NAMES`` strings)."""
    _once.clear()
    _noted[0] = 0


def _name(text: str) -> bytes:
    """``_wire.string`` for the strings that recur: encoded once, from their second
    sighting on. A string met once (a task id, a message id in a header) only
    goes in ``_once``, so that unique strings never fill ``_names``: a string
    that starts to recur after a million unique ones (a session opened later,
    a new caller's reply address) is cached at its second message."""
    if text in _names:
        return _names[text]
    raw = text.encode()  # _wire.string, inline: a unique string (a task id) comes here per message
    if (size := len(raw)) < 256:
        encoded = b"\xa1" + LENGTHS[size] + raw
    else:
        encoded = b"\xb1" + pack_size32(size) + raw
    if text in _once:
        if len(_names) < _MAX_NAMES:
            _names[text] = encoded
    else:
        _once[text] = None
        _noted[0] += 1
        if _noted[0] >= _MAX_NAMES:
            _forget_once()
    return encoded


#: The ``sig_alg`` and ``sig_key`` pairs and the ``sig`` key of a message signed
#: within a session, by session id: the digest's 32 bytes complete them.
_session_heads: dict[str, bytes] = {}


def _session_head(session_id: str) -> bytes:
    head = b"".join(
        (
            string(SIG_ALG),
            string(HMAC_SHA256),
            string(SIG_KEY),
            string(session_id),
            string(SIG),
            b"\xa0\x20",  # a vbin8 of 32 bytes: an HMAC-SHA256 digest
        )
    )
    if len(_session_heads) >= _MAX_NAMES:
        _session_heads.clear()
    _session_heads[session_id] = head
    return head


def _encode_with_proton(
    envelope: Envelope, body: bytes, extra: Mapping[str, object] | None, node: str
) -> bytes:
    msg = Message(
        id=envelope.message_id,
        address=envelope.to,
        subject=envelope.subject,
        reply_to=envelope.reply_to,
        correlation_id=envelope.correlation_id,
        content_type=CONTENT_TYPE_JSON,
        body=body,
        inferred=True,  # bytes go in a data section, not an amqp-value
    )
    if envelope.creation_time is not None:
        msg.creation_time = envelope.creation_time
    if envelope.expiry_time is not None:
        msg.expiry_time = envelope.expiry_time
    props: dict[str, Any] = {"kind": envelope.kind, "lang": "py"}
    for key, value in [*envelope.headers.items(), *(extra or {}).items()]:
        if value is not None:
            props[key] = value
    if extra:
        props[SIG_NODE] = node
    msg.properties = props  # type: ignore[assignment]
    return msg.encode()
