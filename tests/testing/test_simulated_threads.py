"""Work in a thread under trio's autojump clock (``actorctl/_threads.py``): the
clock stands still while the thread works, so that what waits behind it is
not made late in simulated time; a thread's value and errors come back as
they are."""

from __future__ import annotations

import time

import pytest
import trio

from actorctl._threads import clock_jumps, run_sync

#: Real seconds the thread works (busy, bounded), long enough that an
#: autojump clock would jump while it does.
WORK_S = 0.02


def _work() -> int:
    ends = time.monotonic() + WORK_S
    while time.monotonic() < ends:  # real work in the thread, bounded
        pass
    return 42


async def test_the_autojump_clock_stands_still_while_a_thread_works(
    autojump_clock: trio.abc.Clock,
) -> None:
    assert clock_jumps()
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        # Given a deadline the clock would jump to as soon as every task waits
        nursery.start_soon(trio.sleep, 10)
        # When a task waits for a thread that works in real time
        value = await run_sync(_work)
        # Then it has the thread's value, and no simulated time passed
        assert value == 42
        assert trio.current_time() == start
        nursery.cancel_scope.cancel()


async def test_a_threads_error_is_raised_as_it_is(autojump_clock: trio.abc.Clock) -> None:
    def fail() -> None:
        raise KeyError("wanted")

    with pytest.raises(KeyError, match="wanted"):
        await run_sync(fail)


async def test_under_the_real_clock_it_is_a_plain_thread_call() -> None:
    assert not clock_jumps()
    assert await run_sync(_work) == 42
