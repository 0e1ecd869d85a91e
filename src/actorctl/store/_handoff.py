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
``to_thread`` brings it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import trio

if TYPE_CHECKING:
    import outcome

__all__ = ["in_thread"]

T = TypeVar("T")


async def in_thread(fn: Callable[[], T], *, abandon_on_cancel: bool = False) -> T:
    """Run ``fn()`` in a thread of trio's thread cache and return what it
    returns (or raise what it raised). Cancelled meanwhile, it waits for the
    thread all the same, unless ``abandon_on_cancel``: then it raises
    ``trio.Cancelled`` at once and what the thread ends with is dropped."""
    await trio.lowlevel.checkpoint_if_cancelled()
    token = trio.lowlevel.current_trio_token()
    waiting: list[trio.lowlevel.Task] = [trio.lowlevel.current_task()]

    def back(result: outcome.Outcome[T]) -> None:  # in trio's thread
        if waiting:
            trio.lowlevel.reschedule(waiting[0], result)

    def deliver(result: outcome.Outcome[T]) -> None:  # in the worker thread
        with contextlib.suppress(trio.RunFinishedError):  # abandoned, and the run ended
            token.run_sync_soon(back, result)

    def abort(_: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
        if abandon_on_cancel:
            waiting.clear()
            return trio.lowlevel.Abort.SUCCEEDED
        return trio.lowlevel.Abort.FAILED

    trio.lowlevel.start_thread_soon(fn, deliver)
    result: T = await trio.lowlevel.wait_task_rescheduled(abort)
    return result
