"""How an actor answers: the reply it sends its caller (a document to the
caller's reply address), and the settlement of a message it refuses."""

from __future__ import annotations

from typing import Any, Final

from .._errors import WireFormatError
from .._log import log
from ..mailbox import (
    ACCEPTED,
    KIND_COMMAND,
    KIND_DOCUMENT,
    NOT_PERMITTED,
    STATUS_ERROR,
    Envelope,
    Inbound,
    Outcome,
    json_dumps,
)
from ._access import NotPermitted
from ._dedup import Handled
from ._ref import Outbox

__all__ = ["REPLIER", "handler_failed", "refuse", "send_reply", "settle_refused"]

#: The application property of a reply that names the actor that answered (the
#: one the ask went to). The reply's signature covers it, and a caller that knows
#: which actor it asked takes no reply that names another (docs/protocol.md §8.1).
REPLIER: Final = "replier"


def send_reply(outbox: Outbox, actor: str, request: Envelope, status: str, body: Any) -> int:
    """Answer ``request`` (a command that wants a reply) with a reply document
    through ``outbox``; a result that cannot be encoded is answered as an error.

    Returns:
        the size in bytes of the reply as encoded: what keeping it for a
        duplicate costs (the dedup window charges it). A copy of a tell may
        come back as an ask that wants the result, so a tell's result is kept
        too: ``None`` costs nothing, a text its length, anything else is
        encoded once here to be measured.
    """
    if request.reply_to is None or request.kind != KIND_COMMAND:
        # Events fan out: nobody waits for their results.
        if body is None:
            return 0
        return len(body) + 2 if type(body) is str else _encoded_size(body)
    reply = Envelope(
        message_id=outbox.new_message_id(),
        to=request.reply_to,
        subject=request.subject,
        body=body,
        kind=KIND_DOCUMENT,
        correlation_id=request.correlation_id or request.message_id,
        creation_time=outbox.now(),
        headers={"status": status, REPLIER: actor},
    )
    try:
        size = outbox.reply(reply)
    except WireFormatError as exc:
        log(
            "actorctl:handler:bad-result",
            actor=actor,
            handler=request.subject,
            message_id=request.message_id,
            error=str(exc),
        )
        error = {"type": "WireFormatError", "message": f"result of {request.subject!r}: {exc}"}
        outbox.reply(
            Envelope(
                message_id=reply.message_id,
                to=reply.to,
                subject=reply.subject,
                body=error,
                kind=KIND_DOCUMENT,
                correlation_id=reply.correlation_id,
                creation_time=reply.creation_time,
                headers={"status": STATUS_ERROR, REPLIER: actor},
            )
        )
        # A duplicate is answered so again: the window charges this error's size.
        return len(json_dumps(error))
    # Not sent (no route to its caller now): a copy sent after it reconnects
    # gets it from the dedup window, so its size is measured here (rare).
    return size or _encoded_size(body)


def _encoded_size(body: Any) -> int:
    try:
        return len(json_dumps(body))
    except WireFormatError:
        return 0


def refuse(condition: str, description: str) -> Handled:
    """How a message the actor cannot take is answered: rejected, with why."""
    return Handled(Outcome.rejected(condition, description), None)


def settle_refused(actor: str, inbound: Inbound, outcome: Outcome) -> None:
    """Settle ``inbound`` with an outcome other than accepted, and log it."""
    envelope = inbound.envelope
    log(
        f"actorctl:delivery:{outcome.state}",
        actor=actor,
        handler=envelope.subject,
        message_id=envelope.message_id,
        condition=outcome.condition,
        description=outcome.description,
    )
    inbound.settle(outcome)


def handler_failed(actor: str, request: Envelope, exc: Exception) -> Handled:
    """A handler raised: logged, the message accepted (it was handled), and its
    caller answered with the error's type and message. A handler that raised
    :class:`NotPermitted` refused its caller: the message is rejected."""
    if isinstance(exc, NotPermitted):
        return refuse(NOT_PERMITTED, str(exc))
    log(
        "actorctl:handler:failed",
        actor=actor,
        handler=request.subject,
        message_id=request.message_id,
        error_type=type(exc).__name__,
        error=str(exc),
    )
    return Handled(ACCEPTED, (STATUS_ERROR, {"type": type(exc).__name__, "message": str(exc)}))
