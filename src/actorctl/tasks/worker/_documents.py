"""Result documents: how task actors send them, and data sinks that take them.

A document to a task's caller goes back on the caller's own reply link
(docs/protocol.md §14.4): the caller's ``reply-to`` is its reply address
(``$reply/...``), and the node that sends the document holds a reply link to
it, because the caller connects to every node of the cluster that may answer
(``_connect.py``). Sending on a reply link never waits: a slow or dead caller
cannot hold up a worker (a document for a caller with no link here is logged
and dropped, as a reply is). A document to an actor (a chord's barrier as
``reply-to``, a data sink) is a durable send to its inbox: the node's backlog
keeps it until the actor settles it.

A final document (SUCCESS, FAILURE, REVOKED) is also kept in the sending node's
store (``_state.py``), committed before the task is settled (before
:func:`send_document` returns, or, in a worker's handler, by the worker's
settler, which waits for the commit of a batch of tasks at once): any caller
can fetch it by id for ``RESULT_EXPIRES`` seconds from that node's ``_tasks``
(``_lookup.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from ..._errors import ActorctlError
from ..._log import log
from ...actors import Actor, Outbox, settle_after
from ...mailbox import ACCEPTED, KIND_DOCUMENT, Envelope, Outcome
from ..client._client import TaskClient
from ..protocol._protocol import (
    FAILURE,
    H_RETRIES,
    H_STATE,
    H_TASK_ID,
    READY_STATES,
    SINK_FAILED,
    SUCCESS,
)
from ..protocol._state import RESULT_EXPIRES, keep_result, store_of
from ..protocol._task_errors import TaskError

if TYPE_CHECKING:
    from ...store import Store
from ._relay import relay_document

__all__ = [
    "DataSink",
    "TaskResult",
    "document_headers",
    "is_reply_address",
    "result_document",
    "send_document",
]

REPLY_PREFIX = "$reply/"


def is_reply_address(target: str) -> bool:
    """Whether ``target`` is a caller's reply address rather than an actor's."""
    return target.startswith(REPLY_PREFIX)


async def send_document(
    client: TaskClient,
    request: Envelope,
    state: str,
    body: Any,
    targets: list[str],
    *,
    expires: float = RESULT_EXPIRES,
    relay: bool = False,
    settle_after_commit: bool = False,
    store: Store | None = None,
) -> None:
    """Send a state document about the task ``request`` to each of ``targets``:
    on the reply link for a reply address (never waiting), else to the actor's
    inbox through the node's backlog (returns once the backlog holds it). A
    final state is kept in the node's store too (committed when this returns),
    even with no target. ``relay`` (a worker's node): a document for a caller
    with no reply link here goes through the services node's ``_relay``.

    ``settle_after_commit`` (a worker's handler): the wait for that commit is
    handed to the worker's settler when it has one (``actors/_settling.py``):
    the task is settled once it is committed, without holding a runner until
    then. Should the commit be refused, the caller gets a FAILURE document
    saying so, as for any follow-up that could not be sent.

    ``store``: the node's store, looked up already (a worker's, once); else
    looked up here, once per final document."""
    outbox = client.outbox
    # One clock read: when the result is kept from, and when its documents were made.
    now = outbox.now()
    # The node's store keeps a final document's result, and is synced below.
    if state not in READY_STATES:
        store = None
    elif store is None:
        store = store_of(outbox)
    kept = store is not None and keep_result(store, now, request, state, body, expires)
    headers = document_headers(request, state)
    for target in targets:
        if target.startswith(REPLY_PREFIX):  # is_reply_address, inline (per document)
            document = result_document(outbox, request, target, body, headers, now)
            # On a worker's node (relay), a caller with no link here has one on
            # the services node.
            if not outbox.reply(document, quiet=relay) and relay:
                await relay_document(client, document)
            continue
        try:
            address = client.directory.resolve(target)
        except Exception as exc:
            log(
                "actorctl:result:unroutable",
                message_id=request.message_id,
                target=target,
                error=str(exc),
            )
            continue
        document = result_document(outbox, request, str(address), body, headers, now)
        # To an actor (a chord's barrier, a data sink): through the backlog,
        # kept until the actor settles it; across hosts, a barrier's follows
        # the services role when its node is lost (its barriers were taken over).
        directory = client.directory
        reroute = directory.elsewhere if directory.elected else None
        await outbox.send(
            address, document, presettled=False, confirm=False, durable=True, reroute=reroute
        )
    if kept and store is not None:
        handed = settle_after_commit and settle_after(
            store.sync, functools.partial(_uncommitted, client, request, targets, expires, relay)
        )
        if not handed:
            await store.sync()


async def _uncommitted(
    client: TaskClient,
    request: Envelope,
    targets: list[str],
    expires: float,
    relay: bool,
    exc: Exception,
) -> None:
    """The settler's, when the commit of a result it waited for failed (a
    shipper refused it): what the worker does for a follow-up that could not
    be sent (``_worker.py``), the caller told with a FAILURE document."""
    error = TaskError.of(exc)
    log("actorctl:task:unsendable", message_id=request.message_id, **error.wire())
    try:
        await send_document(
            client, request, FAILURE, error.wire(), targets, expires=expires, relay=relay
        )
    except ActorctlError as again:
        log("actorctl:task:unreported", message_id=request.message_id, error=str(again))


def document_headers(request: Envelope, state: str) -> dict[str, Any]:
    """The application properties of a ``state`` document about the task
    command ``request`` (docs/protocol.md §14.4): ``state``, and its ``task_id``
    and integer ``retries`` if it has them."""
    headers: dict[str, Any] = {H_STATE: state}
    task_id = request.headers.get(H_TASK_ID)
    if task_id:
        headers[H_TASK_ID] = task_id
    retries = request.headers.get(H_RETRIES)
    if isinstance(retries, int):
        headers[H_RETRIES] = retries
    return headers


def result_document(
    outbox: Outbox,
    request: Envelope,
    to: str,
    body: Any,
    headers: Mapping[str, Any],
    now: float | None = None,
) -> Envelope:
    """The document about the task command ``request`` that goes to ``to``,
    with ``headers`` (:func:`document_headers`) and ``body``, made at ``now``
    (the outbox's clock, read here if not given)."""
    return Envelope(
        message_id=outbox.new_message_id(),
        to=to,
        subject=request.subject,
        body=body,
        kind=KIND_DOCUMENT,
        correlation_id=request.correlation_id,
        creation_time=outbox.now() if now is None else now,
        headers=headers,
    )


@attrs.frozen
class TaskResult:
    """A result document, as a data sink receives it."""

    task_id: str
    task: str
    state: str
    value: Any = None
    error: Mapping[str, Any] | None = None


class DataSink(Actor):
    """An actor that takes result documents: override :meth:`on_result`.

    Name it in a task's ``sinks`` (``@app.task(sinks=["totals"])``) and it gets
    the final state of every run of that task, besides the caller.
    """

    takes_documents: ClassVar[bool] = True

    async def on_result(self, result: TaskResult) -> None:
        """Called with each result document, in the actor's own task."""

    async def handle_unmatched(
        self, envelope: Envelope
    ) -> tuple[Outcome, tuple[str, Any] | None] | None:
        if envelope.kind != KIND_DOCUMENT:
            return None
        headers = envelope.headers
        state = str(headers.get(H_STATE, SUCCESS))
        body = envelope.body
        result = TaskResult(
            task_id=str(envelope.correlation_id or headers.get(H_TASK_ID, "")),
            task=envelope.subject,
            state=state,
            value=body if state == SUCCESS else None,
            error=body if state != SUCCESS and isinstance(body, dict) else None,
        )
        try:
            await self.on_result(result)
        except Exception as exc:  # the sink's own code failed: say so, keep going
            log(
                "actorctl:sink:failed",
                message_id=envelope.message_id,
                error_type=type(exc).__name__,
                error=str(exc),
            )
            return Outcome.rejected(SINK_FAILED, f"{type(exc).__name__}: {exc}"), None
        return ACCEPTED, None
