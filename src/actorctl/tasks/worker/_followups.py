"""What follows a task's run: documents to its caller and sinks, the next step
of a chain, linked callbacks and errbacks, and retries.

Each is handed to the worker node's backlog (a durable send: kept in the
node's store until its next hop accepts it) before the worker settles the task
(acks-late), so that a chain never loses a step when a worker, its node or the
next hop dies, and the worker slot is free as soon as the follow-up is stored:
a dead or slow caller, a full router or a credit cycle (callbacks queued behind
the parents that send them) cannot stall a pool.
"""

from __future__ import annotations

import json
from typing import Any, final

import attrs

from ..._log import log
from ...actors import Address, NamedCounters, to_wire
from ...cluster import AT_MOST_ONCE
from ...mailbox import Envelope
from ..client._client import TaskClient, send_task
from ..protocol._protocol import (
    FAILURE,
    H_CHAIN,
    H_CHORD,
    H_GROUP,
    H_LAST_ERROR,
    H_LINK,
    H_LINK_ERROR,
    H_MAP,
    H_POOL,
    H_PRIORITY,
    H_RETRY_POLICY,
    H_SINKS,
    H_TASK_ID,
    H_TIMELIMIT,
    H_TRACE,
    H_TRACK,
    READY_STATES,
    RETRY,
    SUCCESS,
    compact,
    header_sinks,
    new_task_id,
    next_step,
    signature_from_wire,
    signatures_in,
)
from ..protocol._send_options import SendOptions
from ..protocol._state import RESULT_EXPIRES, store_of
from ..protocol._task_errors import TaskError
from ._documents import send_document
from ._letters import dead_letter

__all__ = ["FollowUps"]

# Headers a retry carries over as they are.
_RETRY_PASSTHROUGH = (
    H_LINK, H_LINK_ERROR, H_SINKS, H_TIMELIMIT, H_CHORD, H_GROUP, H_PRIORITY, H_RETRY_POLICY,
    H_TRACE, AT_MOST_ONCE,
)  # fmt: skip


