"""Time limits: how a worker runs a task under its soft and hard limits.

Only trio's supported machinery is used: cancel scopes with deadlines, and
threads that the worker stops waiting for. What each kind of task can be
interrupted by:

- **async tasks**: at the **soft** limit the task is cancelled at its next
  ``await`` (trio's cancellation: its ``finally`` blocks run) and its result is
  ``SoftTimeLimitExceeded``. A task that wants to catch the soft limit and
  clean up (or still return a value) wraps the work in
  ``with soft_time_limit():``, which raises ``SoftTimeLimitExceeded`` where the
  block ends; it may then go on until the **hard** limit, where it is cancelled
  for good and its result is ``TimeLimitExceeded``.
- **plain ``def`` tasks in threads**: a thread cannot be interrupted. At the
  soft limit nothing happens unless the task asks: ``check_soft_time_limit()``,
  called in its loop, raises ``SoftTimeLimitExceeded`` there (the task may catch
  it). At the hard limit the worker stops waiting for the thread and the result
  is ``TimeLimitExceeded``; the thread runs on until it returns (its value is
  dropped) and holds its place in the pool's concurrency until then. A task
  that must really be stopped should be ``boxed=True``.
- **plain ``def`` tasks inline** (``threads=False``, a solo pool): nothing can
  interrupt them either, and they hold the node's event loop while they run.
  ``check_soft_time_limit()`` works as in a thread; a task that returns past
  its hard limit has the result ``TimeLimitExceeded`` (its value is dropped).
- **boxed tasks** run in a long-lived supervised process of the pool's boxed
  worker (docs/boxed.md), or in one of their own for each call
  (``boxed="per-call"``): the hard limit kills the process.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import math
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Final, final

import trio

from ..._errors import RemoteError, SoftTimeLimitExceeded
from ..._threads import run_sync
from ...actors import to_wire
from ...supervision import Boxed, BoxedUnavailable

__all__ = [
    "TaskFailure",
    "TimeLimits",
    "call_boxed",
    "check_soft_time_limit",
    "foreign_handler",
    "run_async",
    "run_boxed",
    "run_inline",
    "run_thread",
    "soft_time_limit",
]

BOXED_MODULE: Final = "actorctl.tasks.worker._boxed"


class TaskFailure(Exception):
    """A task ended with an error the worker names (not one the task raised)."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type_name = type_name
        self.message = message


@final
class TimeLimits:
    """The limits of one run of a task, in seconds from its start (None: none)."""

    def __init__(self, hard: float | None, soft: float | None) -> None:
        self.hard = hard
        self.soft = soft
        started = time.monotonic()
        self.soft_deadline = math.inf if soft is None else started + soft
        self.hard_deadline = math.inf if hard is None else started + hard
        # The worker's own soft scope: disarmed when the task takes the soft
        # limit into its own hands (soft_time_limit()).
        self.soft_scope: trio.CancelScope | None = None

    def soft_exceeded(self) -> SoftTimeLimitExceeded:
        return SoftTimeLimitExceeded(f"soft time limit ({self.soft:g} s) exceeded")

    def trio_deadline(self, deadline: float) -> float:
        """A monotonic-clock deadline on trio's clock."""
        if deadline == math.inf:
            return math.inf
        return trio.current_time() + (deadline - time.monotonic())


# The time limits of the running task. Task-local, not shared: each task run
# sets it in its own context (see ``_client._current``).
_limits: contextvars.ContextVar[TimeLimits | None] = contextvars.ContextVar(
    "actorctl_time_limits", default=None
)


def check_soft_time_limit() -> None:
    """In a task: raise ``SoftTimeLimitExceeded`` if its soft time limit has
    passed. The one way a plain ``def`` task learns of it; call it in loops.
    Outside a task, or with no soft limit, it does nothing.

    Raises:
        SoftTimeLimitExceeded: the task's soft limit has passed.
    """
    limits = _limits.get()
    if limits is not None and time.monotonic() >= limits.soft_deadline:
        raise limits.soft_exceeded()


@contextlib.contextmanager
def soft_time_limit() -> Iterator[None]:
    """In an async task: run the block until the task's soft time limit, and
    raise ``SoftTimeLimitExceeded`` where it ends if the limit cut it short, so
    that the task can catch it and clean up (until its hard limit). Outside a
    task, or with no soft limit, it only runs the block.

    Raises:
        SoftTimeLimitExceeded: the soft limit cancelled the block.
    """
    limits = _limits.get()
    if limits is None or limits.soft_deadline == math.inf:
        yield
        return
    if limits.soft_scope is not None:
        limits.soft_scope.deadline = math.inf  # the task handles it now
    with trio.CancelScope(deadline=limits.trio_deadline(limits.soft_deadline)) as scope:
        yield
    if scope.cancelled_caught:
        raise limits.soft_exceeded()


