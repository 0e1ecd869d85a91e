"""The actors behind tasks: workers, their node's control actor, data sinks,
the event hub and the chord barrier.

A ``TaskWorker`` handles every task of one pool: it checks that the task was
not revoked and has not expired, binds its arguments, runs it under its time
limits, and then sends what follows: the result document to the caller (and
to data sinks), the next step of a chain, linked callbacks, or the task again
for a retry. It settles the message only after that (acks-late), so a chain
never loses a step when a worker dies.
"""

from __future__ import annotations

import ctypes
import functools
import json
import math
import sys
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar, Final, final

import attrs
import trio

from .._errors import (
    ActorctlError,
    SoftTimeLimitExceeded,
    TimeLimitExceeded,
    WireFormatError,
)
from .._log import log
from ..mailbox import ACCEPTED, KIND_DOCUMENT, Envelope, Outcome
from ._actor import Actor
from ._handlers import BadArguments, handler
from ._ref import Outbox, to_wire
from ._results import FAILURE, READY_STATES, RETRY, REVOKED, STARTED, SUCCESS, ResultRegistry
from ._tasks import (
    CHAIN_SEPARATOR,
    CONTROL,
    H_CHAIN,
    H_CHORD,
    H_GROUP,
    H_LINK,
    H_LINK_ERROR,
    H_MAP,
    H_POOL,
    H_PRIORITY,
    H_REPLY_LINK,
    H_RETRIES,
    H_SINKS,
    H_STATE,
    H_TASK_ID,
    H_TIMELIMIT,
    H_TRACK,
    Directory,
    Retry,
    Task,
    TaskApp,
    TaskClient,
    TaskContext,
    new_task_id,
    pack_chain,
    send_task,
    signature_from_wire,
    unpack_chain,
)

__all__ = [
    "ChordBarrier",
    "DataSink",
    "EventHub",
    "ResultsActor",
    "TaskControl",
    "TaskResult",
    "TaskWorker",
    "WorkerState",
    "task_actors",
]

UNKNOWN_TASK: Final = "actorctl:unknown-task"
UNKNOWN_EVENT: Final = "actorctl:unknown-event"
BAD_ARGUMENTS: Final = "actorctl:bad-arguments"
DECODE_ERROR: Final = "actorctl:decode-error"
SINK_FAILED: Final = "actorctl:sink-failed"
REVOKED_MEMORY: Final = 100_000  # revoked ids a node remembers


@final
class WorkerState:
    """What the task actors of one node share: revoked ids and running tasks."""

    def __init__(self) -> None:
        self.revoked: OrderedDict[str, bool] = OrderedDict()  # id -> terminate
        self.running: dict[str, trio.CancelScope] = {}

    def revoke(self, task_id: str, terminate: bool) -> None:
        self.revoked[task_id] = terminate
        self.revoked.move_to_end(task_id)
        while len(self.revoked) > REVOKED_MEMORY:
            self.revoked.popitem(last=False)
        scope = self.running.get(task_id)
        if scope is not None and terminate:
            scope.cancel(reason="terminated by revoke")


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

    async def forward(self, envelope: Envelope) -> tuple[Outcome, tuple[str, Any] | None] | None:
        if envelope.kind != KIND_DOCUMENT:
            return None
        headers = envelope.headers
        state = str(headers.get(H_STATE, SUCCESS))
        body = envelope.body
        try:
            await self._on_result(envelope, state, body, headers)
        except Exception as exc:  # the sink's own code failed: say so, keep going
            log(
                "actorctl:sink:failed",
                message_id=envelope.message_id,
                error_type=type(exc).__name__,
                error=str(exc),
            )
            return Outcome.rejected(SINK_FAILED, f"{type(exc).__name__}: {exc}"), None
        return ACCEPTED, None

    async def _on_result(
        self, envelope: Envelope, state: str, body: Any, headers: Mapping[str, Any]
    ) -> None:
        await self.on_result(
            TaskResult(
                task_id=str(envelope.correlation_id or headers.get(H_TASK_ID, "")),
                task=envelope.subject,
                state=state,
                value=body if state == SUCCESS else None,
                error=body if state != SUCCESS and isinstance(body, dict) else None,
            )
        )


