"""How a commit reaches its thread (``store/_handoff.py``): a call run in a
thread of trio's cache, its result or error brought back, and cancellation
as ``trio.to_thread.run_sync`` has it (waited for, or abandoned)."""

from __future__ import annotations

import threading

import pytest
import trio

from actorctl.store._handoff import in_thread

BOUND = 10.0  # seconds any step below may take, on a loaded machine


async def test_a_call_runs_in_another_thread_and_its_result_comes_back() -> None:
    # Given a call that says which thread it ran in
    # When it is handed to a thread
    with trio.fail_after(BOUND):
        ident = await in_thread(threading.get_ident)
    # Then it ran elsewhere than the event loop's thread, and its result came back
    assert ident != threading.get_ident()


async def test_what_the_call_raises_is_raised_in_the_awaiting_task() -> None:
    # Given a call that fails
    def fail() -> None:
        raise OSError("disk full")

    # When it is handed to a thread, Then its error is raised here
    with trio.fail_after(BOUND), pytest.raises(OSError, match="disk full"):
        await in_thread(fail)


async def test_a_cancelled_wait_still_waits_for_the_thread_unless_abandoned() -> None:
    # Given a call that blocks until the test lets it go
    release = threading.Event()
    ended: list[str] = []

    def blocked(name: str) -> str:
        release.wait(BOUND)
        ended.append(name)
        return name

    async def cancel_then_release(scope: trio.CancelScope) -> None:
        await trio.testing.wait_all_tasks_blocked()
        scope.cancel(reason="test")
        await trio.testing.wait_all_tasks_blocked()
        release.set()

    # When its wait is cancelled while the thread runs
    with trio.fail_after(BOUND):
        async with trio.open_nursery() as nursery:
            with trio.CancelScope() as scope:
                nursery.start_soon(cancel_then_release, scope)
                got = await in_thread(lambda: blocked("kept"))
                await trio.lowlevel.checkpoint()  # the cancellation lands here
    # Then the wait returned only once the thread had ended, with its result
    assert scope.cancelled_caught
    assert got == "kept"
    assert ended == ["kept"]


async def test_an_abandoned_call_returns_at_once_and_its_thread_ends_on_its_own() -> None:
    # Given a call that blocks until the test lets it go
    release = threading.Event()
    done = threading.Event()

    def blocked() -> None:
        release.wait(BOUND)
        done.set()

    # When its wait is cancelled with abandon_on_cancel
    with trio.fail_after(BOUND):
        with trio.CancelScope() as scope:
            scope.cancel(reason="test")  # before it starts: it never starts
            await in_thread(blocked, abandon_on_cancel=True)
        assert scope.cancelled_caught
        with trio.CancelScope() as scope:

            async def cancel_soon() -> None:
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel(reason="test")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(cancel_soon)
                await in_thread(blocked, abandon_on_cancel=True)
        # Then it returned while the thread still ran
        assert scope.cancelled_caught
        assert not done.is_set()
        release.set()
        # and the thread ends on its own (what it returns is dropped)
        assert await trio.to_thread.run_sync(done.wait, BOUND)


async def test_then_runs_in_trio_s_thread_once_the_call_returned_and_not_when_it_raised() -> None:
    # Given a call, and what is to happen in trio's thread once it returned
    seen: list[tuple[str, int]] = []

    def then() -> None:
        seen.append(("then", threading.get_ident()))

    def fail() -> None:
        raise OSError("disk full")

    with trio.fail_after(BOUND):
        # When the call returns
        value = await in_thread(lambda: 7, then=then)
        seen.append(("woken", threading.get_ident()))
        # and when another raises
        with pytest.raises(OSError, match="disk full"):
            await in_thread(fail, then=then)
    # Then `then` ran once, in this thread, before the awaiting task was woken
    assert value == 7
    assert seen == [("then", threading.get_ident()), ("woken", threading.get_ident())]
