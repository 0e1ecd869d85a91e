"""One call by name, to an actor's handler or to a task (``actorctl call``).

A handler answers with one reply document (docs/protocol.md §8); a task with
result documents (§14.4), of which only the final one is its answer: STARTED
and RETRY are news, and FAILURE or REVOKED are its error. A task's documents
may come from the node the call went to on behalf of the worker that ran it
(a pool's router's node relays them, ``_relay.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import trio

from ..._errors import AskTimeout, RemoteError
from ...actors import Address, Outbox, to_wire
from ...mailbox import KIND_COMMAND, STATUS_ERROR, Envelope
from ..protocol._protocol import FAILURE, H_STATE, RETRY, REVOKED, STARTED

__all__ = ["call"]

_NEWS = frozenset({STARTED, RETRY})


async def call(
    outbox: Outbox,
    target: Address,
    name: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    timeout: float,
) -> Any:
    """Call handler or task ``name`` at ``target``; its result.

    Raises:
        RemoteError: the handler raised, or the task failed or was revoked
            (its error's type and message).
        AskTimeout: no answer within ``timeout`` seconds.
        DeliveryError: the message was refused (unknown handler, bad arguments).
    """
    now = outbox.now()
    message_id = outbox.new_message_id()
    envelope = Envelope(
        message_id=message_id,
        to=str(target),
        subject=name,
        body=[to_wire(list(args)), to_wire(dict(kwargs))],
        kind=KIND_COMMAND,
        creation_time=now,
        reply_to=outbox.reply_address(target),
        correlation_id=message_id,
        expiry_time=now + timeout,
    )
    answers: list[Envelope] = []
    answered = trio.Event()

    def take(reply: Envelope) -> None:
        if reply.headers.get(H_STATE) in _NEWS:
            return
        answers.append(reply)
        answered.set()

    outbox.expect(message_id, take, peer=f"{target.host}:{target.port}")
    try:
        with trio.move_on_after(timeout):
            await outbox.send(target, envelope, presettled=False, confirm=True)
            await answered.wait()
    finally:
        outbox.unexpect(message_id)
    if not answers:
        raise AskTimeout(f"no answer from {target} to {name!r} within {timeout:g} s")
    reply = answers[0]
    state = reply.headers.get(H_STATE)
    failed = reply.headers.get("status") == STATUS_ERROR or state in (FAILURE, REVOKED)
    if not failed:
        return reply.body
    body = reply.body if isinstance(reply.body, dict) else {"message": str(reply.body)}
    if state == REVOKED:
        raise RemoteError("TaskRevoked", str(body.get("reason", "revoked")))
    raise RemoteError(str(body.get("type", "Error")), str(body.get("message", "")))
