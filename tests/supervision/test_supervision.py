"""Supervisors with OTP semantics, under trio's autojump clock.

Children report each start and stop on a channel; each test crashes children
by setting their events and reads what the supervisor did, in order.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from actorctl import Actor, Envelope, Modified, Outcome, handler
from actorctl.supervision import ChildSpec, Restart, Strategy, Supervisor, SupervisorGaveUp
from tests.support.harness import node_pair


class Children:
    """Children that say when they start and stop, and fail or exit on request."""

    def __init__(self) -> None:
        self.send, self.receive = trio.open_memory_channel[str](100)
        self.crash: dict[str, trio.Event] = {}
        self.finish: dict[str, trio.Event] = {}
        self.started_at: dict[str, list[float]] = {}

    def spec(self, name: str, restart: Restart = Restart.PERMANENT) -> ChildSpec:
        async def start(*, task_status: trio.TaskStatus[None]) -> None:
            self.crash[name] = crash = trio.Event()
            self.finish[name] = finish = trio.Event()
            self.started_at.setdefault(name, []).append(trio.current_time())
            self.send.send_nowait(f"start {name}")
            try:
                task_status.started()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_wait_then_cancel, finish, nursery.cancel_scope)
                    await crash.wait()
                    raise RuntimeError(f"{name} crashed")
            finally:
                self.send.send_nowait(f"stop {name}")

        return ChildSpec(name, start, restart)

    async def expect(self, *events: str) -> None:
        with trio.fail_after(60):
            got = [await self.receive.receive() for _ in events]
        assert got == list(events)

    def quiet(self) -> None:
        with pytest.raises(trio.WouldBlock):
            self.receive.receive_nowait()


async def _wait_then_cancel(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()  # the child returns normally


@asynccontextmanager
async def supervised(supervisor: Supervisor) -> AsyncIterator[Supervisor]:
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        yield supervisor
        nursery.cancel_scope.cancel()


def _abc(children: Children, **restart: Restart) -> list[ChildSpec]:
    return [children.spec(n, restart.get(n, Restart.PERMANENT)) for n in "abc"]


async def test_children_start_in_order_and_stop_in_reverse(autojump_clock: trio.abc.Clock) -> None:
    children = Children()
    async with supervised(Supervisor("sup", _abc(children))):
        await children.expect("start a", "start b", "start c")
    await children.expect("stop c", "stop b", "stop a")


async def test_one_for_one_restarts_only_the_child_that_failed(
    autojump_clock: trio.abc.Clock, logs
) -> None:
    children = Children()
    async with supervised(Supervisor("sup", _abc(children))) as sup:
        await children.expect("start a", "start b", "start c")
        children.crash["b"].set()
        await children.expect("stop b", "start b")
        assert sup.restarts == {"a": 0, "b": 1, "c": 0}
    [line] = logs.of_type("actorctl:supervisor:restart")
    assert (line["child"], line["count"]) == ("b", 1)
    assert "b crashed" in line["reason"]


async def test_one_for_all_stops_the_others_in_reverse_and_restarts_all_in_order(
    autojump_clock: trio.abc.Clock,
) -> None:
    children = Children()
    async with supervised(Supervisor("sup", _abc(children), strategy=Strategy.ONE_FOR_ALL)):
        await children.expect("start a", "start b", "start c")
        children.crash["b"].set()
        await children.expect("stop b", "stop c", "stop a", "start a", "start b", "start c")


async def test_rest_for_one_restarts_the_child_and_those_started_after_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    children = Children()
    async with supervised(Supervisor("sup", _abc(children), strategy=Strategy.REST_FOR_ONE)):
        await children.expect("start a", "start b", "start c")
        children.crash["b"].set()
        await children.expect("stop b", "stop c", "start b", "start c")
        children.quiet()  # a was left alone


async def test_a_transient_child_is_restarted_only_when_it_fails(
    autojump_clock: trio.abc.Clock,
) -> None:
    children = Children()
    specs = _abc(children, b=Restart.TRANSIENT)
    async with supervised(Supervisor("sup", specs)) as sup:
        await children.expect("start a", "start b", "start c")
        children.crash["b"].set()
        await children.expect("stop b", "start b")
        children.finish["b"].set()  # a normal exit
        await children.expect("stop b")
        await trio.sleep(60)
        children.quiet()
        assert sup.restarts["b"] == 1


async def test_a_temporary_child_is_never_restarted(autojump_clock: trio.abc.Clock) -> None:
    children = Children()
    specs = _abc(children, b=Restart.TEMPORARY)
    async with supervised(Supervisor("sup", specs)) as sup:
        await children.expect("start a", "start b", "start c")
        children.crash["b"].set()
        await children.expect("stop b")
        await trio.sleep(60)
        children.quiet()
        assert sup.restarts["b"] == 0


async def test_restarts_back_off_exponentially(autojump_clock: trio.abc.Clock) -> None:
    children = Children()
    sup = Supervisor("sup", [children.spec("a")], max_restarts=5, within=100, backoff=1.0)
    async with supervised(sup):
        await children.expect("start a")
        for _ in range(3):
            children.crash["a"].set()
            await children.expect("stop a", "start a")
    starts = children.started_at["a"]
    gaps = [round(later - earlier, 3) for earlier, later in itertools.pairwise(starts)]
    assert gaps == [1.0, 2.0, 4.0]


async def test_exceeding_the_intensity_stops_children_in_reverse_and_fails_to_the_parent(
    autojump_clock: trio.abc.Clock, logs
) -> None:
    children = Children()
    sup = Supervisor("sup", _abc(children), max_restarts=2, within=10.0)
    gave_up = pytest.RaisesExc(SupervisorGaveUp, match=r"more than 2 restarts within 10 s")
    with pytest.RaisesGroup(gave_up):
        async with trio.open_nursery() as nursery:
            await nursery.start(sup.run)
            await children.expect("start a", "start b", "start c")
            for _ in range(2):
                children.crash["a"].set()
                await children.expect("stop a", "start a")
            children.crash["a"].set()
            await children.expect("stop a", "stop c", "stop b")
    assert logs.of_type("actorctl:supervisor:gave-up")


async def test_restarts_outside_the_period_do_not_add_up(autojump_clock: trio.abc.Clock) -> None:
    children = Children()
    sup = Supervisor("sup", [children.spec("a")], max_restarts=1, within=10.0)
    async with supervised(sup):
        await children.expect("start a")
        for _ in range(3):
            children.crash["a"].set()
            await children.expect("stop a", "start a")
            await trio.sleep(11)  # the next failure falls outside the period
    assert sup.restarts["a"] == 3


async def test_a_supervisor_that_gives_up_is_restarted_by_its_parent(
    autojump_clock: trio.abc.Clock,
) -> None:
    children = Children()
    inner = Supervisor("inner", [children.spec("x"), children.spec("y")], max_restarts=0)
    outer = Supervisor(
        "outer", [ChildSpec("inner", inner.run), children.spec("z")], max_restarts=3, within=60
    )
    async with supervised(outer):
        await children.expect("start x", "start y", "start z")
        children.crash["x"].set()  # inner may not restart at all: it gives up
        await children.expect("stop x", "stop y", "start x", "start y")
        assert outer.restarts == {"inner": 1, "z": 0}


def test_child_names_must_be_unique() -> None:
    async def start(*, task_status: trio.TaskStatus[None]) -> None:
        task_status.started()

    with pytest.raises(ValueError, match="unique"):
        Supervisor("sup", [ChildSpec("a", start), ChildSpec("a", start)])


class Fragile(Actor):
    """Crashes (outside any handler) when told to explode."""

    def __init__(self) -> None:
        self.starts = 0

    async def on_start(self) -> None:
        self.starts += 1

    def unhandled(self, envelope: Envelope) -> Outcome | None:
        if envelope.subject == "explode":
            raise RuntimeError("boom outside a handler")
        return None

    @handler
    async def ping(self) -> str:
        return f"pong {self.starts}"


async def test_an_actor_that_crashes_is_restarted_by_its_node(logs) -> None:
    fragile = Fragile()
    async with node_pair([fragile]) as (server, client):
        ref = client.ref(server.address_of("fragile"))
        with trio.fail_after(10):
            assert await ref.ask("ping") == "pong 1"
            # When the actor crashes while handling a message
            with pytest.raises(Modified) as caught:
                await ref.deliver("explode")
            # Then that message goes back to its sender, marked as the one the
            # actor crashed on (not sent again by a tell: it could crash it again),
            # the actor is started again, and it serves the next message
            assert await ref.ask("ping") == "pong 2"
    assert caught.value.condition == "actorctl:actor-crashed"
    assert "boom outside a handler" in caught.value.description
    [restart] = logs.of_type("actorctl:supervisor:restart")
    assert restart["supervisor"] == "server/actors"
    assert restart["child"] == "fragile"
    assert "boom outside a handler" in restart["reason"]
