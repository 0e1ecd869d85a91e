"""Work in a thread, awaited so that a simulated clock stands still meanwhile.

trio's autojump clock (``trio.testing.MockClock`` with an
``autojump_threshold``: tests, and ``actorctl.testing`` under it) jumps to the
next deadline as soon as every task waits. A task that waits for a thread
waits too, though the thread works in real time: the clock jumps past
deadlines while, say, a worker runs a task's body in its thread, and what
queues behind that task then runs seconds late in simulated time (on a busy
machine tests/tasks/test_celery_periodic.py saw a periodic firing run 5 s
after its due time). Under such a clock, :func:`run_sync` keeps the waiting
task runnable, yielding to the others, until the thread has finished: the
clock cannot jump while a thread works, as simulated time should behave.
Under any other clock it is ``trio.to_thread.run_sync``, no more.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

import trio

__all__ = ["clock_jumps", "run_sync"]

T = TypeVar("T")


def clock_jumps() -> bool:
    """Whether this run's clock jumps ahead once every task waits (trio's
    ``MockClock`` with an autojump threshold). Read by its attribute, not its
    class: ``trio.testing`` is not imported at run time (75 ms)."""
    clock = trio.lowlevel.current_clock()
    threshold: float = getattr(clock, "autojump_threshold", math.inf)
    return threshold != math.inf


async def run_sync(
    fn: Callable[..., T],
    *args: object,
    limiter: trio.CapacityLimiter | None = None,
    abandon_on_cancel: bool = False,
) -> T:
    """``trio.to_thread.run_sync(fn, *args, ...)``; under a clock that jumps,
    with the caller kept runnable until the thread has finished (see the
    module's text). What ``fn`` raises is raised as it is. Every thread
    actorctl awaits is awaited through it."""
    if not clock_jumps():
        return await trio.to_thread.run_sync(
            fn, *args, limiter=limiter, abandon_on_cancel=abandon_on_cancel
        )
    ended: list[tuple[bool, object]] = []

    async def call() -> None:
        try:
            value = await trio.to_thread.run_sync(
                fn, *args, limiter=limiter, abandon_on_cancel=abandon_on_cancel
            )
        except Exception as exc:  # raised below, as it is, not in a group
            ended.append((False, exc))
        else:
            ended.append((True, value))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        # Runnable (a checkpoint a pass), never waiting: the clock does not
        # jump meanwhile. (An event would let it: waiting for one is waiting.)
        while not ended:
            await trio.lowlevel.checkpoint()
    returned, result = ended[0]
    if not returned:
        assert isinstance(result, Exception)
        raise result
    return result  # type: ignore[return-value]  # (fn's T, kept as an object)
