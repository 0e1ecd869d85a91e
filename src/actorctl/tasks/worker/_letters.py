"""Handing a task command over to its node's dead letters.

A worker (out of retries, poison, expired before it ran) and the scheduler
(expired before it was due) give up on a task command by sending it, as the
command ``add``, to the ``_deadletters`` actor of their own node
(``cluster/_deadletters.py``), through the node's backlog: it is stored before
the task command is settled. The letter is re-driven to the task's pool, with
a fresh retry budget.
"""

from __future__ import annotations

import base64

from ..._errors import ConfigError
from ...actors import Address
from ...mailbox import Envelope, encode
from ..client._client import TaskClient
from ..protocol._protocol import H_ETA, H_LAST_ERROR, H_RETRIES
from ..protocol._task_errors import TaskError

__all__ = ["dead_letter"]

# Headers a re-driven dead letter goes without: it starts a fresh retry budget
# (and it goes to its pool, not to the scheduler).
_REDRIVE_RESET = (H_RETRIES, H_LAST_ERROR, H_ETA)


async def dead_letter(
    client: TaskClient,
    dead_letters: Address,
    envelope: Envelope,
    pool: str,
    reason: str,
    error: TaskError,
    retries: int,
) -> None:
    """Send ``envelope`` (a task command for ``pool``) to ``dead_letters``
    (the ``_deadletters`` actor of the sender's node), durably."""
    try:
        target = str(client.directory.resolve(pool))
    except ConfigError:  # a pool reached directly: its worker
        target = envelope.to
    letter = {
        "reason": reason,
        "target": target,
        "message": base64.b64encode(bytes(encode(envelope))).decode(),
        "error": error.wire(),
        "retries": retries,
        "reset": list(_REDRIVE_RESET),
        "sender": envelope.sender,
    }
    outbox = client.outbox
    command = Envelope(
        message_id=outbox.new_message_id(),
        to=str(dead_letters),
        subject="add",
        body=[[], letter],
        creation_time=outbox.now(),
    )
    await outbox.send(dead_letters, command, presettled=False, confirm=False, durable=True)