async def run_async(call: Callable[[], Awaitable[Any]], limits: TimeLimits) -> Any:
    """Await ``call()`` under ``limits`` (the hard limit is the caller's scope).

    Raises:
        SoftTimeLimitExceeded: the soft limit cancelled it.
    """
    token = _limits.set(limits)
    try:
        if limits.soft_deadline == math.inf:  # no soft limit: no scope to cut it short
            return await call()
        with trio.CancelScope(deadline=limits.trio_deadline(limits.soft_deadline)) as scope:
            limits.soft_scope = scope
            return await call()
        raise limits.soft_exceeded()
    finally:
        _limits.reset(token)


async def run_thread(
    call: Callable[[], Any], limits: TimeLimits, limiter: trio.CapacityLimiter
) -> Any:
    """Run a plain ``def`` task in a worker thread, which sees its limits
    (``check_soft_time_limit()``); the caller's hard-limit scope abandons it."""
    token = _limits.set(limits)  # the thread runs in a copy of this context
    try:
        return await run_sync(call, limiter=limiter, abandon_on_cancel=True)  # (_threads.py)
    finally:
        _limits.reset(token)


def run_inline(call: Callable[[], Any], limits: TimeLimits) -> Any:
    """Run a plain ``def`` task on this thread (a solo pool).

    Raises:
        TaskFailure: it returned past its hard limit.
    """
    token = _limits.set(limits)
    try:
        value = call()
    finally:
        _limits.reset(token)
    if limits.hard is not None and time.monotonic() > limits.hard_deadline:
        raise TaskFailure(
            "TimeLimitExceeded",
            f"task ran past its hard time limit ({limits.hard:g} s): a solo pool "
            "cannot stop it, so its value was dropped",
        )
    return value


async def call_boxed(
    boxed: Boxed,
    name: str,
    args: list[Any],
    kwargs: dict[str, Any],
    limits: TimeLimits,
    trace: str | None,
) -> Any:
    """Run the task ``name`` in a long-lived boxed worker (docs/boxed.md): past
    its hard limit (or cancelled) the process running it is killed.

    Raises:
        TaskFailure: the task raised (its type and message), or the worker
            could not run it.
    """
    try:
        return await boxed.call(
            name, to_wire(args), to_wire(kwargs), time_limit=limits.hard, trace=trace
        )
    except RemoteError as exc:
        raise TaskFailure(exc.type_name, exc.message) from None
    except BoxedUnavailable as exc:
        raise TaskFailure("BoxedUnavailable", str(exc)) from None


async def run_boxed(
    name: str, fn: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]
) -> Any:
    """Run a task in a process of its own, for this one call (``boxed="per-call"``):
    the reference worker (``python -m actorctl.tasks.worker._boxed``) gets one request
    and a shutdown; cancelling this (the hard limit) kills it.

    Raises:
        TaskFailure: the task raised, or the process ended without an answer.
    """
    module = fn.__module__
    if module == "__main__":
        raise TaskFailure("ConfigError", f"boxed task {name} must live in an importable module")
    request = {"type": "request", "id": "1", "handler": name, "args": to_wire(args),
               "kwargs": to_wire(kwargs), "deadline": None, "trace": None}  # fmt: skip
    payload = json.dumps(request) + "\n" + json.dumps({"type": "shutdown"}) + "\n"
    done = await trio.run_process(
        [sys.executable, "-m", BOXED_MODULE, module],
        stdin=payload.encode(),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    for line in done.stdout.decode(errors="replace").splitlines():
        try:
            answer = json.loads(line)
        except ValueError:
            continue
        if isinstance(answer, dict) and answer.get("type") == "reply":
            if "error" in answer:
                error = answer["error"]
                raise TaskFailure(str(error["type"]), str(error["message"]))
            return answer["value"]
    stderr = done.stderr.decode(errors="replace").strip().splitlines()
    raise TaskFailure(
        "BoxedProcessError",
        f"boxed task {name} exited with code {done.returncode}: "
        + (stderr[-1] if stderr else "no output"),
    )


def foreign_handler(*args: Any, **kwargs: Any) -> Any:
    """Stands for a handler of a boxed worker (one in another language): it
    never runs in the worker's process.

    Raises:
        TaskFailure: always.
    """
    raise TaskFailure("ConfigError", "a boxed worker's handler runs only in its process")
