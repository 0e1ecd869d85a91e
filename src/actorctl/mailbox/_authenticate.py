"""Authenticating one received message before anything reads its body: its
properties checked for the types a signature covers, its canonical bytes
built for the actor and node it was sent to (docs/protocol.md §11.2), and its
signature or session HMAC verified (``_signing.py``).

What refuses it says which message and which key it claims: an
:class:`~actorctl.mailbox.AuthError` carries both, an
:class:`UnsignableMessage` the message id, for the receiver's log line.
"""

from __future__ import annotations

from typing import Any, final

from .._errors import WireFormatError
from ._amqp import Sections, read_message
from ._auth import SIG_KEY, AuthError, canonical_bytes, canonical_encoded
from ._session_read import SessionTail, read_in_session, session_tail
from ._signing import Verified, Verifier

__all__ = ["UnsignableMessage", "authenticate", "canonical_of"]


@final
class UnsignableMessage(WireFormatError):
    """A message whose properties are not of the types a signature covers.

    Attributes:
        message_id: its id.
    """

    def __init__(self, description: str, message_id: str) -> None:
        super().__init__(description)
        self.message_id = message_id


def authenticate(
    verifier: Verifier, actor: str, data: bytes, node: str
) -> tuple[Sections, Verified]:
    """Check a message's signature over its canonical bytes, for ``actor`` on ``node``.

    A message signed within a session in the layout actorctl writes has its
    signature read where the sender put it (``_session_read.read_in_session``), not
    decoded into its application properties only to be taken out again; any
    other is read whole (``_amqp.read_message``). Both are checked alike.

    Raises:
        AuthError: why it is refused (docs/protocol.md §11), with the message's
            id and the key it claims.
        WireFormatError: it is not in the layout that can be signed
            (:class:`UnsignableMessage` once its id is known).
    """
    # Per message: the node's own sig_node pair, looked up without a call.
    tail = _tails[node] if node in _tails else _tail(node)
    found = None
    if tail is not None and (verifier.node is None or verifier.node == node):
        found = read_in_session(data, tail)
    session_id: str | None = None
    sig: bytes | None = None
    if found is not None:
        sections, session_id, sig = found
    else:
        read = read_message(data)
        if read is None:
            raise WireFormatError(
                "a signed message must be one properties, one application-properties and "
                "one data section of the types docs/protocol.md lists"
            )
        sections = read
        if len(sections[0]) < 10:  # the trailing nulls left out: given back with them
            sections = (sections[0] + [None] * (10 - len(sections[0])), sections[1], sections[2])
    properties, app, body = sections
    message_id = properties[0]
    if type(message_id) is not str:
        if message_id is None:
            raise WireFormatError("message has no message-id property")
        message_id = str(message_id)
    subject, reply_to, correlation_id = properties[3], properties[4], properties[5]
    expiry, creation = properties[8], properties[9]
    # The usual types in one expression (per message); what is wrong, if not.
    if not (
        (type(creation) is int or creation is None)
        and (type(expiry) is int or expiry is None)
        and (type(subject) is str or subject is None)
        and (type(reply_to) is str or reply_to is None)
    ):
        problem = _malformed(properties, message_id)
        if problem is not None:
            raise UnsignableMessage(problem, message_id)
    kind = app["kind"] if "kind" in app else None  # noqa: SIM401 (in and []: no call)
    try:
        # canonical_of, inline (per message), its ids encoded here: canonical_bytes'
        # own work without its call, and a text as it is (str() only of another type)
        canonical = canonical_encoded(
            node=node,
            to=actor,
            subject="" if subject is None else subject,  # a str, if not None (checked above)
            message_id=message_id.encode(),
            correlation_id=None
            if correlation_id is None
            else (correlation_id if type(correlation_id) is str else str(correlation_id)).encode(),
            reply_to=reply_to,  # a str or None (checked above)
            creation_ms=creation,
            expiry_ms=expiry,
            kind=kind if type(kind) is str and kind else str(kind or "command"),
            headers=app,
            body=body,
        )
        if session_id is None or sig is None:
            verified = verifier.verify(app, canonical, message_id=message_id, creation_ms=creation)
        else:
            verified = verifier.verify_in_session(session_id, sig, canonical, message_id, creation)
    except AuthError as exc:
        key = session_id if session_id is not None else app.get(SIG_KEY)
        exc.about(message_id, None if key is None else str(key))
        raise
    except UnicodeEncodeError as exc:  # an id canonical_bytes would refuse, as it words it
        raise WireFormatError(
            f"message {message_id!r}: text that is not valid UTF-8 ({exc.reason})"
        ) from None
    return sections, verified


#: The ``sig_node`` pair of a message signed within a session, by node
#: (``_session_read.session_tail``): one node's, as a rule. Bounded, never emptied.
_tails: dict[str, SessionTail | None] = {}


def _tail(node: str) -> SessionTail | None:
    tail = session_tail(node)
    if len(_tails) < 64:
        _tails[node] = tail
    return tail


def _malformed(properties: list[Any], message_id: str) -> str | None:
    """What is wrong with the types of the properties a signature covers."""
    for index, field in ((8, "absolute-expiry-time"), (9, "creation-time")):
        # Only an AMQP timestamp (an integer of ms) is covered as written: a
        # double or a string here could change what the replay check sees.
        if properties[index] is not None and type(properties[index]) is not int:
            return f"message {message_id}: {field} must be a timestamp"
    for index, field in ((3, "subject"), (4, "reply-to")):
        if properties[index] is not None and not isinstance(properties[index], str):
            return f"message {message_id}: {field} must be a string"
    return None


def canonical_of(
    actor: str, properties: list[Any], app: dict[Any, Any], body: bytes, node: str
) -> bytes:
    """The canonical bytes of a received message (its properties indexed as
    AMQP numbers them), sent to ``actor`` on ``node``."""
    subject, reply_to, correlation_id = properties[3], properties[4], properties[5]
    return canonical_bytes(
        node=node,
        to=actor,
        subject="" if subject is None else str(subject),
        message_id=str(properties[0]),
        correlation_id=None if correlation_id is None else str(correlation_id),
        reply_to=None if reply_to is None else str(reply_to),
        creation_ms=properties[9],
        expiry_ms=properties[8],
        kind=str(app.get("kind") or "command"),
        headers=app,
        body=body,
    )
