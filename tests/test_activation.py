"""Idle actors cost no task: an actor's task starts with its first message and
ends once its mailbox has stayed empty for IDLE_LINGER seconds."""

from __future__ import annotations

import trio
import trio.testing

from actorctl import Actor, handler, open_node
from actorctl.actors import ActorCell, Address
from actorctl.actors._cell import IDLE_LINGER
from actorctl.mailbox import KIND_COMMAND, Envelope


class Counter(Actor):
    def __init__(self) -> None:
        self.seen: list[int] = []

    @handler
    async def count(self, n: int) -> None:
        self.seen.append(n)


def _tell(n: int) -> Envelope:
    return Envelope(
        message_id=f"m-{n}",
        to="counter",
        subject="count",
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
            cell.mailbox.put_nowait(_tell(1), None)
            await trio.testing.wait_all_tasks_blocked()
            assert actor.seen == [1]
            assert len(nursery.child_tasks) == 2  # the turn and its idle timer

            # and once the mailbox has been empty for IDLE_LINGER, the task is gone
            await trio.sleep(IDLE_LINGER * 3)
            assert len(nursery.child_tasks) == 0

            # Then the next message starts a task again, and nothing was lost
            cell.mailbox.put_nowait(_tell(2), None)
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
            assert len(node.cells) == 2001  # and its own agent
            assert living < 50, living
            # and each actor still answers
            ref = node.ref(node.address_of("idle-1999"))
            await ref.deliver("count", 7)
            assert node.cells["idle-1999"].actor.seen == [7]  # type: ignore[attr-defined]