@final
class ResultsActor(DataSink):
    """A caller's results inbox: hands each document to the handle waiting for it."""

    name = "_results"
    mailbox_capacity: ClassVar[int] = 1000
    dedup_count: ClassVar[int] = 0  # a repeated document changes nothing

    def __init__(self, registry: ResultRegistry) -> None:
        self.registry = registry

    async def forward(self, envelope: Envelope) -> tuple[Outcome, tuple[str, Any] | None] | None:
        if envelope.kind != KIND_DOCUMENT:
            return None
        headers = envelope.headers
        task_id = str(envelope.correlation_id)
        if not self.registry.deliver(
            task_id, str(headers.get(H_STATE, SUCCESS)), envelope.body, headers
        ):
            log("actorctl:result:unexpected", task_id=task_id, state=headers.get(H_STATE))
        return ACCEPTED, None


@final
class TaskControl(Actor):
    """``_tasks`` on every node that hosts task workers: takes revokes at once
    (its own mailbox, so a revoke never queues behind the tasks it revokes)."""

    name = CONTROL
    dedup_count: ClassVar[int] = 0

    def __init__(self, state: WorkerState) -> None:
        self.state = state

    @handler
    async def revoke(self, ids: list[str], terminate: bool = False) -> int:
        for task_id in ids:
            self.state.revoke(str(task_id), terminate)
        log("actorctl:task:revoked", ids=ids, terminate=terminate)
        return len(ids)


class _Failure(Exception):
    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name = type_name
        self.message = message


