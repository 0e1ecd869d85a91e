"""Idle actors cost no task: an actor's task starts with its first message and
ends once its mailbox has stayed empty for IDLE_LINGER seconds."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from actorctl import Actor, ActorctlError, handler, open_node
from actorctl.actors import ActorCell, Address
from actorctl.actors._turns import IDLE_LINGER
from actorctl.mailbox import KIND_COMMAND, Envelope, Outcome
from actorctl.supervision import ChildSpec, Restart, Supervisor
from tests.support.harness import Logs


class Counter(Actor):
    def __init__(self) -> None:
        self.seen: list[int] = []

    @handler
    async def count(self, n: int) -> None:
        self.seen.append(n)


def _message(n: int, subject: str) -> Envelope:
    return Envelope(
        message_id=f"m-{n}",
        to="actor",
        subject=subject,
        body=[[n], {}],
        kind=KIND_COMMAND,
        creation_time=1.0,
    )


async def test_an_actor_gets_a_task_for_its_messages_and_none_while_idle(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Given an actor activated with no message yet
    async with open_node("host", host=None, insecure=True) as node:
        actor = Counter()
        cell = ActorCell(actor, Address("127.0.0.1", 1, "counter", "amqp"), node.outbox)
        ended: list[BaseException | None] = []
        done = trio.Event()

        def on_end(error: BaseException | None) -> None:
            ended.append(error)
            done.set()

        async with trio.open_nursery() as nursery:
            await cell.activate(nursery, on_end)
            await trio.testing.wait_all_tasks_blocked()
            assert len(nursery.child_tasks) == 0

            # When a message arrives, a task handles it
            cell.mailbox.put_nowait(_message(1, "count"), None)
            await trio.testing.wait_all_tasks_blocked()
            assert actor.seen == [1]
            assert len(nursery.child_tasks) == 2  # the turn and its idle timer

            # and once the mailbox has been empty for IDLE_LINGER, the task is gone
            await trio.sleep(IDLE_LINGER * 3)
            assert len(nursery.child_tasks) == 0

            # Then the next message starts a task again, and nothing was lost
            cell.mailbox.put_nowait(_message(2, "count"), None)
            await trio.testing.wait_all_tasks_blocked()
            assert actor.seen == [1, 2]

            # and closing the mailbox ends the actor normally
            cell.stop()
            with trio.fail_after(5):
                await done.wait()
            assert ended == [None]
            assert cell.state == "stopped"


async def test_a_node_hosting_many_idle_actors_runs_no_task_per_actor() -> None:
    # Given a node hosting 2,000 idle actors
    before = trio.lowlevel.current_statistics().tasks_living
    actors = {f"idle-{i}": Counter for i in range(2000)}
    with trio.fail_after(30):
        async with open_node("many", actors, insecure=True) as node:
            # Then it runs a handful of tasks, not one per actor
            await trio.testing.wait_all_tasks_blocked()
            living = trio.lowlevel.current_statistics().tasks_living - before
            # (and its own agents: _node, _deadletters)
            assert sorted(set(node.cells) - set(actors)) == ["_deadletters", "_node"]
            assert living < 50, living
            # and each actor still answers
            ref = node.ref(node.address_of("idle-1999"))
            await ref.deliver("count", 7)
            assert node.cells["idle-1999"].actor.seen == [7]  # type: ignore[attr-defined]


class Slow(Actor):
    mailbox_capacity = 2

    @handler
    async def wait(self, n: int) -> None:
        await trio.sleep_forever()

    async def handle_unmatched(self, envelope: Envelope) -> None:
        raise RuntimeError("crash outside any handler")


async def test_a_message_cancelled_by_a_supervisor_stopping_its_actor_is_released(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Given an actor in the middle of a message, under a supervisor
    async with open_node("host", host=None, insecure=True) as node:
        cell = ActorCell(Slow(), Address("127.0.0.1", 1, "slow", "amqp"), node.outbox, factory=Slow)
        supervisor = Supervisor("s", [ChildSpec("slow", cell.run, activation=cell)])
        outcomes: list[Outcome] = []
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run)
            cell.mailbox.put_nowait(_message(1, "wait"), outcomes.append)
            await trio.testing.wait_all_tasks_blocked()
            # When the supervisor terminates it and starts it again
            await supervisor.terminate_child("slow")
            await supervisor.restart_child("slow")
            # Then the sender was told (released: it may send it again) and the
            # mailbox slot is free, not held by a delivery nobody will settle
            assert [o.state for o in outcomes] == ["released"]
            assert cell.mailbox.statistics().depth == 0
            nursery.cancel_scope.cancel()


async def test_an_actor_that_crashed_for_good_refuses_new_messages(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Given a temporary actor (never restarted) that crashes
    async with open_node("host", host=None, insecure=True) as node:
        cell = ActorCell(Slow(), Address("127.0.0.1", 1, "slow", "amqp"), node.outbox, factory=Slow)
        child = ChildSpec("slow", cell.run, Restart.TEMPORARY, activation=cell)
        supervisor = Supervisor("s", [child])
        outcomes: list[Outcome] = []
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run)
            cell.mailbox.put_nowait(_message(1, "nope"), outcomes.append)
            await trio.testing.wait_all_tasks_blocked()
            # Then what it crashed on went back to its sender (modified, named
            # as the crash's: not to be sent again), its mailbox is closed (a
            # sender is refused at once instead of waiting forever)
            assert [(o.state, o.condition) for o in outcomes] == [
                ("modified", "actorctl:actor-crashed")
            ]
            assert cell.mailbox.closed
            assert cell.state == "stopped"
            with pytest.raises(trio.ClosedResourceError):
                cell.mailbox.put_nowait(_message(2, "wait"), outcomes.append)
            nursery.cancel_scope.cancel()


class FailsToStop(Actor):
    @handler
    async def quit(self) -> None:
        self.stop()

    async def on_stop(self) -> None:
        raise RuntimeError("on_stop failed")


class Pinged(Actor):
    @handler
    async def ping(self) -> str:
        return "pong"


async def test_an_on_stop_that_raises_fails_only_its_own_actor(logs: Logs) -> None:
    # Given a node with an actor whose on_stop raises, beside another actor
    with trio.fail_after(10):
        async with open_node("n", {"bad": FailsToStop, "good": Pinged}, insecure=True) as node:
            # When it stops itself
            await node.ref(node.address_of("bad")).ask("quit")
            # Then the failure is logged, the node and the other actor carry on
            assert await node.ref(node.address_of("good")).ask("ping") == "pong"
            assert await node.ref(node.address_of("good")).ask("ping") == "pong"
    # (it counts as a failure of that actor: restarted, it fails again when the
    # node stops)
    failed = logs.of_type("actorctl:actor:on-stop-failed")
    assert failed
    assert {m["actor"] for m in failed} == {"bad"}


class Ticker(Actor):
    """Runs a task of its own from on_start; ``boom`` makes that task raise."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.boom = trio.Event()

    async def on_start(self) -> None:
        self.log.append("start")
        self.start_soon(self._tick)

    async def _tick(self) -> None:
        try:
            await self.boom.wait()
        finally:
            self.log.append("tick ended")
        raise RuntimeError("the timer broke")

    async def on_stop(self) -> None:
        self.log.append("stop")

    @handler
    async def explode(self, n: int) -> None:
        self.boom.set()


