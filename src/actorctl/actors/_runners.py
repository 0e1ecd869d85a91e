"""How a turn of an actor whose ``concurrency`` is above 1 runs its messages:
runners.

A runner is a task of the turn that takes a queued message and handles it,
then takes the next, until the mailbox is empty; then it ends. The turn's own
task starts runners, up to the actor's concurrency, when messages are queued
that the runners already running will not take soon (they are busy), and
otherwise waits for the next arrival, taking none itself.

A runner takes a message at the moment it runs, never one handed to it while
it waited: no message waits in a task that a stop would not release, and
messages begin in the order they arrived. Each handler runs, up to its first
checkpoint, before the next message is taken, whichever runner takes it (trio
starts the tasks it wakes in no set order: a message handed to a waiting task
would begin out of turn). A busy actor pays no task switch per message for
this: a runner goes from one message to the next in the same step.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import final

import trio

from ..mailbox import Inbound, Mailbox

__all__ = ["Runners"]


@final
class Runners:
    """The runners of one turn (see the module docstring).

    Args:
        mailbox: the actor's mailbox (how many are queued; whether it closed).
        concurrency: the most runners at once.
        take: the next queued message, or None when none is (or it closed);
            it must not wait for one.
        handle: handles one message.
        wait_arrival: waits for the next message to arrive (or the mailbox to
            close), taking none.
    """

    __slots__ = (
        "_concurrency",
        "_handle",
        "_has_room",
        "_mailbox",
        "_running",
        "_starting",
        "_take",
        "_wait_arrival",
    )

    def __init__(
        self,
        mailbox: Mailbox,
        concurrency: int,
        take: Callable[[], Awaitable[Inbound | None]],
        handle: Callable[[Inbound], Awaitable[None]],
        wait_arrival: Callable[[], Awaitable[None]],
    ) -> None:
        self._mailbox = mailbox
        self._concurrency = concurrency
        self._take = take
        self._handle = handle
        self._wait_arrival = wait_arrival
        self._running = 0  # runners alive, those not yet begun among them
        self._starting = 0  # runners started that have not run yet
        self._has_room: trio.Event | None = None  # set when a runner ends, all being busy

    async def drain(self) -> None:
        """Run messages until the mailbox closes; return once the runners
        have finished those they took.

        Raises:
            Exception: what a handler raised (the others are cancelled).
        """
        mailbox = self._mailbox
        async with trio.open_nursery() as nursery:
            while True:
                if self._running >= self._concurrency:
                    # Every runner busy: they take what is queued as they finish.
                    self._has_room = room = trio.Event()
                    await room.wait()
                    continue
                # Messages the runners started so far will not take at once.
                spare = mailbox.pending - self._starting
                if spare > 0:
                    for _ in range(min(spare, self._concurrency - self._running)):
                        self._running += 1
                        self._starting += 1
                        nursery.start_soon(self._runner)
                    continue
                if mailbox.closed:
                    break
                await self._wait_arrival()

    async def _runner(self) -> None:
        self._starting -= 1
        try:
            while (inbound := await self._take()) is not None:
                await self._handle(inbound)
        finally:
            self._running -= 1
            room, self._has_room = self._has_room, None
            if room is not None:
                room.set()