@final
class FollowUps:
    """Sends what follows the runs of one worker's tasks.

    Args:
        client: the worker node's client (its outbox and the directory).
        pool: the worker's pool: the default of a message that names none.
        dead_letters: the worker node's ``_deadletters`` actor.
        result_expires: seconds its node keeps a final result (``app.conf``).
    """

    def __init__(
        self,
        client: TaskClient,
        pool: str,
        dead_letters: Address,
        result_expires: float = RESULT_EXPIRES,
    ) -> None:
        self.client = client
        self.pool = pool
        self.dead_letters = dead_letters
        self.result_expires = result_expires
        #: Its node's store (keeps final results): looked up once, not per task.
        self.store = store_of(client.outbox)
        #: Its worker's named counters: a dead letter is counted per task there.
        self.counters: NamedCounters | None = None

    def pool_of(self, envelope: Envelope) -> str:
        return str(envelope.headers.get(H_POOL, self.pool))

    async def report(self, envelope: Envelope, state: str, body: Any) -> None:
        """Send a state document to the caller, and final ones to the sinks."""
        targets = [envelope.reply_to] if envelope.reply_to else []
        if state in READY_STATES and H_SINKS in envelope.headers:
            targets += header_sinks(envelope.headers)
        if targets:
            await send_document(
                self.client,
                envelope,
                state,
                body,
                targets,
                expires=self.result_expires,
                relay=True,
                settle_after_commit=True,
                store=self.store,
            )

    async def succeed(self, envelope: Envelope, value: Any) -> None:
        """The task returned ``value``: run its callbacks, then send the next
        step of its chain, or (the last step) its result."""
        headers = envelope.headers
        if H_CHAIN not in headers and H_LINK not in headers:  # most runs: no callback, no step
            # report's targets, asked first: a result nobody gets is not made
            # (fire-and-forget: no reply address, no sink). A plain value (an
            # integer, text, null) is its own wire form: to_wire is not called.
            reply_to, sinks = envelope.reply_to, H_SINKS in headers
            if not reply_to and not sinks:
                return
            if type(value) is not int and type(value) is not str and value is not None:
                value = to_wire(value)
            if sinks or not reply_to:
                await self.report(envelope, SUCCESS, value)
            else:  # report, inline: to the caller alone
                await send_document(
                    self.client,
                    envelope,
                    SUCCESS,
                    value,
                    [reply_to],
                    expires=self.result_expires,
                    relay=True,
                    settle_after_commit=True,
                    store=self.store,
                )
            return
        given = headers.get(H_CHAIN)
        chain_header = given if isinstance(given, str) and given else None
        pool = self.pool_of(envelope)
        for callback in signatures_in(headers.get(H_LINK)):
            await self._send_signature(envelope, callback, pool, value, reply=False)
        if chain_header is None:
            await self.report(envelope, SUCCESS, to_wire(value))
            return
        try:
            step, chain = next_step(chain_header)
            sig = json.loads(step)
        except ValueError as exc:
            error = TaskError("WireFormatError", f"bad chain header: {exc}")
            await self.fail(envelope, str(headers.get(H_TASK_ID)), error)
            return
        await self._send_signature(envelope, sig, pool, value, reply=True, chain=chain)

    async def fail(self, envelope: Envelope, task_id: str, failed: TaskError) -> None:
        """The task failed with ``failed``: run its errbacks, then report it."""
        error = failed.wire()
        pool = self.pool_of(envelope)
        for errback in signatures_in(envelope.headers.get(H_LINK_ERROR)):
            try:
                name, sig_pool, args, kwargs, _, options = signature_from_wire(errback, pool)
            except ValueError as exc:
                log("actorctl:task:bad-signature", message_id=envelope.message_id, error=str(exc))
                continue
            await send_task(
                self.client,
                task=name,
                pool=sig_pool,
                args=[*args, task_id, error],
                kwargs=kwargs,
                task_id=new_task_id(),
                reply_to=None,
                options=SendOptions.from_wire(options, f"task {name}"),
                durable=True,
            )
        await self.report(envelope, FAILURE, error)

    async def retry(
        self,
        envelope: Envelope,
        task_id: str,
        retries: int,
        failed: TaskError,
        countdown: float,
    ) -> None:
        """Report RETRY and send the task again, ``countdown`` seconds from now."""
        error = failed.wire()
        await self.report(envelope, RETRY, {**error, "countdown": countdown})
        args, kwargs = envelope.call()
        options: dict[str, Any] = {"retries": retries + 1, "countdown": countdown}
        for header, key in ((H_CHAIN, "chain"), (H_MAP, "map"), (H_TRACK, "track_started")):
            if header in envelope.headers:
                options[key] = envelope.headers[header]
        passthrough = {k: v for k, v in envelope.headers.items() if k in _RETRY_PASSTHROUGH}
        passthrough[H_LAST_ERROR] = compact(error)
        if envelope.expiry_time is not None:
            options["expires"] = max(0.0, envelope.expiry_time - self.client.outbox.now())
        await send_task(
            self.client,
            task=envelope.subject,
            pool=self.pool_of(envelope),
            args=args,
            kwargs=kwargs,
            task_id=task_id,
            reply_to=envelope.reply_to,
            correlation_id=envelope.correlation_id,
            options=SendOptions.from_wire(options, f"task {envelope.subject}"),
            headers=passthrough,
            durable=True,
        )

    async def dead_letter(
        self, envelope: Envelope, reason: str, error: TaskError, retries: int
    ) -> None:
        """Hand the task command to this node's dead letters (``_letters.py``)."""
        if self.counters is not None:
            self.counters.add(envelope.subject, f"dead_lettered:{reason}")
        pool = self.pool_of(envelope)
        await dead_letter(self.client, self.dead_letters, envelope, pool, reason, error, retries)

    async def _send_signature(
        self, envelope: Envelope, sig: Any, pool: str, value: Any, *, reply: bool, chain: str = ""
    ) -> None:
        """Send a callback (``reply=False``) or a chain's next step (True: it
        answers the caller in the task's place, and its sinks get its result)."""
        try:
            name, sig_pool, args, kwargs, immutable, options = signature_from_wire(sig, pool)
        except ValueError as exc:
            log("actorctl:task:bad-signature", message_id=envelope.message_id, error=str(exc))
            if reply:  # the chain cannot go on: its caller must hear of it
                error = TaskError("WireFormatError", f"bad chain step: {exc}")
                await self.report(envelope, FAILURE, error.wire())
            return
        sent = SendOptions.from_wire(options, f"task {name}")  # a bad one fails the task
        if not immutable:
            args = [to_wire(value), *args]
        headers = None
        if reply:
            sinks = (*sent.sinks, *header_sinks(envelope.headers))
            sent = attrs.evolve(sent, sinks=sinks, chain=chain or sent.chain)
            if H_CHORD in envelope.headers:
                headers = {H_CHORD: envelope.headers[H_CHORD]}
        await send_task(
            self.client,
            task=name,
            pool=sig_pool,
            args=args,
            kwargs=kwargs,
            task_id=new_task_id(),
            reply_to=envelope.reply_to if reply else None,
            correlation_id=envelope.correlation_id if reply else None,
            options=sent,
            headers=headers,
            durable=True,
        )