class TaskWorker(Actor):
    """Runs every task of one pool of ``app``; one or more per node.

    Args:
        app: the tasks.
        pool: the pool's name.
        directory: where the pools and services are (for chains, callbacks,
            retries and sinks).
        state: shared with the node's ``TaskControl``.
    """

    #: Plain ``def`` tasks run in worker threads (True), or inline on the
    #: node's event loop, one at a time, as Celery's solo pool runs them (False).
    threads: ClassVar[bool] = True

    def __init__(self, app: TaskApp, pool: str, directory: Directory, state: WorkerState) -> None:
        self.app = app
        self.pool = pool
        self.directory = directory
        self.state = state
        self.client: TaskClient | None = None

    async def on_start(self) -> None:
        self.client = TaskClient(self._require_cell().outbox, self.directory)
        if self.app.client is None:
            self.app.attach(self.client)  # tasks may send tasks (results untracked)

    async def forward(self, envelope: Envelope) -> tuple[Outcome, tuple[str, Any] | None] | None:
        try:
            return await self._task(envelope)
        except Exception as exc:
            # What follows the run could not be sent (an unknown pool, a result
            # that is not JSON, no scheduler for a delayed retry, a malformed
            # option in a signature): the caller hears of it, and the worker
            # goes on with the other tasks it holds.
            error = {"type": type(exc).__name__, "message": str(exc)}
            log("actorctl:task:unsendable", message_id=envelope.message_id, **error)
            try:
                await self._report(envelope, FAILURE, error)
            except ActorctlError as again:
                log("actorctl:task:unreported", message_id=envelope.message_id, error=str(again))
            return ACCEPTED, None

    async def _task(self, envelope: Envelope) -> tuple[Outcome, None]:
        task = self.app.tasks.get(envelope.subject)
        if task is None:
            why = (
                f"pool {self.pool!r} has no task {envelope.subject!r} "
                f"(it has: {', '.join(sorted(self.app.tasks)) or 'none'})"
            )
            await self._report(envelope, FAILURE, {"type": "UnknownTask", "message": why})
            return Outcome.rejected(UNKNOWN_TASK, why), None
        try:
            args, kwargs = envelope.call()
        except WireFormatError as exc:
            await self._report(envelope, FAILURE, {"type": "WireFormatError", "message": str(exc)})
            return Outcome.rejected(DECODE_ERROR, str(exc)), None
        headers = envelope.headers
        task_id = str(headers.get(H_TASK_ID) or envelope.correlation_id or envelope.message_id)
        revoked = self.state.revoked
        if task_id in revoked or (envelope.correlation_id or "") in revoked:
            await self._report(envelope, REVOKED, {"reason": "revoked"})
            return ACCEPTED, None
        client = self.client
        assert client is not None
        now = client.outbox.now()
        if envelope.expiry_time is not None and envelope.expiry_time <= now:
            reason = f"expired {now - envelope.expiry_time:.3f} s before it could run"
            await self._report(envelope, REVOKED, {"reason": reason})
            return ACCEPTED, None
        mode = headers.get(H_MAP)
        try:
            calls = self._calls(task, args, kwargs, mode)
        except BadArguments as exc:
            await self._report(envelope, FAILURE, {"type": "BadArguments", "message": str(exc)})
            return Outcome.rejected(BAD_ARGUMENTS, str(exc)), None
        if headers.get(H_TRACK):
            await self._report(envelope, STARTED, None)
        retries = headers.get(H_RETRIES, 0)
        retries = retries if isinstance(retries, int) else 0
        try:
            values = []
            for call_args, call_kwargs in calls:
                values.append(
                    await self._run(task, task_id, retries, call_args, call_kwargs, headers)
                )
            value = values if mode else values[0]
        except Retry as retry:
            return await self._retry(envelope, task, task_id, retries, retry.exc, retry.countdown)
        except _Failure as failure:
            error = {"type": failure.type_name, "message": failure.message}
            if failure.type_name == "TaskRevoked":
                await self._report(envelope, REVOKED, {"reason": failure.message})
            else:
                await self._fail(envelope, task_id, error)
            return ACCEPTED, None
        except Exception as exc:
            if isinstance(exc, task.autoretry_for) if task.autoretry_for else False:
                return await self._retry(envelope, task, task_id, retries, exc, None)
            log(
                "actorctl:task:failed",
                task=task.name,
                task_id=task_id,
                error_type=type(exc).__name__,
                error=str(exc),
            )
            await self._fail(envelope, task_id, {"type": type(exc).__name__, "message": str(exc)})
            return ACCEPTED, None
        await self._succeed(envelope, task, value)
        return ACCEPTED, None

    # -- running -------------------------------------------------------------------

    def _calls(
        self, task: Task, args: list[Any], kwargs: dict[str, Any], mode: object
    ) -> list[tuple[list[Any], dict[str, Any]]]:
        if not mode:
            return [task.spec.bind(args, kwargs)]
        if len(args) != 1 or not isinstance(args[0], list):
            raise BadArguments(f"task {task.name!r}: a {mode} takes one list of items")
        items = args[0]
        if mode == "starmap":
            if not all(isinstance(item, list) for item in items):
                raise BadArguments(f"task {task.name!r}: each starmap item must be a list")
            return [task.spec.bind(item, {}) for item in items]
        return [task.spec.bind([item], {}) for item in items]

    async def _run(
        self,
        task: Task,
        task_id: str,
        retries: int,
        args: list[Any],
        kwargs: dict[str, Any],
        headers: Mapping[str, Any],
    ) -> Any:
        hard, soft = task.time_limit, task.soft_time_limit
        limits = headers.get(H_TIMELIMIT)
        if isinstance(limits, str):
            try:
                given = json.loads(limits)
                hard = given[0] if given[0] is not None else hard
                soft = given[1] if given[1] is not None else soft
            except (ValueError, IndexError, TypeError):
                pass
        if task.bind:
            ctx = TaskContext(
                task,
                task_id,
                retries=retries,
                args=args,
                kwargs=kwargs,
                aborted=functools.partial(self.state.revoked.__contains__, task_id),
            )
            args = [ctx, *args]
        deadline = math.inf if hard is None else trio.current_time() + hard
        with trio.CancelScope(deadline=deadline) as scope:
            self.state.running[task_id] = scope
            try:
                if task.boxed:
                    return await _run_boxed(task, args, kwargs)
                if task.is_async:
                    return await _with_soft_limit(functools.partial(task.fn, *args, **kwargs), soft)
                if not self.threads:
                    return _run_inline(functools.partial(task.fn, *args, **kwargs), soft, hard)
                return await _run_thread(
                    functools.partial(task.fn, *args, **kwargs), soft, self._require_cell()
                )
            finally:
                self.state.running.pop(task_id, None)
        if self.state.revoked.get(task_id):
            raise _Failure("TaskRevoked", "terminated while running")
        raise _Failure(
            "TimeLimitExceeded",
            f"task {task.name} ran past its hard time limit ({hard:g} s) and was stopped"
            + ("" if task.is_async or task.boxed else " (its thread runs on: use boxed=True)"),
        )

    # -- what follows a run ---------------------------------------------------------

    async def _succeed(self, envelope: Envelope, task: Task, value: Any) -> None:
        client = self.client
        assert client is not None
        headers = envelope.headers
        pool = str(headers.get(H_POOL, self.pool))
        for callback in _signatures(headers.get(H_LINK)):
            await self._send_signature(envelope, callback, pool, value, reply=False)
        chain_header = headers.get(H_CHAIN)
        if isinstance(chain_header, str) and chain_header:
            try:
                rest, _, step = unpack_chain(chain_header).rpartition(CHAIN_SEPARATOR)
                sig = json.loads(step)
            except ValueError as exc:
                await self._fail(
                    envelope,
                    str(headers.get(H_TASK_ID)),
                    {"type": "WireFormatError", "message": f"bad chain header: {exc}"},
                )
                return
            await self._send_signature(
                envelope, sig, pool, value, reply=True, chain=pack_chain(rest) if rest else ""
            )
            return
        await self._report(envelope, SUCCESS, to_wire(value))

    async def _send_signature(
        self,
        envelope: Envelope,
        sig: Any,
        pool: str,
        value: Any,
        *,
        reply: bool,
        chain: str = "",
    ) -> None:
        client = self.client
        assert client is not None
        try:
            name, sig_pool, args, kwargs, immutable, options = signature_from_wire(sig, pool)
        except ValueError as exc:
            log("actorctl:task:bad-signature", message_id=envelope.message_id, error=str(exc))
            if reply:  # the chain cannot go on: its caller must hear of it
                error = {"type": "WireFormatError", "message": f"bad chain step: {exc}"}
                await self._report(envelope, FAILURE, error)
            return
        if not immutable:
            args = [to_wire(value), *args]
        if chain:
            options = {**options, "chain": chain}
        headers = (
            {H_CHORD: envelope.headers[H_CHORD]} if reply and H_CHORD in envelope.headers else None
        )
        await send_task(
            client,
            task=name,
            pool=sig_pool,
            args=args,
            kwargs=kwargs,
            task_id=new_task_id(),
            reply_to=envelope.reply_to if reply else None,
            correlation_id=envelope.correlation_id if reply else None,
            options={**options, "sinks": [*_sink_list(options.get("sinks")), *_sinks(envelope)]}
            if reply
            else options,
            headers=headers,
            # Not confirmed: settlement means "handled", and the next step is
            # handled only after the rest of the chain, so waiting for it would
            # hold one worker slot per step. The node's link keeps it unsettled
            # (and sends it again after a reconnect) until the pool takes it.
            confirm=False,
        )

    async def _fail(self, envelope: Envelope, task_id: str, error: dict[str, Any]) -> None:
        pool = str(envelope.headers.get(H_POOL, self.pool))
        for errback in _signatures(envelope.headers.get(H_LINK_ERROR)):
            try:
                name, sig_pool, args, kwargs, _, options = signature_from_wire(errback, pool)
            except ValueError as exc:
                log("actorctl:task:bad-signature", message_id=envelope.message_id, error=str(exc))
                continue
            assert self.client is not None
            await send_task(
                self.client,
                task=name,
                pool=sig_pool,
                args=[*args, task_id, error],
                kwargs=kwargs,
                task_id=new_task_id(),
                reply_to=None,
                options=options,
                confirm=False,
            )
        await self._report(envelope, FAILURE, error)

    async def _retry(
        self,
        envelope: Envelope,
        task: Task,
        task_id: str,
        retries: int,
        exc: BaseException | None,
        countdown: float | None,
    ) -> tuple[Outcome, None]:
        error = {
            "type": type(exc).__name__ if exc is not None else "Retry",
            "message": str(exc) if exc is not None else "retry requested",
        }
        if task.max_retries is not None and retries >= task.max_retries:
            error["message"] += f" (gave up after {retries} retries)"
            await self._fail(envelope, task_id, error)
            return ACCEPTED, None
        if countdown is None:
            countdown = task.default_retry_delay * (2**retries if task.retry_backoff else 1)
        client = self.client
        assert client is not None
        await self._report(envelope, RETRY, {**error, "countdown": countdown})
        args, kwargs = envelope.call()
        options: dict[str, Any] = {"retries": retries + 1, "countdown": countdown}
        for header, key in ((H_CHAIN, "chain"), (H_MAP, "map"), (H_TRACK, "track_started")):
            if header in envelope.headers:
                options[key] = envelope.headers[header]
        passthrough = {
            k: v
            for k, v in envelope.headers.items()
            if k in (H_LINK, H_LINK_ERROR, H_SINKS, H_TIMELIMIT, H_CHORD, H_GROUP, H_PRIORITY)
        }
        if envelope.expiry_time is not None:
            options["expires"] = max(0.0, envelope.expiry_time - client.outbox.now())
        await send_task(
            client,
            task=task.name,
            pool=str(envelope.headers.get(H_POOL, self.pool)),
            args=args,
            kwargs=kwargs,
            task_id=task_id,
            reply_to=envelope.reply_to,
            correlation_id=envelope.correlation_id,
            options=options,
            headers=passthrough,
            confirm=False,
        )
        log("actorctl:task:retry", task=task.name, task_id=task_id, retries=retries + 1)
        return ACCEPTED, None

    async def _report(self, envelope: Envelope, state: str, body: Any) -> None:
        """Send a state document to the caller, and final ones to the sinks."""
        client = self.client
        assert client is not None
        targets = [envelope.reply_to] if envelope.reply_to else []
        if state in READY_STATES:
            targets += _sinks(envelope)
        if not targets:
            return
        await send_document(client, envelope, state, body, targets)


