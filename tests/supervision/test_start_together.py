"""A supervisor that starts its first child alone and then the others at once
(``start_together``: the nodes ``cluster up`` starts), under trio's autojump
clock: each child takes a second to be ready.
"""

from __future__ import annotations

import pytest
import trio

from actorctl.supervision import ChildSpec, Supervisor

#: Seconds (virtual) a child takes from its start to being ready.
READY = 1.0


class Slow:
    """Children that take READY s to start and note when each began and was ready
    (and when it stopped); the one named ``fails`` raises instead of being ready."""

    def __init__(self, fails: str | None = None) -> None:
        self.fails = fails
        self.began: dict[str, float] = {}
        self.ready: dict[str, float] = {}
        self.stopped: list[str] = []

    def spec(self, name: str) -> ChildSpec:
        async def start(*, task_status: trio.TaskStatus[None]) -> None:
            self.began[name] = trio.current_time()
            await trio.sleep(READY)
            if name == self.fails:
                raise RuntimeError(f"{name} could not start")
            self.ready[name] = trio.current_time()
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self.stopped.append(name)

        return ChildSpec(name, start)


async def test_the_first_child_starts_alone_then_the_others_at_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    slow = Slow()
    supervisor = Supervisor("nodes", [slow.spec(n) for n in "abcd"], start_together=True)
    begun = trio.current_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        # Then the first was ready before any other began, and the others
        # began together: the run is started after two starts' time, not four
        assert slow.began["a"] == begun
        assert {slow.began[n] for n in "bcd"} == {slow.ready["a"]}
        assert trio.current_time() - begun == 2 * READY
        assert supervisor.count_children()["active"] == 4
        nursery.cancel_scope.cancel()
    # And they stop in reverse order, as ever
    assert slow.stopped == ["d", "c", "b", "a"]


async def test_in_order_by_default(autojump_clock: trio.abc.Clock) -> None:
    slow = Slow()
    supervisor = Supervisor("nodes", [slow.spec(n) for n in "abc"])
    begun = trio.current_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        assert [slow.began[n] for n in "abc"] == [begun + i * READY for i in range(3)]
        nursery.cancel_scope.cancel()


async def test_one_that_fails_to_start_fails_the_run_and_the_others_are_stopped(
    autojump_clock: trio.abc.Clock,
) -> None:
    slow = Slow(fails="c")
    supervisor = Supervisor("nodes", [slow.spec(n) for n in "abcd"], start_together=True)
    # (its own error, as when children start in order)
    failed = pytest.RaisesExc(RuntimeError, match="c could not start")
    with pytest.RaisesGroup(failed, flatten_subgroups=True):
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run)
    # Then every other that started was stopped, in reverse order
    assert sorted(slow.ready) == ["a", "b", "d"]
    assert slow.stopped == ["d", "b", "a"]
