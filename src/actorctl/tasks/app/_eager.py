"""Eager mode: tasks run inline in the caller, for unit tests (Celery's
``task_always_eager``).

With ``App(..., eager=True)`` (or ``app.conf.task_always_eager = True``),
``delay()``/``apply_async()`` run the task here and return its final
``AsyncResult``; nothing is sent and no connection is opened. A task goes
through what a worker does with its message (``_worker.py``,
``_followups.py``), so that its errors, states and results are those a
cluster gives:

- its arguments and its result go through JSON (a tuple comes back a list;
  an argument that is not JSON raises ``WireFormatError`` at ``delay()``, a
  result that is not JSON fails the task), and its arguments are bound to its
  signature (a FAILURE with ``BadArguments``);
- a failure is retried per the task's (or the call's) retry policy, at once:
  the countdown is computed and reported in the RETRY document but not slept;
- chains, links (``link``/``link_error``), groups and chords run inline, in
  the order a cluster sends them (callbacks before a chain's next step);
- time limits, rate and concurrency limits, priorities and sinks do not apply
  (nothing runs concurrently; there is no node to feed a sink);
- ``result.revoke()`` records the id: a task sent later with that id (or a
  retry of it) reports REVOKED without running, and a bound task's
  ``ctx.is_aborted()`` turns true; a task that has finished stays as it is, as
  on a cluster.

``task_eager_propagates`` (default False) re-raises a failed task's own
exception from ``delay()``, as Celery does; ``get()`` raises, as on a cluster,
the ``TaskFailed`` of its type (``propagate=False`` returns it).

Plain ``def`` tasks run in a worker thread of a trio run that ``delay()``
starts (so that a task may call ``other.delay()``, as on a worker), ``async
def`` ones in that run; from trio code, ``await task.adelay()`` runs them in
the caller's run.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, final

import attrs
import trio

from ..._errors import MisuseError, RemoteError, WireFormatError
from ..._threads import run_sync
from ...actors import BadArguments, to_wire
from ...mailbox import json_dumps
from ...supervision import RetryPolicy, failure_mark
from ..client._results import AsyncResult, in_trio
from ..limits._policies import delay_bound, is_poison
from ..protocol._arguments import calls_of
from ..protocol._protocol import (
    FAILURE,
    RETRY,
    REVOKED,
    STARTED,
    SUCCESS,
    new_task_id,
    next_step,
    signature_from_wire,
)
from ..protocol._send_options import SendOptions
from ..protocol._task_errors import NotRun, NotRunKind, TaskError
from ..worker import _hooks as hooks
from ._signature import wire_options
from ._task import Retry, Task, TaskContext, check_send_options

__all__ = ["KEPT_RESULTS", "EagerRuns"]

#: Results an app in eager mode keeps by id (``app.AsyncResult(id)``), newest.
KEPT_RESULTS: Final = 10_000


@final
@attrs.define
class _Origin:
    """The exception that ended one call (for ``task_eager_propagates``)."""

    exc: BaseException | None = None


@final
@attrs.frozen
class _Message:
    """One task message as a worker would get it: its arguments in wire form,
    its options (``link``, ``chain``, ``retry_policy``, ...) as they travel."""

    task: str
    pool: str
    args: list[Any]
    kwargs: dict[str, Any]
    task_id: str
    options: SendOptions
    result: AsyncResult | None  # who gets its documents (None: nobody, a callback)
    origin: _Origin
    retries: int = 0


@final
class EagerRuns:
    """An app's eager runner: on while its ``task_always_eager`` setting is.

    Args:
        tasks: the app's tasks by name (chain steps and callbacks are found there).
        settings: the app's ``app.conf``.
    """

    def __init__(self, tasks: Mapping[str, Task], settings: Mapping[str, Any]) -> None:
        self._tasks = tasks
        self._settings = settings
        #: Whether it is on: its ``task_always_eager`` setting, which the app
        #: keeps here as it changes (``Registry._apply_setting``), so that a
        #: delay() reads an attribute, not the setting (no call per task).
        self.active = bool(settings["task_always_eager"])
        self._results: dict[str, AsyncResult] = {}
        #: Task ids revoked (``result.revoke()``): they report REVOKED if sent.
        self.revoked: set[str] = set()

    def result(self, task_id: str) -> AsyncResult:
        """``app.AsyncResult(task_id)``: the result of a task run here, or a
        PENDING handle (revoking it revokes the id)."""
        found = self._results.get(task_id)
        return found if found is not None else self._new_result(task_id, "", tracked=True)

    # -- entry points (Task.apply_async / aapply_async) ----------------------------

    def apply(
        self, task: Task, args: Sequence[Any], kwargs: Mapping[str, Any] | None, options: Any
    ) -> AsyncResult:
        """Run ``task`` here, now, from plain code; its final result.

        Raises:
            MisuseError: called from trio code (use ``await task.adelay()``).
            ConfigError, WireFormatError: as ``Task.apply_async`` raises them.
        """
        if in_trio():
            raise MisuseError(
                f"task {task.name}: eager mode runs the task in this call, and this is "
                "trio's thread: use the awaitable form (`await task.adelay(...)`, "
                "`await task.aapply_async(...)`)"
            )
        message = self._message(task, args, kwargs, dict(options))
        trio.run(self._deliver, message)
        return self._outcome(message)

    async def aapply(
        self, task: Task, args: Sequence[Any], kwargs: Mapping[str, Any] | None, options: Any
    ) -> AsyncResult:
        """:meth:`apply` for trio code: runs the task in the caller's run."""
        message = self._message(task, args, kwargs, dict(options))
        await self._deliver(message)
        return self._outcome(message)

    def _outcome(self, message: _Message) -> AsyncResult:
        result = message.result
        assert result is not None
        if self._settings["task_eager_propagates"] and message.origin.exc is not None:
            raise message.origin.exc
        return result

    def _message(
        self,
        task: Task,
        args: Sequence[Any],
        kwargs: Mapping[str, Any] | None,
        options: dict[str, Any],
    ) -> _Message:
        """Check a call as ``Task.apply_async`` does, and make its message."""
        check_send_options(task.name, options)
        wire_args, wire_kwargs = _through_json([to_wire(list(args)), to_wire(dict(kwargs or {}))])
        task_id = options.pop("task_id", None) or new_task_id()
        ignore = options.pop("ignore_result", task.ignore_result)
        name = options.pop("_name", task.name)
        options.pop("_group", None)
        if task.track_started:
            options.setdefault("track_started", True)
        sent = SendOptions.of(wire_options(options, task.pool), f"task {task.name}")
        result = self._new_result(task_id, name, tracked=not ignore)
        return _Message(
            task.name, task.pool, wire_args, wire_kwargs, task_id, sent, result, _Origin()
        )

    def _new_result(self, task_id: str, name: str, *, tracked: bool) -> AsyncResult:
        result = AsyncResult(
            task_id, name, revoke=self._revoke, arevoke=self._arevoke, tracked=tracked
        )
        if tracked:
            self._results[task_id] = result
            if len(self._results) > KEPT_RESULTS:
                del self._results[next(iter(self._results))]
        return result

    def _revoke(self, task_id: str, terminate: bool) -> None:
        self.revoked.add(task_id)

    async def _arevoke(self, task_id: str, terminate: bool) -> None:
        self.revoked.add(task_id)

    def chord_values(
        self, header: Sequence[AsyncResult], body: str
    ) -> tuple[str, list[Any] | AsyncResult]:
        """What the chord barrier makes of its header's results: the chord's id
        and the values its body gets, or the chord's failed result (the first
        member that did not succeed, as ``ChordError``)."""
        chord_id = new_task_id()
        for member in header:
            if member.state != SUCCESS:
                error = member.result
                why = (
                    f"{error.type_name} {error.message}"
                    if isinstance(error, RemoteError)
                    else str(getattr(error, "reason", error or ""))
                )
                failed = self._new_result(chord_id, body, tracked=True)
                message = f"task {member.id} of the chord ended {member.state}: {why}"
                failed.update(FAILURE, TaskError("ChordError", message.strip()).wire())
                return chord_id, failed
        return chord_id, [member.result for member in header]

    # -- a worker's part -----------------------------------------------------------

    async def _deliver(self, message: _Message | None) -> None:
        """Handle ``message`` and what follows it in its place (its retries,
        its chain's next steps), as the worker that gets each would."""
        while message is not None:
            message = await self._handle(message)

    async def _handle(self, message: _Message) -> _Message | None:
        task = self._tasks.get(message.task)
        if task is None:
            why = f"app has no task {message.task!r} (it has: {', '.join(sorted(self._tasks))})"
            _report(message, FAILURE, TaskError("UnknownTask", why).wire())
            return None
        try:
            calls = calls_of(task, message.args, message.kwargs, message.options.map)
        except BadArguments as exc:
            message.origin.exc = exc
            _report(message, FAILURE, TaskError.of(exc).wire())
            return None
        if message.task_id in self.revoked:
            hooks.revoked(
                task,
                message.task_id,
                message.args,
                message.kwargs,
                not_run := NotRun(NotRunKind.REVOKED, "revoked"),
            )
            _report(message, REVOKED, not_run.wire())
            return None
        if message.options.track_started:
            _report(message, STARTED, None)
        hooks.prerun(task, message.task_id, message.args, message.kwargs)
        try:
            values = [await self._run(task, message, a, k) for a, k in calls]
        except (Retry, Exception) as exc:
            return await self._failed(task, message, exc)
        value = values if message.options.map else values[0]
        try:
            wire_value = _through_json(to_wire(value))
        except WireFormatError as exc:
            return await self._fail(task, message, TaskError.of(exc), exc)
        hooks.succeeded(task, value)
        hooks.postrun(task, message.task_id, message.args, message.kwargs, value, SUCCESS)
        return await self._succeed(message, wire_value)

    async def _run(
        self, task: Task, message: _Message, args: list[Any], kwargs: dict[str, Any]
    ) -> Any:
        """One call of ``task``: async ones in this run, plain ones in a thread
        of it (time limits are not enforced)."""
        if task.bind:
            task_id = message.task_id
            ctx = TaskContext(
                task,
                task_id,
                retries=message.retries,
                args=args,
                kwargs=kwargs,
                aborted=lambda: task_id in self.revoked,
            )
            args = [ctx, *args]
        if task.is_async:
            return await task.fn(*args, **kwargs)
        return await run_sync(functools.partial(task.fn, *args, **kwargs))

    async def _succeed(self, message: _Message, value: Any) -> _Message | None:
        """Its callbacks, then its chain's next step (returned) or its result."""
        for callback in message.options.link:
            follow = self._from_signature(callback, message, [value], result=None)
            if follow is not None:
                await self._deliver(follow)
        chain = message.options.chain
        if not chain:
            _report(message, SUCCESS, value)
            return None
        try:
            step, rest = next_step(chain)
            sig = json.loads(step)
        except ValueError as exc:
            _report(message, FAILURE, TaskError("WireFormatError", f"bad chain: {exc}").wire())
            return None
        return self._from_signature(sig, message, [value], result=message.result, chain=rest)

    def _from_signature(
        self,
        sig: Any,
        parent: _Message,
        first: list[Any],
        *,
        result: AsyncResult | None,
        chain: str = "",
    ) -> _Message | None:
        """The message a signature in wire form makes, ``first`` before its
        arguments unless it is immutable (callbacks are sent to nobody), with
        the rest of its ``chain`` (if any)."""
        try:
            name, pool, args, kwargs, immutable, wired = signature_from_wire(sig, parent.pool)
            options = SendOptions.from_wire(wired, f"task {name}")
        except ValueError as exc:
            if result is not None:
                error = TaskError("WireFormatError", f"bad chain step: {exc}")
                _report(parent, FAILURE, error.wire())
            return None
        origin = parent.origin if result is not None else _Origin()
        return _Message(
            name,
            pool,
            args if immutable else [*first, *args],
            kwargs,
            new_task_id(),
            attrs.evolve(options, chain=chain) if chain else options,
            result,
            origin,
        )

    async def _failed(self, task: Task, message: _Message, exc: BaseException) -> _Message | None:
        """It raised ``exc``: retry it (returned), or fail it, as a worker would."""
        if isinstance(exc, Retry):
            return await self._retry(task, message, exc.exc, exc.countdown)
        mark = failure_mark(exc)
        if not is_poison(exc) and not isinstance(exc, BadArguments):
            policy = mark if isinstance(mark, RetryPolicy) else self._policy(task, message)
            if policy.retries(exc):
                return await self._retry(task, message, exc, None, policy)
        error = TaskError.of(exc, traceback=hooks.format_traceback(exc))
        return await self._fail(task, message, error, exc)

    def _policy(self, task: Task, message: _Message) -> RetryPolicy:
        given = message.options.retry_policy
        return task.retry_policy if given is None else task.retry_policy.with_wire(given)

    async def _retry(
        self,
        task: Task,
        message: _Message,
        exc: BaseException | None,
        countdown: float | None,
        policy: RetryPolicy | None = None,
    ) -> _Message | None:
        """Run it again at once (the countdown is reported, not slept), or, its
        retries spent, fail it."""
        policy = policy or self._policy(task, message)
        retries = message.retries
        error = TaskError.of(exc) if exc is not None else TaskError("Retry", "retry requested")
        if policy.exhausted(retries):
            error = TaskError(
                error.type,
                f"{error.message} (gave up after {retries} retries)",
                hooks.format_traceback(exc) if exc is not None else None,
            )
            return await self._fail(task, message, error, exc or Retry())
        if countdown is None:
            bound = delay_bound(task, policy, retries)
            countdown = policy.delay(retries) if task.default_retry_delay is None else bound
        _report(message, RETRY, {**error.wire(), "countdown": countdown})
        hooks.retried(task, message.task_id, retries, message.args, message.kwargs, exc)
        return attrs.evolve(message, retries=retries + 1)

    async def _fail(
        self, task: Task, message: _Message, failed: TaskError, exc: BaseException
    ) -> _Message | None:
        """Its errbacks (each with its id and ``error``), then its failure."""
        message.origin.exc = exc
        error = failed.wire()
        for errback in message.options.link_error:
            follow = self._from_signature(errback, message, [], result=None)
            if follow is not None:
                follow = attrs.evolve(follow, args=[*follow.args, message.task_id, error])
                await self._deliver(follow)
        _report(message, FAILURE, error)
        hooks.failed(task, message.task_id, message.args, message.kwargs, exc)
        hooks.postrun(task, message.task_id, message.args, message.kwargs, exc, FAILURE)
        return None  # nothing follows a failure in its place


def _report(message: _Message, state: str, body: Any) -> None:
    """A state document to whoever waits for the message's result."""
    if message.result is not None:
        message.result.update(state, body, message.retries)


def _through_json(value: Any) -> Any:
    """``value`` as the other end of a message reads it.

    Raises:
        WireFormatError: it cannot be sent as JSON.
    """
    return json.loads(json_dumps(value))