def _sink_list(value: object) -> list[str]:
    """A signature's ``sinks`` option: an array, or one comma-separated string."""
    if isinstance(value, str):
        return [s for s in value.split(",") if s]
    if isinstance(value, list | tuple):
        return [str(s) for s in value]
    return []


def _sinks(envelope: Envelope) -> list[str]:
    sinks = envelope.headers.get(H_SINKS)
    return [s for s in sinks.split(",") if s] if isinstance(sinks, str) else []


def _signatures(text: object) -> list[Any]:
    if not isinstance(text, str) or not text:
        return []
    try:
        sigs = json.loads(text)
    except ValueError:
        return []
    return sigs if isinstance(sigs, list) else []


async def send_document(
    client: TaskClient, request: Envelope, state: str, body: Any, targets: list[str]
) -> None:
    outbox = client.outbox
    headers: dict[str, Any] = {H_STATE: state}
    task_id = request.headers.get(H_TASK_ID)
    if task_id:
        headers[H_TASK_ID] = task_id
    retries = request.headers.get(H_RETRIES)
    if isinstance(retries, int):
        headers[H_RETRIES] = retries
    link = request.headers.get(H_REPLY_LINK)
    for target in targets:
        caller = target == request.reply_to
        if caller and isinstance(link, str):
            document = _document(outbox, request, link, body, headers)
            if outbox.reply(document, quiet=True):
                continue  # back on the connection the task came by
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
        document = _document(outbox, request, str(address), body, headers)
        # The caller's copy goes pre-settled (the result is the acknowledgement,
        # as for an ask's reply); a data sink's is settled by the sink.
        await outbox.send(address, document, presettled=caller, confirm=False)


