"""An actor whose ``concurrency`` is above 1: its runners (``actors/_runners.py``)
begin its messages in the order they arrived, at most ``concurrency`` at once,
take none they cannot begin, and keep the stop and crash guarantees."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import trio
import trio.testing

from actorctl import Actor, handler, open_node
from actorctl.actors import ActorCell, Address, Outbox
from actorctl.mailbox import KIND_COMMAND, Envelope, Outcome
from actorctl.supervision import ChildSpec, Supervisor

CONCURRENCY = 4


class Record:
    """What every incarnation of a ``Held`` actor did, in the order it did it."""

    def __init__(self) -> None:
        self.begun: list[int] = []
        self.done: list[int] = []
        self.running = 0
        self.most = 0
        self.go = trio.Event()
        self._watch: tuple[int, trio.Event] | None = None

    def begin(self, n: int) -> None:
        self.begun.append(n)
        if self._watch is not None and len(self.begun) >= self._watch[0]:
            self._watch[1].set()

    async def wait_begun(self, count: int) -> None:
        """Wait until ``count`` messages were begun, in all."""
        if len(self.begun) < count:
            self._watch = (count, trio.Event())
            await self._watch[1].wait()


class Held(Actor):
    """Each message is begun (recorded before its first checkpoint), then
    waits until ``go`` is set."""

    concurrency: ClassVar[int] = CONCURRENCY
    mailbox_capacity: ClassVar[int] = 64

    def __init__(self, record: Record) -> None:
        self.record = record

    @handler
    async def work(self, n: int) -> None:
        record = self.record
        record.begin(n)
        record.running += 1
        record.most = max(record.most, record.running)
        try:
            await record.go.wait()
        finally:
            record.running -= 1
        record.done.append(n)

    async def handle_unmatched(self, envelope: Envelope) -> None:
        await trio.lowlevel.checkpoint()
        raise RuntimeError("crash outside any handler")


def _message(n: int, subject: str = "work") -> Envelope:
    return Envelope(
        message_id=f"m-{n}",
        to="held",
        subject=subject,
        body=[[n], {}],
        kind=KIND_COMMAND,
        creation_time=1.0,
    )


def _cell(record: Record, outbox: Outbox) -> ActorCell:
    return ActorCell(
        Held(record),
        Address("127.0.0.1", 1, "held", "amqp"),
        outbox,
        factory=lambda: Held(record),
    )


async def test_messages_begin_in_the_order_they_arrived_at_most_concurrency_at_once() -> None:
    record = Record()
    outcomes: list[Outcome] = []
    async with open_node("host", host=None, insecure=True) as node:
        cell = _cell(record, node.outbox)
        supervisor = Supervisor("s", [ChildSpec("held", cell.run, activation=cell)])
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run)
            # Given 40 messages that arrive at once
            for n in range(40):
                cell.mailbox.put_nowait(_message(n), outcomes.append)
            await trio.testing.wait_all_tasks_blocked()
            # Then as many begin as its concurrency, the first ones; the rest
            # stay in the mailbox (none is taken to wait in a task)
            assert record.begun == list(range(CONCURRENCY))
            assert cell.mailbox.pending == 40 - CONCURRENCY
            # When they may finish, then every one is begun in the order it
            # arrived, never more than its concurrency at once, each once
            record.go.set()
            with trio.fail_after(10):
                await cell.mailbox.wait_settled()
            assert record.begun == list(range(40))
            assert sorted(record.done) == list(range(40))
            assert record.most == CONCURRENCY
            assert {o.state for o in outcomes} == {"accepted"}
            nursery.cancel_scope.cancel()


async def test_a_stop_releases_what_is_queued_and_lets_what_runs_finish() -> None:
    record = Record()
    outcomes: dict[str, Outcome] = {}

    def settled(n: int) -> Callable[[Outcome], None]:
        return lambda outcome: outcomes.__setitem__(f"m-{n}", outcome)

    async with open_node("host", host=None, insecure=True) as node:
        cell = _cell(record, node.outbox)
        async with trio.open_nursery() as nursery:
            await nursery.start(cell.run)
            # Given every runner busy, and more messages queued
            for n in range(10):
                cell.mailbox.put_nowait(_message(n), settled(n))
            await trio.testing.wait_all_tasks_blocked()
            assert record.begun == list(range(CONCURRENCY))
            # When it is stopped, then the queued ones go back to their senders
            # at once, never begun
            cell.stop()
            queued = {f"m-{n}" for n in range(CONCURRENCY, 10)}
            assert {k for k, o in outcomes.items() if o.state == "released"} == queued
            # and those running finish, accepted, and the actor ends normally
            record.go.set()
            with trio.fail_after(10):
                await cell.mailbox.wait_settled()
            assert record.begun == list(range(CONCURRENCY))
            assert [outcomes[f"m-{n}"].state for n in range(CONCURRENCY)] == ["accepted"] * 4
        assert cell.state == "stopped"


async def test_a_crash_releases_its_culprit_and_keeps_the_others_for_the_next_start(
    autojump_clock: trio.abc.Clock,
) -> None:
    record = Record()
    outcomes: dict[str, list[Outcome]] = {}

    def settled(n: int) -> Callable[[Outcome], None]:
        return lambda outcome: outcomes.setdefault(f"m-{n}", []).append(outcome)

    async with open_node("host", host=None, insecure=True) as node:
        cell = _cell(record, node.outbox)
        supervisor = Supervisor("s", [ChildSpec("held", cell.run, activation=cell)])
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run)
            # Given two messages being handled, then one that crashes the actor
            # outside any handler, then two more queued behind it
            cell.mailbox.put_nowait(_message(0), settled(0))
            cell.mailbox.put_nowait(_message(1), settled(1))
            cell.mailbox.put_nowait(_message(2, "boom"), settled(2))
            cell.mailbox.put_nowait(_message(3), settled(3))
            cell.mailbox.put_nowait(_message(4), settled(4))
            # (the first incarnation begins three; the next one, after the
            # supervisor's backoff, four)
            with trio.fail_after(10):
                await record.wait_begun(3 + 4)
            # Then the culprit went back to its sender, named as the crash's,
            # and the actor was started again
            assert [(o.state, o.condition) for o in outcomes["m-2"]] == [
                ("modified", "actorctl:actor-crashed")
            ]
            assert cell.starts == 2
            # When the fresh incarnation may finish, then every other message
            # is handled once, those cancelled mid-handling again from the
            # head of the mailbox, in their order
            record.go.set()
            with trio.fail_after(10):
                await cell.mailbox.wait_settled()
            assert sorted(record.done) == [0, 1, 3, 4]
            assert {k: [o.state for o in v] for k, v in outcomes.items() if k != "m-2"} == {
                f"m-{n}": ["accepted"] for n in (0, 1, 3, 4)
            }
            assert record.begun[-4:] == [0, 1, 3, 4]
            nursery.cancel_scope.cancel()


async def test_idle_runners_take_the_next_messages_and_a_stop_ends_them() -> None:
    record = Record()
    record.go.set()
    outcomes: list[Outcome] = []
    async with open_node("host", host=None, insecure=True) as node:
        cell = _cell(record, node.outbox)
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                await nursery.start(cell.run)
                # Given a burst handled, its runners left idle
                for n in range(10):
                    cell.mailbox.put_nowait(_message(n), outcomes.append)
                await cell.mailbox.wait_settled()
                await trio.testing.wait_all_tasks_blocked()
                # When more arrive, one alone then a burst, then the idle
                # runners take them, in their order
                cell.mailbox.put_nowait(_message(10), outcomes.append)
                await cell.mailbox.wait_settled()
                for n in range(11, 20):
                    cell.mailbox.put_nowait(_message(n), outcomes.append)
                await cell.mailbox.wait_settled()
                assert record.begun == list(range(20))
                assert [o.state for o in outcomes] == ["accepted"] * 20
                # And a stop ends the actor, its idle runners with it
                cell.stop()
    assert cell.state == "stopped"
