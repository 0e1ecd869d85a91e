"""Supervision trees users declare, under trio's autojump clock.

The trees run on a host without a network (the node's part is tested in
test_supervision_inbox.py): each actor says on a channel when an incarnation
starts and stops, and a test crashes one by putting a message in its mailbox
that it cannot survive. Restarted actors must be fresh instances.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from actorctl import (
    Actor,
    ActorSpec,
    Envelope,
    Outcome,
    Restart,
    Strategy,
    SupervisorGaveUp,
    SupervisorSpec,
    handler,
)
from actorctl.actors import ActorCell, Address
from actorctl.supervision._tree import TreeLevel

_incarnations = itertools.count(1)


class Probe(Actor):
    """Says when each incarnation starts and stops; crashes on "explode"."""

    def __init__(self, events: trio.MemorySendChannel[str], label: str) -> None:
        self.events = events
        self.label = label
        self.incarnation = next(_incarnations)
        self.bumps = 0

    async def on_start(self) -> None:
        self.events.send_nowait(f"start {self.label}")

    async def on_stop(self) -> None:
        self.events.send_nowait(f"stop {self.label}")

    def unhandled(self, envelope: Envelope) -> Outcome | None:
        raise RuntimeError(f"{self.label} exploded")

    @handler
    async def bump(self) -> int:
        self.bumps += 1
        return self.bumps


class Keeper(Probe):
    """A probe whose state survives a restart."""

    keeps_state = True


class FakeHost:
    """A node without a network: names, a stop event, and who is gone."""

    def __init__(self) -> None:
        self.cells: dict[str, ActorCell] = {}
        self._stopping = trio.Event()
        self.gone_log: list[tuple[str, str]] = []

    @property
    def stopping(self) -> trio.Event:
        return self._stopping

    def host(self, name: str, actor: Actor, factory: Callable[[], Actor] | None) -> ActorCell:
        assert name not in self.cells
        address = Address("127.0.0.1", 1, name, "amqp")
        self.cells[name] = ActorCell(actor, address, None, factory=factory)  # type: ignore[arg-type]
        return self.cells[name]

    def unhost(self, name: str) -> None:
        del self.cells[name]

    def gone(self, name: str, reason: str) -> None:
        self.gone_log.append((name, reason))

    def actor(self, name: str) -> Any:
        return self.cells[name].actor

    def crash(self, name: str) -> None:
        envelope = Envelope(
            message_id=f"crash-{name}", to=f"/{name}", subject="explode", body=[[], {}]
        )
        self.cells[name].mailbox.put_nowait(envelope, None)


class Events:
    def __init__(self) -> None:
        self.send, self.receive = trio.open_memory_channel[str](1000)

    def probe(self, label: str, cls: type[Probe] = Probe, **options: Any) -> ActorSpec:
        return ActorSpec(cls, (self.send, label), name=label, **options)

    async def expect(self, *events: str) -> None:
        with trio.fail_after(60):
            got = [await self.receive.receive() for _ in events]
        assert got == list(events)

    def quiet(self) -> None:
        with pytest.raises(trio.WouldBlock):
            self.receive.receive_nowait()


@asynccontextmanager
async def running(spec: SupervisorSpec) -> AsyncIterator[tuple[FakeHost, TreeLevel]]:
    host = FakeHost()
    root = TreeLevel("root", [spec], host, max_restarts=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(root.supervisor.run)
        yield host, root
        nursery.cancel_scope.cancel()


async def test_a_two_level_tree_starts_depth_first_in_order_and_stops_in_reverse(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Given a supervisor whose middle child is a supervisor of two actors
    events = Events()
    inner = SupervisorSpec("inner", [events.probe("b"), events.probe("c")])
    spec = SupervisorSpec("top", [events.probe("a"), inner, events.probe("d")])
    # When it runs, then everything starts depth first, in declaration order
    async with running(spec) as (host, root):
        await events.expect("start a", "start b", "start c", "start d")
        # And each supervisor is hosted as an actor too, and describes its tree
        assert set(host.cells) == {"top", "a", "inner", "b", "c", "d"}
        [top] = root.describe()
        assert [child["name"] for child in top["children"]] == ["a", "inner", "d"]
        assert [child["name"] for child in top["children"][1]["children"]] == ["b", "c"]
        assert top["children"][1]["kind"] == "supervisor"
        assert top["children"][0] == {
            "name": "a",
            "kind": "actor",
            "state": "running",
            "restarts": 0,
            "mailbox": {"depth": 0, "capacity": 100},
        }
    # And when it stops, everything stops in reverse order
    await events.expect("stop d", "stop c", "stop b", "stop a")


@pytest.mark.parametrize(
    ("strategy", "after_crash", "restarted"),
    [
        (Strategy.ONE_FOR_ONE, ["stop b", "start b"], {"b"}),
        (
            Strategy.ONE_FOR_ALL,
            ["stop b", "stop c", "stop a", "start a", "start b", "start c"],
            {"a", "b", "c"},
        ),
        (Strategy.REST_FOR_ONE, ["stop b", "stop c", "start b", "start c"], {"b", "c"}),
    ],
)
async def test_each_strategy_restarts_fresh_instances_in_order(
    autojump_clock: trio.abc.Clock,
    strategy: Strategy,
    after_crash: list[str],
    restarted: set[str],
) -> None:
    # Given three actors that each handled a message (state to lose)
    events = Events()
    spec = SupervisorSpec("sup", [events.probe(n) for n in "abc"], strategy=strategy)
    async with running(spec) as (host, _):
        await events.expect("start a", "start b", "start c")
        before = {name: host.actor(name) for name in "abc"}
        for actor in before.values():
            actor.bumps = 7
        # When b crashes
        host.crash("b")
        # Then the strategy's children stop in reverse and start in order
        await events.expect(*after_crash)
        events.quiet()
        # And each restarted child is a fresh instance, its state reset; the
        # others are the same instances as before
        for name in "abc":
            actor = host.actor(name)
            if name in restarted:
                assert actor is not before[name]
                assert actor.bumps == 0
                assert actor.incarnation > before[name].incarnation
            else:
                assert actor is before[name]
                assert actor.bumps == 7


async def test_an_actor_that_keeps_state_is_restarted_as_the_same_instance(
    autojump_clock: trio.abc.Clock,
) -> None:
    events = Events()
    spec = SupervisorSpec("sup", [events.probe("k", Keeper)])
    async with running(spec) as (host, _):
        await events.expect("start k")
        keeper = host.actor("k")
        keeper.bumps = 3
        host.crash("k")
        await events.expect("stop k", "start k")
        assert host.actor("k") is keeper
        assert keeper.bumps == 3


async def test_a_nested_supervisor_that_exceeds_its_intensity_escalates_to_its_parent(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Given an inner supervisor that may restart once, under a top one that may
    # restart it once, under a root that may restart nothing
    events = Events()
    inner = SupervisorSpec("inner", [events.probe("x"), events.probe("y")], max_restarts=1)
    spec = SupervisorSpec("top", [inner, events.probe("z")], max_restarts=1, within=60)
    host = FakeHost()
    root = TreeLevel("root", [spec], host, max_restarts=0)
    gave_up = pytest.RaisesExc(SupervisorGaveUp, match=r"'root' gave up.*top: SupervisorGaveUp")
    with pytest.RaisesGroup(gave_up):
        async with trio.open_nursery() as nursery:
            await nursery.start(root.supervisor.run)
            await events.expect("start x", "start y", "start z")
            # When x crashes once, inner restarts it
            host.crash("x")
            await events.expect("stop x", "start x")
            # When x crashes again, inner gives up: top restarts inner, fresh
            host.crash("x")
            await events.expect("stop x", "stop y", "start x", "start y")
            assert top_restarts(root) == {"inner": 1, "z": 0}
            # When it happens twice more, top gives up too, and so does the root
            host.crash("x")
            await events.expect("stop x", "start x")
            host.crash("x")
            await events.expect("stop x", "stop y", "stop z")
    # And whoever watched the actors heard they are gone, and why
    gone = dict(host.gone_log)
    assert "gave up" in gone["z"]
    assert "gave up" in gone["top"]


def top_restarts(root: TreeLevel) -> dict[str, int]:
    [top] = root.describe()
    return {child["name"]: child["restarts"] for child in top["children"]}


async def test_a_temporary_actor_that_crashes_is_gone_for_good(
    autojump_clock: trio.abc.Clock,
) -> None:
    events = Events()
    spec = SupervisorSpec("sup", [events.probe("t", restart=Restart.TEMPORARY), events.probe("u")])
    async with running(spec) as (host, root):
        await events.expect("start t", "start u")
        host.crash("t")
        await events.expect("stop t")
        await trio.sleep(60)  # virtual time (autojump): long past any backoff, nothing restarts
        events.quiet()
        [sup] = root.describe()
        assert sup["children"][0]["state"] == "stopped"
        assert host.gone_log == [("t", "RuntimeError: t exploded")]
