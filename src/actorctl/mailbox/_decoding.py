"""The AMQP 1.0 decoding of a message into an envelope (docs/protocol.md,
normative): the fixed layout as ``_amqp.read_message`` parses it, anything else
through proton's general decoder; a bad message gets a ``WireFormatError`` that
names what is wrong.
"""

from __future__ import annotations

from typing import Any, Final

from proton import Message

from .._errors import WireFormatError
from ._amqp import Sections, read_message
from ._auth import SIG, SIG_ALG, SIG_KEY, SIG_NODE
from ._envelope import (
    CONTENT_TYPE_JSON,
    KIND_COMMAND,
    KIND_DOCUMENT,
    KINDS,
    Envelope,
    _loads,
    _made,
)
from ._roles import Role

__all__ = ["SIGNATURE_PROPERTIES", "decode", "from_sections"]

SIGNATURE_PROPERTIES: Final = (SIG_ALG, SIG_KEY, SIG, SIG_NODE)
# Content types a node refuses outright: bodies only one language can read.
_FORBIDDEN_CONTENT = ("application/x-python-serialize", "application/python-pickle")


def decode(data: bytes) -> Envelope:
    """Decode one AMQP 1.0 message into an envelope.

    Raises:
        WireFormatError: naming what is wrong (not AMQP, no message id, no subject,
            a body that is not JSON, a forbidden content type).
    """
    sections = read_message(data)
    if sections is None:
        return _decode_with_proton(data)
    return from_sections(sections)


def from_sections(sections: Sections, sender: str = "", role: Role | None = None) -> Envelope:
    """The envelope of a message ``read_message`` parsed (the body is JSON-decoded
    only now, so that a receiver can authenticate it first), from ``sender``
    acting with ``role``."""
    properties, app, raw = sections
    # Per message: the ten properties by one unpacking (a message that leaves
    # its last ones out, as nulls, is padded first), the envelope made here.
    try:
        message_id, _, to, subject, reply_to, correlation_id, content_type, _, expiry, creation = (
            properties[:10]
        )
    except ValueError:  # fewer than ten: the null ones at the end are left out
        return from_sections((properties + [None] * 10, app, raw), sender, role)
    if message_id is None:
        raise WireFormatError("message has no message-id property")
    if type(message_id) is not str:
        message_id = _id(message_id, "message-id")
    if content_type == CONTENT_TYPE_JSON:  # what every actorctl message says: _json_body, inline
        try:
            body = _loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise _not_json(message_id, exc) from None
    else:
        body = _json_body(message_id, content_type, raw)
    if correlation_id is not None and type(correlation_id) is not str:
        correlation_id = _id(correlation_id, "correlation-id", message_id)
    headers = dict(app)
    # _kind, inline for a kind given as one of the three texts (per message)
    kind = headers.get("kind")
    if type(kind) is str and kind in KINDS:
        del headers["kind"]
        for key in _DROPPED:
            headers.pop(key, None)
    else:
        kind = _kind(headers, message_id)
    if not subject and kind != KIND_DOCUMENT:
        raise WireFormatError(f"message {message_id}: no subject (the handler name)")
    return _made(  # Envelope(...), by its slots (per message)
        message_id,
        to or "",
        subject or "",
        body,
        kind,
        reply_to,
        correlation_id,
        creation / 1000 if creation else None,
        expiry / 1000 if expiry else None,
        headers,
        sender,
        role,
    )


def _decode_with_proton(data: bytes) -> Envelope:
    msg = Message()
    try:
        msg.decode(data)
    except Exception as exc:  # proton raises several unrelated types here
        raise WireFormatError(f"not an AMQP 1.0 message: {exc}") from None
    message_id = msg.id
    if message_id is None:
        raise WireFormatError("message has no message-id property")
    message_id = _id(message_id, "message-id")
    body = msg.body
    if isinstance(body, memoryview | bytes | str):
        raw = body.encode() if isinstance(body, str) else bytes(body)
        value = _json_body(message_id, msg.content_type, raw)
    elif isinstance(body, list | dict | int | float | bool) or body is None:
        # An amqp-value section holding native AMQP values: the same data.
        value = body
    else:
        raise WireFormatError(
            f"message {message_id}: body of type {type(body).__name__} is not JSON or a list"
        )
    return _envelope(
        message_id,
        msg.address,
        msg.subject,
        value,
        msg.reply_to,
        None
        if msg.correlation_id is None
        else _id(msg.correlation_id, "correlation-id", message_id),
        msg.creation_time or None,
        msg.expiry_time or None,
        dict(msg.properties or {}),
    )


def _id(value: object, field: str, message_id: str | None = None) -> str:
    """Ids travel as strings; ulong and uuid ids are read as their text."""
    if isinstance(value, bytes | memoryview | bytearray):
        where = f"message {message_id}: " if message_id else ""
        raise WireFormatError(
            f"{where}{field} is binary: ids must be strings (or ulong or uuid), "
            "see docs/protocol.md"
        )
    return str(value)


def _envelope(
    message_id: str,
    to: str | None,
    subject: str | None,
    body: Any,
    reply_to: str | None,
    correlation_id: str | None,
    creation_time: float | None,
    expiry_time: float | None,
    props: dict[Any, Any],
    sender: str = "",
    role: Role | None = None,
) -> Envelope:
    kind = _kind(props, message_id)
    if not subject and kind != KIND_DOCUMENT:
        raise WireFormatError(f"message {message_id}: no subject (the handler name)")
    return Envelope(
        message_id=message_id,
        to=to or "",
        subject=subject or "",
        body=body,
        kind=kind,
        reply_to=reply_to,
        correlation_id=correlation_id,
        creation_time=creation_time,
        expiry_time=expiry_time,
        headers=props,
        sender=sender,
        role=role,
    )


def _kind(props: dict[Any, Any], message_id: str) -> str:
    """The ``kind`` application property (``command`` if none), taken out of
    ``props`` with ``lang`` and the signature properties: ``del`` after ``in``,
    no call per property (per message).

    Raises:
        WireFormatError: a kind that is not one of command, event, document.
    """
    kind = KIND_COMMAND
    if "kind" in props:
        kind = props["kind"]
        del props["kind"]
        if type(kind) is not str:
            kind = str(kind)
    if kind not in KINDS:
        raise WireFormatError(
            f"message {message_id}: application property kind={kind!r} is not one of "
            "command, event, document"
        )
    for key in _DROPPED:
        if key in props:  # in and del, no call: pop(key, None) would be one per key
            del props[key]  # noqa: RUF051
    return kind


#: The application properties an envelope's headers leave out, besides kind.
_DROPPED: Final = ("lang", *SIGNATURE_PROPERTIES)


def _json_body(message_id: str, content_type: str | None, raw: bytes) -> Any:
    if content_type != CONTENT_TYPE_JSON:  # what every actorctl message says: no look
        content_type = (content_type or "").lower()
        if content_type.startswith(_FORBIDDEN_CONTENT):
            raise WireFormatError(
                f"message {message_id}: content-type {content_type!r} is refused: "
                "bodies must be JSON so that any language can read them"
            )
    try:
        return _loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _not_json(message_id, exc) from None


def _not_json(message_id: str, exc: Exception) -> WireFormatError:
    """The error of a body that is not UTF-8 JSON."""
    return WireFormatError(f"message {message_id}: body is not valid UTF-8 JSON: {exc}")
