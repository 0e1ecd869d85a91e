"""How a commit reaches its thread: one call run in a thread of trio's thread
cache, and awaited.

``trio.to_thread.run_sync`` does this and more than a commit needs: it takes a
token of trio's default capacity limiter first (a pass of the scheduler of its
own, even when the limiter has room), copies the context, and renames the
thread for the call and back after it (two system calls in the thread, with
the GIL held, while the event loop may want it). A store runs one commit at a
time, so it needs no limiter; its commit reads no context variable. What
stays: the same idle thread of trio's cache takes every commit (no thread
start), and the result comes back through the trio token, as
``to_thread`` brings it. What must follow a commit at once (its waiters
woken) may be done there, in trio's thread, before the committer's task
runs again (``then``): a scheduler pass sooner. Under a clock that jumps
(trio's autojump ``MockClock``: tests), ``actorctl._threads`` runs it so that
the clock stands still while it works.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import trio

from .._threads import clock_jumps, run_sync

if TYPE_CHECKING:
    import outcome

__all__ = ["in_thread"]

T = TypeVar("T")


async def in_thread(
    fn: Callable[[], T],
    *,
    abandon_on_cancel: bool = False,
    then: Callable[[], None] | None = None,
) -> T:
    """Run ``fn()`` in a thread of trio's thread cache and return what it
    returns (or raise what it raised). Cancelled meanwhile, it waits for the
    thread all the same, unless ``abandon_on_cancel``: then it raises
    ``trio.Cancelled`` at once and what the thread ends with is dropped.

    ``then``: called in trio's thread as soon as ``fn`` has returned (not
    raised), before the awaiting task is woken, and not at all once the wait
    was abandoned; it must not raise (it runs in trio's own task that brings
    results back from threads). What it wakes runs a scheduler pass sooner
    than what the awaiting task would wake once it runs."""
    await trio.lowlevel.checkpoint_if_cancelled()
    if clock_jumps():  # simulated time (tests): it stands still while fn works
        value = await run_sync(fn, abandon_on_cancel=abandon_on_cancel)
        if then is not None:
            then()
        return value
    token = trio.lowlevel.current_trio_token()
    waiting: list[trio.lowlevel.Task] = [trio.lowlevel.current_task()]

    returned: list[bool] = []  # fn returned (set in the worker thread, read after)

    def run() -> T:  # in the worker thread
        value = fn()
        returned.append(True)
        return value

    def back(result: outcome.Outcome[T]) -> None:  # in trio's thread
        if waiting:
            if then is not None and returned:
                then()
            trio.lowlevel.reschedule(waiting[0], result)

    def deliver(result: outcome.Outcome[T]) -> None:  # in the worker thread
        with contextlib.suppress(trio.RunFinishedError):  # abandoned, and the run ended
            token.run_sync_soon(back, result)

    def abort(_: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
        if abandon_on_cancel:
            waiting.clear()
            return trio.lowlevel.Abort.SUCCEEDED
        return trio.lowlevel.Abort.FAILED

    trio.lowlevel.start_thread_soon(run, deliver)
    result: T = await trio.lowlevel.wait_task_rescheduled(abort)
    return result