async def test_a_task_an_actor_starts_ends_before_its_on_stop(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Given an actor that started a task of its own in on_start
    async with open_node("host", host=None, insecure=True) as node:
        log: list[str] = []
        cell = ActorCell(Ticker(log), Address("127.0.0.1", 1, "t", "amqp"), node.outbox)
        async with trio.open_nursery() as nursery:
            await cell.activate(nursery, lambda error: None)
            await trio.testing.wait_all_tasks_blocked()
            assert len(nursery.child_tasks) == 1  # its task, and no turn
            # When its supervisor stops it
            await cell.deactivate()
            # Then its task was cancelled, and gone before on_stop ran
            assert log == ["start", "tick ended", "stop"]
            assert len(nursery.child_tasks) == 0
            # and a stopped actor starts no task
            with pytest.raises(ActorctlError, match="not running"):
                cell.start_soon(trio.sleep_forever)


async def test_a_task_an_actor_started_that_raises_crashes_the_actor(
    autojump_clock: trio.abc.Clock, logs: Logs
) -> None:
    # Given a supervised actor whose on_start starts a task
    async with open_node("host", host=None, insecure=True) as node:
        log: list[str] = []
        cell = ActorCell(
            Ticker(log), Address("127.0.0.1", 1, "t", "amqp"), node.outbox,
            factory=lambda: Ticker(log),
        )  # fmt: skip
        supervisor = Supervisor("s", [ChildSpec("t", cell.run, activation=cell)])
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run)
            # When that task raises
            cell.mailbox.put_nowait(_message(1, "explode"), None)
            await trio.sleep(1)  # the clock jumps: past the supervisor's restart backoff
            # Then the actor crashed (logged) and its supervisor started it
            # again: a fresh instance, with one task of its own again
            assert log == ["start", "tick ended", "stop", "start"]
            crashed = logs.of_type("actorctl:actor:crashed")
            assert [m["error"] for m in crashed] == ["the timer broke"]
            assert cell.state == "running"
            assert cell.background_tasks == 1
            nursery.cancel_scope.cancel()


async def test_an_idle_actor_makes_its_counters_and_dedup_window_at_its_first_message(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Given an actor activated with no message yet, beside one never activated
    async with open_node("host", host=None, insecure=True) as node:
        cell = ActorCell(
            Counter(), Address("127.0.0.1", 1, "counter", "amqp"), node.outbox, factory=Counter
        )
        other = ActorCell(Counter(), Address("127.0.0.1", 1, "other", "amqp"), node.outbox)
        async with trio.open_nursery() as nursery:
            await cell.activate(nursery, lambda error: None)
            # Then both read the same counters, all zero, and keep no reply
            assert cell.counters is other.counters
            assert cell.counters.handled == 0
            assert cell.kept_reply_bytes == 0
            # When a message arrives
            cell.mailbox.put_nowait(_message(1, "count"), None)
            await trio.testing.wait_all_tasks_blocked()
            # Then it counts on counters of its own; the idle one's stay at zero
            assert cell.counters is not other.counters
            assert (cell.counters.handled, other.counters.handled) == (1, 0)
            # And its next incarnation keeps them, and its dedup window: the
            # same message again is answered as a duplicate, not run
            await cell.deactivate()
            await cell.activate(nursery, lambda error: None)
            assert cell.starts == 2
            cell.mailbox.put_nowait(_message(1, "count"), None)
            await trio.testing.wait_all_tasks_blocked()
            assert (cell.counters.handled, cell.counters.duplicates) == (1, 1)
            assert isinstance(cell.actor, Counter)
            assert cell.actor.seen == []  # a fresh instance, and the duplicate did not run
            nursery.cancel_scope.cancel()