def _document(
    outbox: Outbox, request: Envelope, to: str, body: Any, headers: Mapping[str, Any]
) -> Envelope:
    return Envelope(
        message_id=outbox.new_message_id(),
        to=to,
        subject=request.subject,
        body=body,
        kind=KIND_DOCUMENT,
        correlation_id=request.correlation_id,
        creation_time=outbox.now(),
        headers=headers,
    )


# -- time limits ------------------------------------------------------------------


async def _with_soft_limit(call: Callable[[], Awaitable[Any]], soft: float | None) -> Any:
    """Await ``call()``; past ``soft`` seconds, raise ``SoftTimeLimitExceeded``
    inside it at the point where it waits, so that it can catch it and clean up.

    trio can only cancel a waiting task; this delivers another exception through
    the same abort protocol trio uses for ``Cancelled`` (the task's wait is
    aborted, and it is rescheduled with the exception instead).
    """
    if soft is None:
        return await call()
    target = trio.lowlevel.current_task()
    fired = False

    def raise_soft() -> None:
        nonlocal fired
        fired = True  # trio calls this only when it aborted the task's wait
        raise SoftTimeLimitExceeded(f"soft time limit ({soft:g} s) exceeded")

    async def alarm() -> None:
        await trio.sleep(soft)
        while not fired:
            abort = getattr(target, "_attempt_abort", None)
            if abort is None:  # not this trio: fall back to cancelling it
                raise SoftTimeLimitExceeded(f"soft time limit ({soft:g} s) exceeded")
            if getattr(target, "_abort_func", None) is not None:
                abort(raise_soft)
            if not fired:
                # It is running, or in a wait that cannot be aborted (a thread):
                # try again at its next wait.
                await trio.sleep(0.001)

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(alarm)
            try:
                return await call()
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


