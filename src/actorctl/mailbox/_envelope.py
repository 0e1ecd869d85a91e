"""The envelope: one message as actorctl sees it, and its AMQP 1.0 codec.

The wire layout is normative in docs/protocol.md; this module is its reference
implementation. Metadata lives in the properties and application-properties
sections so that a router can route and a monitor can inspect without decoding
the body. The body is JSON in a data section: ``[args, kwargs]`` for commands and
events, the result (or error) for documents.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs
from proton import Message

from .._errors import WireFormatError
from ._amqp import Sections, read_message
from ._auth import SIG, SIG_ALG, SIG_KEY, SIG_NODE, canonical_bytes
from ._roles import Role

__all__ = [
    "CONTENT_TYPE_JSON",
    "KIND_COMMAND",
    "KIND_DOCUMENT",
    "KIND_EVENT",
    "STATUS_ERROR",
    "STATUS_OK",
    "Envelope",
    "decode",
    "encode",
    "json_dumps",
    "to_ms",
]

CONTENT_TYPE_JSON: Final = "application/json"
KIND_COMMAND: Final = "command"
KIND_EVENT: Final = "event"
KIND_DOCUMENT: Final = "document"
KINDS: Final = frozenset({KIND_COMMAND, KIND_EVENT, KIND_DOCUMENT})
STATUS_OK: Final = "ok"
STATUS_ERROR: Final = "error"

# Content types a node refuses outright: bodies only one language can read.
SIGNATURE_PROPERTIES: Final = (SIG_ALG, SIG_KEY, SIG, SIG_NODE)
_FORBIDDEN_CONTENT = ("application/x-python-serialize", "application/python-pickle")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (RFC 8259 has no non-finite numbers)")


_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
_loads = json.JSONDecoder(parse_constant=_no_constant).decode


#: What to send instead of a value JSON has no type for, by its type's name.
_INSTEAD: Final = {
    "datetime": "its .isoformat() text",
    "date": "its .isoformat() text",
    "time": "its .isoformat() text",
    "timedelta": "its .total_seconds()",
    "set": "a sorted list",
    "frozenset": "a sorted list",
    "bytes": "text (base64 for binary data)",
    "bytearray": "text (base64 for binary data)",
    "Decimal": "its str() text",
    "UUID": "its str() text",
    "Path": "its str() text",
}


def json_dumps(value: object) -> bytes:
    """Encode a JSON value the way every actorctl body is encoded.

    Raises:
        WireFormatError: naming the value that is not JSON and what to send
            instead (a datetime as its ISO text, a set as a list, ...).
    """
    try:
        return _dumps(value).encode()
    except (TypeError, ValueError) as exc:
        raise WireFormatError(f"value cannot be sent as JSON: {exc}{_instead(exc)}") from None


def _instead(exc: Exception) -> str:
    said = str(exc)
    if not said.startswith("Object of type "):
        return ""
    kind = said.removeprefix("Object of type ").partition(" ")[0]
    fix = _INSTEAD.get(kind, "a dict, list, str, int, float, bool or None made from it")
    return f" (send only JSON: dict, list, str, int, float, bool, None; for a {kind}, send {fix})"


@attrs.frozen(slots=True)
class Envelope:
    """One message: its routing metadata and its decoded JSON body.

    Attributes:
        message_id: unique per message; the key for de-duplication and logs.
        to: the target address (``amqp://host:port/actor`` or ``/actor``).
        subject: the handler name (for documents, the handler that answered).
        kind: ``command``, ``event`` or ``document``.
        body: the decoded JSON body: ``[args, kwargs]`` for commands and events.
        reply_to: where the result of a command goes, if anywhere.
        correlation_id: the id that ties a reply to its request.
        creation_time: seconds since the epoch when the sender made it.
        expiry_time: seconds since the epoch after which it must not be executed.
        headers: the other application properties (``retries``, ``chain``, ...).
        sender: who the receiving node took it to come from, for duplicate
            detection: the key id that authenticated it, or the origin a cluster
            member asserted for it (docs/protocol.md §5.1); empty when it was not
            authenticated, or was made here. Never on the wire, never compared.
        role: the role (``_roles.Role``) the receiving node gives the identity
            that authenticated it (the lesser of a forwarder's and its origin's);
            None when nothing is checked: made here, sent by the node's own key,
            or received by a node without a keyring. Never on the wire.
    """

    message_id: str
    to: str
    subject: str
    body: Any
    kind: str = KIND_COMMAND
    reply_to: str | None = None
    correlation_id: str | None = None
    creation_time: float | None = None
    expiry_time: float | None = None
    headers: Mapping[str, Any] = attrs.field(factory=dict)
    sender: str = attrs.field(default="", eq=False, repr=False)
    role: Role | None = attrs.field(default=None, eq=False, repr=False)

    def call(self) -> tuple[list[Any], dict[str, Any]]:
        """The ``(args, kwargs)`` of a command or event body.

        Raises:
            WireFormatError: the body is not ``[list, object]``.
        """
        body = self.body
        if (
            isinstance(body, list)
            and len(body) == 2
            and isinstance(body[0], list)
            and isinstance(body[1], dict)
        ):
            return body[0], body[1]
        raise WireFormatError(
            f"body of message {self.message_id} must be the JSON array [args, kwargs] "
            f"(an array and an object), got {_preview(body)}"
        )


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
    try:
        try:
            body = _dumps(envelope.body).encode()
        except (TypeError, ValueError):
            body = json_dumps(envelope.body)  # raises, saying what is not JSON
        extra = None
        if signer is not None:
            extra = signer(canonical(envelope, actor, body, node))
        return _encode(envelope, body, extra, node)
    except UnicodeEncodeError as exc:
        raise WireFormatError(
            f"message {envelope.message_id!r}: text that is not valid UTF-8 ({exc.reason})"
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
    envelope: Envelope, body: bytes, extra: Mapping[str, object] | None, node: str
) -> bytes:
    app = _app_properties(envelope, extra, node)
    if app is None:
        return _encode_with_proton(envelope, body, extra, node)
    names = _names  # the recurring strings, encoded once (_name), looked up inline
    to, reply_to, correlation_id = envelope.to, envelope.reply_to, envelope.correlation_id
    expiry, creation = envelope.expiry_time, envelope.creation_time
    fields = [
        _string(envelope.message_id),
        _NULL,  # user-id
        (names.get(to) or _name(to)) if to else _NULL,
        names.get(envelope.subject) or _name(envelope.subject),
        (names.get(reply_to) or _name(reply_to)) if reply_to else _NULL,
        _string(correlation_id) if correlation_id else _NULL,
        _JSON_SYMBOL,
        _NULL,  # content-encoding
        _timestamp(expiry) if expiry else _NULL,
        _timestamp(creation) if creation else _NULL,
    ]
    while fields[-1] is _NULL:
        fields.pop()
    props = b"".join(fields)
    return b"".join(
        (
            _PROPERTIES,
            _pack_list32(len(props) + 4, len(fields)),
            props,
            _APP_PROPERTIES,
            _pack_list32(len(app[0]) + 4, app[1]),
            app[0],
            _DATA,
            _pack_size32(len(body)),
            body,
        )
    )


# Section descriptors (0x00, smallulong code) and the 32-bit compound constructors.
_PROPERTIES = b"\x00\x53\x73\xd0"
_APP_PROPERTIES = b"\x00\x53\x74\xd1"
_DATA = b"\x00\x53\x75\xb0"
_NULL = b"\x40"
_TRUE = b"\x41"
_FALSE = b"\x42"
_pack_list32 = struct.Struct(">II").pack
_pack_size32 = struct.Struct(">I").pack
_pack_long = struct.Struct(">q").pack
_pack_double = struct.Struct(">d").pack


def _string(text: str) -> bytes:
    raw = text.encode()
    if len(raw) < 256:
        return b"\xa1" + bytes((len(raw),)) + raw
    return b"\xb1" + _pack_size32(len(raw)) + raw


def _timestamp(seconds: float) -> bytes:
    return b"\x83" + _pack_long(round(seconds * 1000))  # as _ms: the signature covers it


_JSON_SYMBOL = b"\xa3" + bytes((len(CONTENT_TYPE_JSON),)) + CONTENT_TYPE_JSON.encode()


def _app_properties(
    envelope: Envelope, extra: Mapping[str, object] | None, node: str
) -> tuple[bytes, int] | None:
    """The application-properties map, or None if a value is not a simple type.
    A signed message (``extra``) names the node it was signed for (``sig_node``).

    Per message: the usual values (text, integers) are told by their exact type
    first, and the recurring strings (keys, states, key ids) come from ``_names``
    without a call."""
    parts = [_KIND_LANG.get(envelope.kind) or _string("kind") + _string(envelope.kind) + _LANG]
    append = parts.append
    names = _names
    count = 4
    for items in (envelope.headers, extra):
        if not items:
            continue
        for key, value in items.items():
            if type(value) is str:
                encoded = (names.get(value) or _name(value)) if len(value) <= 40 else _string(value)
            elif type(value) is int and -(2**63) <= value < 2**63:
                encoded = b"\x81" + _pack_long(value)
            elif type(value) is bytes and len(value) < 256:  # a signature
                encoded = b"\xa0" + _LENGTHS[len(value)] + value
            elif value is None:
                continue
            else:
                found = _value(value)
                if found is None:
                    return None
                encoded = found
            append(names.get(key) or _name(key))
            append(encoded)
            count += 2
    if extra:
        append(_SIG_NODE)
        append(names.get(node) or _name(node))
        count += 2
    return b"".join(parts), count


def _value(value: object) -> bytes | None:
    """An application property value that ``_app_properties`` does not write
    itself (a boolean, a double, a long binary, a subclass of ``str`` or
    ``int``), or None if it is not a simple AMQP type."""
    if isinstance(value, bytes):
        return _binary(value)
    if value is True or value is False:
        return _TRUE if value else _FALSE
    if isinstance(value, str):
        return _name(value) if len(value) <= 40 else _string(value)
    if isinstance(value, int) and -(2**63) <= value < 2**63:
        return b"\x81" + _pack_long(value)
    if isinstance(value, float):
        return b"\x82" + _pack_double(value)
    return None


_names: dict[str, bytes] = {}


def _name(text: str) -> bytes:
    """``_string`` for the few strings that recur (header names, kinds, session
    ids): encoded once. The cache is bounded; past it, strings are encoded anew."""
    encoded = _names.get(text)
    if encoded is None:
        encoded = _string(text)
        if len(_names) < 4096:
            _names[text] = encoded
    return encoded


_LANG = _string("lang") + _string("py")
_SIG_NODE = _string(SIG_NODE)
_KIND_LANG = {kind: _string("kind") + _string(kind) + _LANG for kind in KINDS}


#: One byte's worth of lengths, each as its byte (a vbin8's or a str8's size).
_LENGTHS: Final = [bytes((size,)) for size in range(256)]


def _binary(raw: bytes) -> bytes:
    if len(raw) < 256:
        return b"\xa0" + bytes((len(raw),)) + raw
    return b"\xb0" + _pack_size32(len(raw)) + raw


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
    if len(properties) < 10:
        properties = properties + [None] * (10 - len(properties))
    message_id = properties[0]
    if message_id is None:
        raise WireFormatError("message has no message-id property")
    if type(message_id) is not str:
        message_id = _id(message_id, "message-id")
    body = _json_body(message_id, properties[6], raw)
    correlation_id = properties[5]
    if correlation_id is not None and type(correlation_id) is not str:
        correlation_id = _id(correlation_id, "correlation-id", message_id)
    expiry, creation = properties[8], properties[9]
    return _envelope(
        message_id,
        properties[2],
        properties[3],
        body,
        properties[4],
        correlation_id,
        creation / 1000 if creation else None,
        expiry / 1000 if expiry else None,
        dict(app),
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
    kind = str(props.pop("kind", KIND_COMMAND))
    if kind not in KINDS:
        raise WireFormatError(
            f"message {message_id}: application property kind={kind!r} is not one of "
            "command, event, document"
        )
    props.pop("lang", None)
    for key in SIGNATURE_PROPERTIES:
        props.pop(key, None)
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


def _json_body(message_id: str, content_type: str | None, raw: bytes) -> Any:
    content_type = (content_type or "").lower()
    if content_type.startswith(_FORBIDDEN_CONTENT):
        raise WireFormatError(
            f"message {message_id}: content-type {content_type!r} is refused: "
            "bodies must be JSON so that any language can read them"
        )
    try:
        return _loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise WireFormatError(
            f"message {message_id}: body is not valid UTF-8 JSON: {exc}"
        ) from None


def _preview(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
