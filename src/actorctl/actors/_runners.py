"""How a turn of an actor whose ``concurrency`` is above 1 runs its messages:
runners.

A runner is a task of the turn that takes a queued message and handles it,
then takes the next, until the mailbox is empty; then it waits, idle, until
the turn's task wakes it for a message that arrived (or the mailbox closed:
then it ends). The turn's own task takes no message: it waits for arrivals,
and wakes idle runners, or starts new ones up to the actor's concurrency,
for the messages queued that the busy runners will not take soon: what
arrived goes to one runner first, which takes, in one step, every message
whose handler does not wait (one whose settlement waits for a commit hands
that wait to the turn's settler, ``_settling.py``); once it has begun (a
pass of the scheduler), those it left get a runner each.

A runner takes a message at the moment it runs, never one handed to it while
it waited: no message waits in a task that a stop would not release, and
messages begin in the order they arrived. Each handler runs, up to its first
checkpoint, before the next message is taken, whichever runner takes it (trio
runs the tasks it wakes in no set order: a message handed to each of several
tasks would begin out of turn). A busy actor pays no task switch per message
for this: a runner goes from one message to the next in the same step, and a
runner woken costs no more than a task would to start.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, final

import trio

from ..mailbox import Inbound, Mailbox

__all__ = ["YIELD_EVERY", "Runners"]

#: Messages a runner takes between two checkpoints at most, when the handlers
#: do not wait (the mailbox is bounded: nobody starves for long, and the node's
#: writer settles a batch of them in one write).
YIELD_EVERY: Final = 16


@final
class Runners:
    """The runners of one turn (see the module docstring).

    Args:
        mailbox: the actor's mailbox (how many are queued; whether it closed).
        concurrency: the most runners at once.
        take: the next queued message, or None when none is (or it closed).
        handle: handles one message.
        wait_arrival: waits for the next message to arrive (or the mailbox to
            close), taking none.
    """

    __slots__ = (
        "_concurrency",
        "_handle",
        "_has_room",
        "_idle",
        "_idled",
        "_mailbox",
        "_running",
        "_starting",
        "_take",
        "_takes",
        "_wait_arrival",
        "_yielding",
    )

    def __init__(
        self,
        mailbox: Mailbox,
        concurrency: int,
        take: Callable[[], Inbound | None],
        handle: Callable[[Inbound], Awaitable[None]],
        wait_arrival: Callable[[], Awaitable[None]],
    ) -> None:
        self._mailbox = mailbox
        self._concurrency = concurrency
        self._take = take
        self._handle = handle
        self._wait_arrival = wait_arrival
        self._running = 0  # runners alive: busy, idle, or not run yet
        self._starting = 0  # runners started or woken that have not run yet
        # Set when a runner ends or goes idle (the turn's task waits on it
        # while every runner is busy).
        self._has_room: trio.Event | None = None
        self._idle: list[trio.Event] = []  # idle runners, each woken by its event
        self._idled = 0  # times a runner found the mailbox empty, and went idle
        self._takes = 0  # messages the runners asked for (a checkpoint every YIELD_EVERY)
        self._yielding = 0  # runners at that checkpoint now

    async def drain(self) -> None:
        """Run messages until the mailbox closes; return once the runners
        have finished those they took.

        Raises:
            Exception: what a handler raised (the others are cancelled).
        """
        mailbox = self._mailbox
        idle = self._idle
        one = True  # what arrived goes to one runner first
        async with trio.open_nursery() as nursery:
            while True:
                # Messages queued that the runners started or woken so far
                # will not take at once: one runner first (it takes, in one
                # step, all those whose handlers do not wait), then a runner
                # each, idle ones first.
                spare = mailbox.pending - self._starting
                if spare > 0 and (idle or self._running < self._concurrency):
                    if one:
                        idled = self._idled
                        self._supply(nursery, 1)
                        while self._starting:  # until it has begun, and taken what it could
                            await trio.lowlevel.checkpoint()
                        # A runner found the mailbox empty since (or is at its
                        # checkpoint between messages): what is queued now goes
                        # to one runner first again. Else that one waits in a
                        # handler: the rest get a runner each.
                        one = self._idled != idled or self._yielding > 0
                    else:
                        self._supply(nursery, spare)
                    continue
                if mailbox.closed:
                    while idle:
                        self._starting += 1
                        idle.pop().set()  # to see it closed, and end
                    break
                if self._running >= self._concurrency and not idle:
                    # Every runner busy: they take what is queued as they finish.
                    self._has_room = room = trio.Event()
                    await room.wait()
                    continue
                await self._wait_arrival()
                one = True

    def _supply(self, nursery: trio.Nursery, spare: int) -> None:
        """A runner for each of ``spare`` messages, as far as there are: idle
        ones woken first, then new ones up to the concurrency."""
        idle = self._idle
        while spare > 0 and idle:
            self._starting += 1
            spare -= 1
            idle.pop().set()
        for _ in range(min(spare, self._concurrency - self._running)):
            self._running += 1
            self._starting += 1
            nursery.start_soon(self._runner)

    async def _runner(self) -> None:
        self._starting -= 1
        try:
            while True:
                self._takes += 1
                if not self._takes % YIELD_EVERY:
                    # Now and then between messages (never between taking one
                    # and beginning it): the node's other tasks run meanwhile.
                    self._yielding += 1
                    try:
                        await trio.lowlevel.checkpoint()
                    finally:
                        self._yielding -= 1
                inbound = self._take()
                if inbound is not None:
                    await self._handle(inbound)
                elif self._mailbox.closed:
                    return
                else:
                    await self._idle_until_woken()
        finally:
            self._running -= 1
            self._room()

    async def _idle_until_woken(self) -> None:
        """Wait, idle, until the turn's task wakes this runner (as if started)."""
        woken = trio.Event()
        self._idled += 1
        self._idle.append(woken)
        self._room()
        await woken.wait()
        self._starting -= 1

    def _room(self) -> None:
        room, self._has_room = self._has_room, None
        if room is not None:
            room.set()