class _Alarms:
    """Exceptions raised by timers into the one thread that runs a plain ``def``
    task, at its next Python instruction, and never once the task is over."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ident: int | None = None
        self._running = False

    def fire(self, exc: type[BaseException]) -> None:
        with self._lock:
            if self._running and self._ident is not None:
                _set_async_exc(self._ident, exc)

    def run(self, call: Callable[[], Any], timers: Sequence[threading.Timer] = ()) -> Any:
        with self._lock:
            self._ident = threading.get_ident()
            self._running = True
        try:
            for timer in timers:
                timer.daemon = True
                timer.start()
            return call()
        finally:
            self._leave()
            for timer in timers:
                timer.cancel()

    def _leave(self) -> None:
        while True:
            try:
                with self._lock:
                    self._running = False
                    if self._ident is not None:
                        _set_async_exc(self._ident, None)  # one that fired just now
                return
            except (SoftTimeLimitExceeded, TimeLimitExceeded):
                continue  # it fired as the task ended: the task is over


async def _run_thread(call: Callable[[], Any], soft: float | None, cell: Any) -> Any:
    """Run a plain ``def`` task in a worker thread; past ``soft`` seconds raise
    ``SoftTimeLimitExceeded`` in that thread (at its next Python instruction).

    A thread cannot be stopped: past the hard limit the worker stops waiting for
    it (the task fails with TimeLimitExceeded) and the thread runs on until it
    returns, holding its place in the pool's concurrency. A task that must be
    stopped should be ``boxed=True``.
    """
    alarms = _Alarms()
    run = functools.partial(alarms.run, call)
    limiter = cell._threads
    if soft is None:
        return await trio.to_thread.run_sync(run, limiter=limiter, abandon_on_cancel=True)

    async def alarm() -> None:
        assert soft is not None
        await trio.sleep(soft)
        alarms.fire(SoftTimeLimitExceeded)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(alarm)
        try:
            return await trio.to_thread.run_sync(run, limiter=limiter, abandon_on_cancel=True)
        finally:
            nursery.cancel_scope.cancel()


def _set_async_exc(ident: int, exc: type[BaseException] | None) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(ident), ctypes.py_object(exc) if exc is not None else None
    )


def _run_inline(call: Callable[[], Any], soft: float | None, hard: float | None) -> Any:
    """Run a plain ``def`` task on this thread (a solo pool). Timers raise
    ``SoftTimeLimitExceeded`` and, past the hard limit, ``TimeLimitExceeded``
    in it at its next Python instruction (not inside a blocking C call)."""
    if soft is None and hard is None:
        return call()
    alarms = _Alarms()
    timers = [
        threading.Timer(seconds, alarms.fire, (exc,))
        for seconds, exc in ((soft, SoftTimeLimitExceeded), (hard, TimeLimitExceeded))
        if seconds is not None
    ]
    return alarms.run(call, timers)


async def _run_boxed(task: Task, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Run a plain ``def`` task in a process of its own (``python -m
    actorctl.actors._boxed``): its hard limit kills the process."""
    module = task.fn.__module__
    if module == "__main__":
        raise _Failure("ConfigError", f"boxed task {task.name} must live in an importable module")
    payload = json.dumps(
        {
            "module": module,
            "function": task.fn.__name__,
            "args": to_wire(args),
            "kwargs": to_wire(kwargs),
        }
    )
    done = await trio.run_process(
        [sys.executable, "-m", "actorctl.actors._boxed"],
        stdin=payload.encode(),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        stderr = done.stderr.decode(errors="replace").strip().splitlines()
        raise _Failure(
            "BoxedProcessError",
            f"boxed task {task.name} exited with code {done.returncode}: "
            + (stderr[-1] if stderr else "no output"),
        ) from None
    if "error" in answer:
        raise _Failure(str(answer["error"]["type"]), str(answer["error"]["message"]))
    return answer["value"]


# -- fan-out: events and chords ------------------------------------------------------


class EventHub(Actor):
    """``events``: takes each published event and delivers it to every task that
    subscribes to it, once per subscribing pool; settles it once all took it."""

    name = "events"
    concurrency: ClassVar[int] = 100
    dedup_count: ClassVar[int] = 10_000

    def __init__(self, apps: list[TaskApp], directory: Directory) -> None:
        self.apps = apps
        self.directory = directory

    async def forward(self, envelope: Envelope) -> tuple[Outcome, tuple[str, Any] | None] | None:
        event_name = envelope.subject
        subscribers = [task for app in self.apps for task in app.subscriptions.get(event_name, [])]
        if not any(event_name in app.events for app in self.apps):
            return Outcome.rejected(
                UNKNOWN_EVENT, f"no event named {event_name!r} is defined"
            ), None
        try:
            _, fields = envelope.call()
        except WireFormatError as exc:
            return Outcome.rejected(DECODE_ERROR, str(exc)), None
        client = TaskClient(self._require_cell().outbox, self.directory)
        sinks = [s for s in str(envelope.headers.get(H_SINKS, "")).split(",") if s]
        for task in subscribers:
            try:
                await send_task(
                    client,
                    task=task.name,
                    pool=task.pool,
                    args=[fields],
                    kwargs={},
                    task_id=new_task_id(),
                    reply_to=None,
                    options={"sinks": [*task.sinks, *sinks]},
                    headers={"event": event_name, "event_id": envelope.message_id},
                )
            except ActorctlError as exc:  # one subscriber's pool must not cost the others
                log(
                    "actorctl:event:undeliverable",
                    event=event_name,
                    task=task.name,
                    message_id=envelope.message_id,
                    error=str(exc),
                )
        log("actorctl:event:delivered", event=event_name, subscribers=[t.name for t in subscribers])
        return ACCEPTED, None


@attrs.define
class _Chord:
    tasks: list[str]
    body: dict[str, Any]
    reply_to: str | None
    results: dict[str, Any] = attrs.field(factory=dict)
    failed: bool = False


class ChordBarrier(Actor):
    """``chords``: holds each chord's barrier. It counts the header's results as
    they arrive and, when the last is in, sends the body with the list of them."""

    name = "chords"
    takes_documents: ClassVar[bool] = True
    mailbox_capacity: ClassVar[int] = 1000
    dedup_count: ClassVar[int] = 0

    def __init__(self, directory: Directory) -> None:
        self.directory = directory
        self.chords: dict[str, _Chord] = {}

    @handler
    async def open(
        self, chord_id: str, tasks: list[str], body: dict[str, Any], reply_to: str | None = None
    ) -> None:
        self.chords[chord_id] = _Chord(list(tasks), body, reply_to)

    async def forward(self, envelope: Envelope) -> tuple[Outcome, tuple[str, Any] | None] | None:
        if envelope.kind != KIND_DOCUMENT:
            return None
        chord = self.chords.get(str(envelope.correlation_id))
        state = envelope.headers.get(H_STATE)
        if chord is None or chord.failed or state not in READY_STATES:
            return ACCEPTED, None
        chord_id = str(envelope.correlation_id)
        client = TaskClient(self._require_cell().outbox, self.directory)
        member = str(envelope.headers.get(H_TASK_ID))
        if member not in chord.tasks:
            return ACCEPTED, None  # not one of this chord's tasks
        if state != SUCCESS:
            chord.failed = True
            del self.chords[chord_id]
            error = envelope.body if isinstance(envelope.body, dict) else {}
            failure = {
                "type": "ChordError",
                "message": f"task {envelope.headers.get(H_TASK_ID)} of the chord ended {state}: "
                f"{error.get('type', '')} {error.get('message', error.get('reason', ''))}".strip(),
            }
            await self._fail_chord(client, envelope, chord, chord_id, failure)
            return ACCEPTED, None
        chord.results[member] = envelope.body
        if len(chord.results) < len(chord.tasks):
            return ACCEPTED, None
        del self.chords[chord_id]
        values = [chord.results[t] for t in chord.tasks]
        try:
            name, pool, args, kwargs, immutable, options = signature_from_wire(chord.body, "")
            await send_task(
                client,
                task=name,
                pool=pool,
                args=args if immutable else [values, *args],
                kwargs=kwargs,
                task_id=chord_id,
                reply_to=chord.reply_to,
                options=options,
            )
        except Exception as exc:  # the body cannot be sent: its caller must hear of it
            log(
                "actorctl:chord:unsendable",
                message_id=envelope.message_id,
                chord_id=chord_id,
                error=str(exc),
            )
            failure = {"type": type(exc).__name__, "message": f"chord body: {exc}"}
            await self._fail_chord(client, envelope, chord, chord_id, failure)
        return ACCEPTED, None

    async def _fail_chord(
        self,
        client: TaskClient,
        envelope: Envelope,
        chord: _Chord,
        chord_id: str,
        failure: dict[str, Any],
    ) -> None:
        """Tell the chord's caller (if any) that it failed, under the chord's id."""
        if chord.reply_to:
            request = attrs.evolve(
                envelope,
                subject=str(chord.body.get("t")),
                reply_to=chord.reply_to,
                headers={H_TASK_ID: chord_id},
            )
            await send_document(client, request, FAILURE, failure, [chord.reply_to])


def task_actors(
    apps: list[TaskApp],
    directory: Directory,
    *,
    pools: list[str] | None = None,
    instances: int = 1,
    services: bool = False,
) -> dict[str, Actor]:
    """The actors a node hosts for ``apps``: a ``TaskWorker`` per pool (``POOL``,
    ``POOL-2``, ... for more instances) and the ``_tasks`` control actor; with
    ``services``, also the event hub and the chord barrier.

    Raises:
        ConfigError: a pool no app defines.
    """
    from .._errors import ConfigError

    state = WorkerState()
    actors: dict[str, Actor] = {}
    known = {pool: app for app in apps for pool in app.pools}
    for pool in pools if pools is not None else list(known):
        app = known.get(pool)
        if app is None:
            raise ConfigError(f"no app defines a pool named {pool!r} (pools: {sorted(known)})")
        settings = app.pools.get(pool, {})
        worker_class = type(
            "TaskWorker",
            (TaskWorker,),
            {
                "concurrency": settings.get("concurrency", 4),
                "mailbox_capacity": settings.get("mailbox_capacity", 100),
                "threads": bool(settings.get("threads", True)),
                "__module__": TaskWorker.__module__,
            },
        )
        for copy in range(1, instances + 1):
            actors[pool if copy == 1 else f"{pool}-{copy}"] = worker_class(
                app, pool, directory, state
            )
    if actors:
        actors[CONTROL] = TaskControl(state)
    if services:
        actors[EventHub.name or "events"] = EventHub(apps, directory)
        actors[ChordBarrier.name or "chords"] = ChordBarrier(directory)
    return actors
