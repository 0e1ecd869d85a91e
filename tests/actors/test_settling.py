"""A handler that hands its last wait to its turn's settler (``settle_after``,
``actors/_settling.py``): its message is settled only once that wait has
returned, no runner is held meanwhile, one wait serves a batch, a failed wait
has its fallback run first, and a turn cancelled meanwhile puts the messages
back in the mailbox (they run again, and are settled once)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import ClassVar

import trio
import trio.testing

from actorctl import Actor, handler, open_node
from actorctl.actors import ActorCell, Address, Outbox, settle_after
from actorctl.mailbox import KIND_COMMAND, Envelope, Outcome
from actorctl.supervision import ChildSpec, Supervisor


class Commit:
    """What the handlers hand over: a wait that returns once ``done`` is set
    (or raises ``error``), counted, and the fallbacks it had run."""

    def __init__(self) -> None:
        self.done = trio.Event()
        self.waits = 0
        self.error: Exception | None = None
        self.events: list[str] = []  # waits, fallbacks and settlements, in order

    async def wait(self) -> None:
        self.waits += 1
        self.events.append("wait")
        await self.done.wait()
        if self.error is not None:
            raise self.error

    def failed_for(self, n: int) -> Callable[[Exception], Awaitable[None]]:
        async def failed(exc: Exception) -> None:
            self.events.append(f"failed {n}: {exc}")

        return failed


class Begun:
    """The messages begun, in order, by every incarnation; waits on them."""

    def __init__(self) -> None:
        self.order: list[int] = []
        self._watch: tuple[Callable[[], bool], trio.Event] | None = None

    def add(self, n: int) -> None:
        self.order.append(n)
        if self._watch is not None and self._watch[0]():
            self._watch[1].set()

    async def wait_until(self, done: Callable[[], bool]) -> None:
        if not done():
            self._watch = (done, trio.Event())
            await self._watch[1].wait()


class Committing(Actor):
    """Records each message as begun, then hands the settlement's wait over
    (or awaits it itself, where there is no settler)."""

    concurrency: ClassVar[int] = 4
    mailbox_capacity: ClassVar[int] = 64

    def __init__(self, commit: Commit, begun: Begun, handed: list[bool]) -> None:
        self.commit = commit
        self.begun = begun
        self.handed = handed

    @handler
    async def work(self, n: int) -> int:
        self.begun.add(n)
        commit = self.commit
        handed = settle_after(commit.wait, commit.failed_for(n))
        self.handed.append(handed)
        if not handed:
            await commit.wait()
        return n

    async def handle_unmatched(self, envelope: Envelope) -> None:
        await trio.lowlevel.checkpoint()
        raise RuntimeError("crash outside any handler")


class One(Committing):
    concurrency: ClassVar[int] = 1


def _message(n: int, subject: str = "work") -> Envelope:
    return Envelope(
        message_id=f"m-{n}",
        to="committing",
        subject=subject,
        body=[[n], {}],
        kind=KIND_COMMAND,
        creation_time=1.0,
    )


def _cell(
    commit: Commit,
    begun: Begun,
    handed: list[bool],
    outbox: Outbox,
    kind: type[Committing] = Committing,
) -> ActorCell:
    return ActorCell(
        kind(commit, begun, handed),
        Address("127.0.0.1", 1, "committing", "amqp"),
        outbox,
        factory=lambda: kind(commit, begun, handed),
    )


async def test_a_handed_wait_holds_the_settlement_and_no_runner() -> None:
    commit, begun = Commit(), Begun()
    handed: list[bool] = []
    outcomes: list[tuple[int, Outcome]] = []

    def settled(n: int) -> Callable[[Outcome], None]:
        def record(outcome: Outcome) -> None:
            outcomes.append((n, outcome))
            commit.events.append(f"settled {n}")

        return record

    async with open_node("host", host=None, insecure=True) as node:
        cell = _cell(commit, begun, handed, node.outbox)
        async with trio.open_nursery() as nursery:
            await nursery.start(cell.run)
            # Given ten messages at once, more than its concurrency (4)
            for n in range(10):
                cell.mailbox.put_nowait(_message(n), settled(n))
            await trio.testing.wait_all_tasks_blocked()
            # Then every one was begun and handed its wait over: none holds a
            # runner while the commit is awaited, and none is settled yet
            assert begun.order == list(range(10))
            assert handed == [True] * 10
            assert outcomes == []
            assert cell.mailbox.pending == 0
            # and the settler awaits the one wait once for the batch
            assert commit.waits == 1
            # When the wait returns, then each is settled, accepted, in order
            commit.done.set()
            with trio.fail_after(10):
                await cell.mailbox.wait_settled()
            assert [(n, o.state) for n, o in outcomes] == [(n, "accepted") for n in range(10)]
            assert cell.counters.handled == 10
            nursery.cancel_scope.cancel()


async def test_a_failed_wait_has_its_fallbacks_run_before_the_settlements() -> None:
    commit, begun = Commit(), Begun()
    handed: list[bool] = []
    commit.error = RuntimeError("refused")
    outcomes: list[Outcome] = []

    def settled(n: int) -> Callable[[Outcome], None]:
        def record(outcome: Outcome) -> None:
            outcomes.append(outcome)
            commit.events.append(f"settled {n}")

        return record

    async with open_node("host", host=None, insecure=True) as node:
        cell = _cell(commit, begun, handed, node.outbox)
        async with trio.open_nursery() as nursery:
            await nursery.start(cell.run)
            # Given two messages whose handed wait fails
            for n in range(2):
                cell.mailbox.put_nowait(_message(n), settled(n))
            commit.done.set()
            with trio.fail_after(10):
                await cell.mailbox.wait_settled()
            # Then each one's fallback ran with the error, then each was settled
            assert commit.events == [
                "wait",
                "failed 0: refused",
                "failed 1: refused",
                "settled 0",
                "settled 1",
            ]
            assert [o.state for o in outcomes] == ["accepted", "accepted"]
            nursery.cancel_scope.cancel()


async def test_a_crash_while_the_wait_is_awaited_runs_those_messages_again_settled_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    commit, begun = Commit(), Begun()
    handed: list[bool] = []
    outcomes: dict[str, list[str]] = {}

    def settled(n: int) -> Callable[[Outcome], None]:
        return lambda outcome: outcomes.setdefault(f"m-{n}", []).append(outcome.state)

    async with open_node("host", host=None, insecure=True) as node:
        cell = _cell(commit, begun, handed, node.outbox)
        supervisor = Supervisor("s", [ChildSpec("committing", cell.run, activation=cell)])
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run)
            # Given two messages handed to the settler, then one that crashes
            # the actor, then one more
            cell.mailbox.put_nowait(_message(0), settled(0))
            cell.mailbox.put_nowait(_message(1), settled(1))
            cell.mailbox.put_nowait(_message(2, "boom"), settled(2))
            cell.mailbox.put_nowait(_message(3), settled(3))
            # When the actor has started again and begun them all again
            with trio.fail_after(10):
                await begun.wait_until(lambda: cell.starts == 2 and begun.order[-3:] == [0, 1, 3])
            await trio.testing.wait_all_tasks_blocked()
            # Then none was settled before its wait returned: the two in the
            # settler's hands went back to the mailbox, and run again in order
            assert "m-0" not in outcomes
            assert "m-1" not in outcomes
            assert outcomes["m-2"] == ["modified"]
            # When the wait returns, then each is settled once, accepted
            commit.done.set()
            with trio.fail_after(10):
                await cell.mailbox.wait_settled()
            assert {k: v for k, v in outcomes.items() if k != "m-2"} == {
                f"m-{n}": ["accepted"] for n in (0, 1, 3)
            }
            assert begun.order[-3:] == [0, 1, 3]
            assert begun.order[:2] == [0, 1]  # (the first incarnation's)
            nursery.cancel_scope.cancel()


async def test_an_actor_without_runners_has_no_settler_and_awaits_it_itself() -> None:
    commit, begun = Commit(), Begun()
    handed: list[bool] = []
    outcomes: list[Outcome] = []
    commit.done.set()
    async with open_node("host", host=None, insecure=True) as node:
        cell = _cell(commit, begun, handed, node.outbox, One)
        async with trio.open_nursery() as nursery:
            await nursery.start(cell.run)
            for n in range(3):
                cell.mailbox.put_nowait(_message(n), outcomes.append)
            with trio.fail_after(10):
                await cell.mailbox.wait_settled()
            # settle_after said no: each handler awaited its wait itself
            assert handed == [False] * 3
            assert commit.waits == 3
            assert [o.state for o in outcomes] == ["accepted"] * 3
            nursery.cancel_scope.cancel()
