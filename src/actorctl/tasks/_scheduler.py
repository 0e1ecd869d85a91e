"""Scheduler: where delayed tasks wait, so that no worker holds them.

A task sent with ``countdown`` or ``eta`` goes to the cluster's scheduler, not
to its pool. The scheduler keeps the message (unsettled: its sender still holds
it, so it survives a scheduler that dies) until it is due, then sends it on to
its pool and settles it once the pool has taken it. A task revoked meanwhile,
or past its expiry when it falls due, is never sent on: the caller gets a
REVOKED document saying why.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, ClassVar

import attrs
import trio

from .._errors import ConfigError, DeliveryError, Rejected, WireFormatError
from .._log import log
from ..actors import Actor
from ..mailbox import ACCEPTED, STATUS_OK, Envelope, Outcome
from ._client import Directory, TaskClient
from ._documents import send_document
from ._protocol import (
    BAD_ARGUMENTS,
    FAILURE,
    H_ETA,
    H_POOL,
    H_TASK_ID,
    NO_POOL,
    REVOKED,
    REVOKED_MEMORY,
    SCHEDULER_NAME,
    UNKNOWN_HANDLER,
)

__all__ = ["Scheduler"]


class Scheduler(Actor):
    """``scheduler``: holds delayed tasks until they are due.

    Args:
        directory: where the pools are.
        capacity: the most delayed tasks it holds at once (its link credit).
    """

    name = SCHEDULER_NAME
    mailbox_capacity: ClassVar[int] = 10_000
    concurrency: ClassVar[int] = 10_000  # every held task waits in a task of its own
    # A delayed task sent again (its sender reconnected) waits for the first
    # copy and is answered as it was: it is held, and runs, once.
    dedup_count: ClassVar[int] = 10_000

    def __init__(self, directory: Directory) -> None:
        self.directory = directory
        self.waiting: dict[str, dict[str, trio.CancelScope]] = {}  # task id -> held copies
        self.revoked: OrderedDict[str, None] = OrderedDict()

    def revoke(self, ids: list[Any], terminate: bool = False) -> int:
        """Drop delayed tasks: each reports REVOKED now instead of running later
        (``terminate`` is for running tasks: none runs here)."""
        for task_id in map(str, ids):
            self.revoked[task_id] = None
            self.revoked.move_to_end(task_id)
            for scope in self.waiting.get(task_id, {}).values():
                scope.cancel(reason="revoked")
        while len(self.revoked) > REVOKED_MEMORY:
            self.revoked.popitem(last=False)
        return len(ids)

    def pending(self) -> int:
        """How many delayed tasks it holds now."""
        return sum(len(held) for held in self.waiting.values())

    async def handle_unmatched(
        self, envelope: Envelope
    ) -> tuple[Outcome, tuple[str, Any] | None] | None:
        # Its own commands are told apart from held tasks by the pool header, so
        # that a task may be called "revoke" or "pending" too.
        if H_POOL not in envelope.headers:
            return self._control(envelope)
        client = TaskClient(self._require_cell().outbox, self.directory)
        outbox = client.outbox
        headers = dict(envelope.headers)
        task_id = str(headers.get(H_TASK_ID) or envelope.correlation_id or envelope.message_id)
        pool = headers.get(H_POOL)
        if not isinstance(pool, str):
            return Outcome.rejected(
                NO_POOL, f"delayed message {envelope.message_id} names no pool"
            ), None
        eta = headers.pop(H_ETA, None)
        delay = float(eta) - outbox.now() if isinstance(eta, int | float) else 0.0
        held = self.waiting.setdefault(task_id, {})
        with trio.CancelScope() as scope:
            held[envelope.message_id] = scope
            try:
                if task_id not in self.revoked:
                    await trio.sleep(max(0.0, delay))
            finally:
                held.pop(envelope.message_id, None)
                if not held:
                    self.waiting.pop(task_id, None)
        reason = None
        if scope.cancelled_caught or task_id in self.revoked:
            reason = "revoked while it waited in the scheduler"
        elif envelope.expiry_time is not None and envelope.expiry_time <= outbox.now():
            reason = f"expired {outbox.now() - envelope.expiry_time:.3f} s before it was due"
        if reason is not None:
            log("actorctl:scheduler:revoked", task_id=task_id, reason=reason)
            if envelope.reply_to:
                await send_document(
                    client, envelope, REVOKED, {"reason": reason}, [envelope.reply_to]
                )
            return ACCEPTED, None
        try:
            target = self.directory.resolve(pool)
        except ConfigError as exc:
            if envelope.reply_to:
                error = {"type": "ConfigError", "message": str(exc)}
                await send_document(client, envelope, FAILURE, error, [envelope.reply_to])
            return Outcome.rejected(NO_POOL, str(exc)), None
        due = attrs.evolve(
            envelope,
            message_id=outbox.new_message_id(),
            to=str(target),
            creation_time=outbox.now(),
            headers=headers,
        )
        try:
            await outbox.send(target, due, presettled=False, confirm=True)
        except Rejected as exc:
            return Outcome.rejected(exc.condition, exc.description), None
        except DeliveryError as exc:
            return Outcome.modified(exc.condition, exc.description), None
        return ACCEPTED, None

    def _control(self, envelope: Envelope) -> tuple[Outcome, tuple[str, Any] | None]:
        try:
            args, kwargs = envelope.call()
            if envelope.subject == "revoke":
                value: Any = self.revoke(*args, **kwargs)
            elif envelope.subject == "pending":
                value = self.pending(*args, **kwargs)
            else:
                return Outcome.rejected(
                    UNKNOWN_HANDLER,
                    f"the scheduler takes delayed tasks (with a pool header), 'revoke' "
                    f"and 'pending'; not {envelope.subject!r}",
                ), None
        except (WireFormatError, TypeError) as exc:
            return Outcome.rejected(BAD_ARGUMENTS, f"{envelope.subject}: {exc}"), None
        return ACCEPTED, (STATUS_OK, value)
