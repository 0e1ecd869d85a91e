"""The envelope: one message as actorctl sees it, and its JSON body.

Its AMQP 1.0 codec is ``_encoding`` (an envelope to message bytes, signed) and
``_decoding`` (message bytes to an envelope); the wire layout is normative in
docs/protocol.md and those modules are its reference implementation. Metadata
lives in the properties and application-properties sections so that a router can
route and a monitor can inspect without decoding the body. The body is JSON in a
data section: ``[args, kwargs]`` for commands and events, the result (or error)
for documents; this module holds the JSON text both directions use.
"""

from __future__ import annotations

import json
import json.encoder
import json.scanner
import sys
from collections.abc import Callable, Mapping
from json.encoder import encode_basestring
from typing import Any, Final, cast, final

import attrs

from .._errors import WireFormatError
from ._roles import Role

__all__ = [
    "CONTENT_TYPE_JSON",
    "KIND_COMMAND",
    "KIND_DOCUMENT",
    "KIND_EVENT",
    "STATUS_ERROR",
    "STATUS_OK",
    "Envelope",
    "json_dumps",
]

CONTENT_TYPE_JSON: Final = "application/json"
KIND_COMMAND: Final = "command"
KIND_EVENT: Final = "event"
KIND_DOCUMENT: Final = "document"
KINDS: Final = frozenset({KIND_COMMAND, KIND_EVENT, KIND_DOCUMENT})
STATUS_OK: Final = "ok"
STATUS_ERROR: Final = "error"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (RFC 8259 has no non-finite numbers)")


_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_decoder = json.JSONDecoder(parse_constant=_no_constant)
#: The JSON text of a value, a circular one refused with a ValueError that says so.
_dumps_checked = _encoder.encode
_decode_fully = _decoder.decode
# The C encoder and scanner that those two call on each message, made once
# (per message: one C call, without the wrappers' own Python calls and set-up).
# The encoder keeps no record of the containers it is in, so that it can be
# shared: a circular value recurses until a RecursionError, which _dumps
# hands to the checked encoder to be named.
_c_make_encoder: Callable[..., Any] | None = getattr(json.encoder, "c_make_encoder", None)
_c_encode = (
    None
    if _c_make_encoder is None
    else _c_make_encoder(
        None, _encoder.default, encode_basestring, None, ":", ",", False, False, False
    )
)
_scan = json.scanner.make_scanner(cast(Any, _decoder))
# Above this recursion limit a circular value could overflow the C stack
# before Python's limit stops the shared encoder (a crash, not an error): a
# process that raised its limit this far has its bodies checked as they go.
_SHARED_ENCODER_DEPTH: Final = 10_000
_recursion_limit = sys.getrecursionlimit


def _dumps(value: object) -> str:
    """The JSON text of ``value``, as ``_dumps_checked`` writes it.

    Raises:
        TypeError: a value JSON has no type for.
        ValueError: a non-finite number, or a circular value.
    """
    if _c_encode is None or _recursion_limit() > _SHARED_ENCODER_DEPTH:
        return _dumps_checked(value)
    try:
        return "".join(_c_encode(value, 0))
    except RecursionError:
        return _dumps_checked(value)  # circular, or deeper than it can go: it says which


def _loads(text: str) -> Any:
    """The JSON value of ``text``, as ``_decode_fully`` reads it: by the scanner
    alone when the value fills the text (every body actorctl writes), else by
    the full decoder (whitespace around it, data after it, and what is wrong).

    Raises:
        ValueError: it is not one JSON value.
    """
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        return _decode_fully(text)  # raises, saying what is wrong
    if end != len(text):
        return _decode_fully(text)
    return value


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
        return _dumps_checked(value).encode()
    except (TypeError, ValueError) as exc:
        raise WireFormatError(f"value cannot be sent as JSON: {exc}{_instead(exc)}") from None


def _instead(exc: Exception) -> str:
    said = str(exc)
    if not said.startswith("Object of type "):
        return ""
    kind = said.removeprefix("Object of type ").partition(" ")[0]
    fix = _INSTEAD.get(kind, "a dict, list, str, int, float, bool or None made from it")
    return f" (send only JSON: dict, list, str, int, float, bool, None; for a {kind}, send {fix})"


@final  # never subclassed: the hot paths tell it from bytes by its exact type
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
        # A decoded body's exact types first (no call but ``len``), then any list and dict.
        if (
            type(body) is list
            and len(body) == 2
            and type(body[0]) is list
            and type(body[1]) is dict
        ):
            return body[0], body[1]
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


# Each field's slot, set straight: what ``Envelope.__init__`` does through a
# bound ``object.__setattr__`` per field (a frozen class's), at half its cost.
_slot: Final[dict[str, Callable[[Envelope, object], None]]] = {
    field.name: Envelope.__dict__[field.name].__set__ for field in attrs.fields(Envelope)
}
_FIELDS: Final = (
    "message_id", "to", "subject", "body", "kind", "reply_to", "correlation_id",
    "creation_time", "expiry_time", "headers", "sender", "role",
)  # fmt: skip
if tuple(_slot) != _FIELDS:  # pragma: no cover (a field added: _made sets it too)
    raise AssertionError(f"Envelope's fields are {tuple(_slot)}, _made sets {_FIELDS}")
_new = object.__new__
(
    _set_message_id, _set_to, _set_subject, _set_body, _set_kind, _set_reply_to,
    _set_correlation_id, _set_creation_time, _set_expiry_time, _set_headers, _set_sender,
    _set_role,
) = _slot.values()  # fmt: skip


def _made(
    message_id: str,
    to: str,
    subject: str,
    body: Any,
    kind: str,
    reply_to: str | None,
    correlation_id: str | None,
    creation_time: float | None,
    expiry_time: float | None,
    headers: Mapping[str, Any],
    sender: str,
    role: Role | None,
) -> Envelope:
    """``Envelope(...)`` of every field, each given, made by its slots (the
    decoder's, per message): the same record, no validator or converter
    skipped (it has none)."""
    envelope: Envelope = _new(Envelope)
    _set_message_id(envelope, message_id)
    _set_to(envelope, to)
    _set_subject(envelope, subject)
    _set_body(envelope, body)
    _set_kind(envelope, kind)
    _set_reply_to(envelope, reply_to)
    _set_correlation_id(envelope, correlation_id)
    _set_creation_time(envelope, creation_time)
    _set_expiry_time(envelope, expiry_time)
    _set_headers(envelope, headers)
    _set_sender(envelope, sender)
    _set_role(envelope, role)
    return envelope


def _preview(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
