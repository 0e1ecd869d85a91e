"""Awaiting results that are final already (issue 30): a pipelined trio caller
awaits the oldest of the tasks it has in flight, most often final by then.
``aget()`` of such a result yields to trio's scheduler at one await in
``READY_YIELD_EVERY`` among the results of one registry (their
``SharedWaits``), so that the sends the caller makes between go out in one
write; it honours a cancellation at every one.
"""

from __future__ import annotations

import pytest
import trio

from actorctl import AsyncResult
from actorctl.tasks.client._results import READY_YIELD_EVERY, SharedWaits
from actorctl.tasks.protocol._protocol import SUCCESS

TIMEOUT = 10


def _final(count: int, shared: SharedWaits | None) -> list[AsyncResult]:
    results = [AsyncResult(f"task-{i}", "t.add", shared=shared) for i in range(count)]
    for result in results:
        result.update(SUCCESS, 3)
    return results


async def _turns_while_awaiting(results: list[AsyncResult]) -> int:
    """How many times another task ran while each result was awaited in turn."""
    ran = 0
    done = False

    async def other() -> None:
        nonlocal ran
        while not done:
            ran += 1
            await trio.lowlevel.checkpoint()

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(other)
            await trio.lowlevel.checkpoint()  # it has started
            before = ran
            values = [await result.aget() for result in results]
            after = ran
            done = True
    assert values == [3] * len(results)
    return after - before


async def test_results_final_already_yield_at_one_await_in_so_many() -> None:
    # Given results final already, of one registry, and others of none
    count = 4 * READY_YIELD_EVERY
    shared = _final(count, SharedWaits())
    alone = _final(count, None)
    # When each is awaited in turn while another task wants to run
    shared_turns = await _turns_while_awaiting(shared)
    alone_turns = await _turns_while_awaiting(alone)
    # Then the registry's results let it run at one await in READY_YIELD_EVERY,
    # the others at each (give or take one: trio runs the tasks of a turn in
    # any order, so the other may run before or after the first and last await)
    yields = count // READY_YIELD_EVERY
    assert yields - 1 <= shared_turns <= yields + 1
    assert count - 1 <= alone_turns <= count + 1


async def test_awaiting_a_result_final_already_honours_a_cancellation() -> None:
    # Given a result final already, its registry's count away from a yield
    shared = SharedWaits()
    (result,) = _final(1, shared)
    assert (shared.ready_awaits + 1) % READY_YIELD_EVERY != 0
    # When it is awaited in a scope that is cancelled
    with trio.CancelScope() as scope:
        scope.cancel()
        await result.aget()
        pytest.fail("aget() returned in a cancelled scope")
    # Then the await raised Cancelled, and the scope caught it
    assert scope.cancelled_caught
