"""An actor's turns: the task that handles its messages while it has any.

An actor has no task while its mailbox is empty (``_cell.py``). A message
arriving starts a *turn*: a task that takes messages and handles them, one at
a time, or through runners (``_runners.py``) when the actor's ``concurrency``
is above 1, until the mailbox closes or has stayed empty for ``IDLE_LINGER``
seconds; then the turn ends, and its cell decides what comes next (another
turn for what arrived meanwhile, the actor's end, or its crash).

One timer per turn watches for idleness, not one per message: an actor that
is busy pays nothing for being able to idle. Messages queued are taken without
a checkpoint between them, one in ``YIELD_EVERY`` excepted, so that the
node's writer settles a batch of them in one write.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, final

import trio

from ..mailbox import Inbound, Mailbox
from ._runners import YIELD_EVERY, Runners
from ._settling import Settler

__all__ = ["IDLE_LINGER", "Turns"]

#: Seconds an actor's task waits for the next message before it ends (the
#: actor stays; its next message starts a new task).
IDLE_LINGER: Final = 1.0

#: What a turn's owner is told when the turn has ended: whether the mailbox
#: closed, and what the turn raised (None: nothing).
TurnEnded = Callable[[bool, Exception | None], Awaitable[None]]


@final
class Turns:
    """The turns of one actor, one at a time (see the module docstring).

    Args:
        mailbox: the actor's mailbox.
        concurrency: messages it handles at once (runners when above 1).
        handle: handles one message (the cell: kept in ``inflight`` while it runs).
        inflight: the messages being handled now (the cell's; read, not changed:
            a turn with any is not idle).
        requeue: puts what is in flight back in the mailbox (a turn cancelled
            mid-message: kept, not lost).
        settler: the cell's settler (``_settling.py``): a turn with runners runs it.
    """

    __slots__ = (
        "_concurrency",
        "_done",
        "_handle",
        "_inflight",
        "_mailbox",
        "_parked",
        "_requeue",
        "_scope",
        "_settler",
        "_taken",
        "running",
    )

    def __init__(
        self,
        mailbox: Mailbox,
        concurrency: int,
        handle: Callable[[Inbound], Awaitable[None]],
        inflight: dict[Inbound, None],
        requeue: Callable[[], None],
        settler: Settler,
    ) -> None:
        self._mailbox = mailbox
        self._settler = settler
        self._concurrency = concurrency
        self._handle = handle
        self._inflight = inflight
        self._requeue = requeue
        self._taken = 0  # messages taken, ever (the idle watch compares it)
        self._parked = False  # the turn waits for a message
        # The turn running now, and its end (None: no turn runs).
        self._scope: trio.CancelScope | None = None
        self._done: trio.Event | None = None
        #: Whether a turn runs now (an attribute, not a property: read at
        #: every arrival).
        self.running = False

    def start(self, nursery: trio.Nursery, ended: TurnEnded) -> None:
        """Start a turn in ``nursery`` (none may run); ``ended`` is awaited
        once it has ended, in its task, after :attr:`running` turned False."""
        self._scope = scope = trio.CancelScope()
        self._done = done = trio.Event()
        self.running = True
        nursery.start_soon(self._run, nursery, scope, done, ended)

    async def cancel(self, reason: str) -> None:
        """End the turn running now, if one does (its messages in flight go
        back to the mailbox), and wait until it has."""
        scope, done = self._scope, self._done
        if scope is not None and done is not None:
            scope.cancel(reason=reason)
            await done.wait()

    async def _run(
        self, nursery: trio.Nursery, scope: trio.CancelScope, done: trio.Event, ended: TurnEnded
    ) -> None:
        error: Exception | None = None
        closed = False
        watch = trio.CancelScope()
        nursery.start_soon(self._end_when_idle, scope, watch)
        try:
            with scope:
                closed = await self._drain()
        except Exception as exc:
            error = exc
        finally:
            watch.cancel()
            if error is None:
                self._requeue()  # cancelled mid-message: kept, not lost
            self._scope = self._done = None
            self.running = False
            done.set()
        await ended(closed, error)

    async def _end_when_idle(self, scope: trio.CancelScope, watch: trio.CancelScope) -> None:
        """End the turn (``scope``) once it has waited for a message, taking
        none, for IDLE_LINGER seconds."""
        taken = -1
        with watch:
            while True:
                await trio.sleep(IDLE_LINGER)
                if (
                    self._parked
                    and not self._inflight
                    and not self._mailbox.pending
                    and self._taken == taken
                ):
                    # Parked in receive: cancelling ends the wait at once, before
                    # any later arrival could wake it (that one starts a new turn).
                    scope.cancel(reason="idle")
                    return
                taken = self._taken

    async def _drain(self) -> bool:
        """Handle messages until the mailbox closes (True) or the turn is ended
        for being idle (False)."""
        if self._concurrency == 1:
            while (inbound := await self._next()) is not None:
                await self._handle(inbound)
        else:
            # Runners (``_runners.py``): each takes a message only when it
            # begins it, so they begin in the order they arrived.
            runners = Runners(
                self._mailbox, self._concurrency, self._take, self._handle, self._wait_arrival
            )
            # The settler settles what handlers handed it, beside the runners,
            # until they have all ended (``_settling.py``).
            settler = self._settler
            async with trio.open_nursery() as settling:
                await settling.start(settler.run)
                await runners.drain()
                settler.close()
        return self._mailbox.closed

    async def _next(self) -> Inbound | None:
        # Take what is queued without yielding (the mailbox is bounded, so this
        # cannot starve anyone for long): the node's writer then settles a batch
        # of messages in one write instead of one write per message.
        mailbox = self._mailbox
        try:
            self._taken += 1
            if self._taken % YIELD_EVERY:
                try:
                    return mailbox.receive_nowait()
                except trio.WouldBlock:
                    pass
            self._parked = True
            try:
                return await mailbox.receive()
            finally:
                self._parked = False
        except trio.EndOfChannel:
            return None

    def _take(self) -> Inbound | None:
        """A runner's next message: what is queued, or None (none is, or the
        mailbox closed). (The runners checkpoint before every ``YIELD_EVERY``-th,
        never between taking one and beginning it: ``_runners.py``.)"""
        self._taken += 1
        try:
            return self._mailbox.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel):
            return None

    async def _wait_arrival(self) -> None:
        """The turn's task waits for a message for its runners (parked: see
        ``_end_when_idle``)."""
        self._parked = True
        try:
            await self._mailbox.wait_arrival()
        finally:
            self._parked = False
