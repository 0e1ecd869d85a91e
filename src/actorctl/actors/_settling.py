"""Settlements that wait for a commit: a handler's last wait, taken off its task.

A handler that must not have its message settled before something is done (a
result committed to its node's store) may, instead of awaiting that itself,
hand the wait to its actor's turn (:func:`settle_after`): the handler returns,
its runner takes the next message at once, and the turn's *settler* awaits the
wait once for every message handed to it meanwhile (one commit's wait for a
batch of them), then answers and settles each, in the order they were handed
over. Acks-late holds: no such message is settled, nor remembered as handled
by the dedup window, before its wait returned; until then it stays in hand
(a turn cancelled meanwhile puts it back in the mailbox, as one cancelled in
its handler is).

Without this, each message of a busy actor whose handlers end in such a wait
held a runner until its own commit, and each arrival woke a runner of its own:
a task switch or two per message. Only an actor whose turn has runners
(``concurrency`` above 1) has a settler; elsewhere :func:`settle_after`
returns False and the handler awaits the wait itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from contextvars import ContextVar
from typing import Final, final

import attrs
import trio

from ..mailbox import Inbound
from ._dedup import Handled

__all__ = ["WAITS", "Deferred", "Settler", "Wait", "Waits", "settle_after", "wait_all"]

#: A wait the settlement must follow, and what to do if it fails (awaited in
#: the settler, with the error, before the message is settled as it was handled).
Wait = tuple[Callable[[], Awaitable[None]], Callable[[Exception], Awaitable[None]]]


@final
class Waits:
    """The waits handed over for one message: open while its handler runs."""

    __slots__ = ("items", "open")

    def __init__(self) -> None:
        self.items: list[Wait] = []
        self.open = True


#: The waits of the message being handled in this task (fresh per message, set
#: by its dispatch while its handler runs); None: no settler here. A task the
#: handler starts inherits them: closed once the handler returns, they take no
#: more (such a task awaits its own waits).
WAITS: Final = ContextVar[Waits | None]("actorctl_settle_after", default=None)


def settle_after(
    wait: Callable[[], Awaitable[None]], failed: Callable[[Exception], Awaitable[None]]
) -> bool:
    """Have the message being handled settled only once ``wait()`` has
    returned, by its actor's settler (see the module docstring); ``failed`` is
    awaited there with what ``wait()`` raised, before the message is settled.
    Returns False if this actor's turn has no settler (or this is not a
    handler's task, or its handler has returned): then the caller awaits
    ``wait()`` itself."""
    waits = WAITS.get()
    if waits is None or not waits.open:
        return False
    waits.items.append((wait, failed))
    return True


@attrs.define(slots=True)
class Deferred:
    """A message handled whose settlement waits: how it was handled, its dedup
    key, when it began (the latency it is counted with), and its waits."""

    inbound: Inbound
    key: Hashable
    handled: Handled
    started: float
    waits: list[Wait]


@final
class Settler:
    """The settler of one actor: the messages handed to it, and the task of the
    running turn that awaits their waits and settles them.

    Args:
        settle: answers, settles and lets go of the messages of a batch once
            their waits have returned (the dispatch's).
    """

    __slots__ = ("_closing", "_queue", "_settle", "_woken", "running")

    def __init__(self, settle: Callable[[list[Deferred]], None]) -> None:
        self._settle = settle
        self._queue: list[Deferred] = []
        self._woken: trio.Event | None = None  # set when the idle settler has work
        self._closing = False
        #: Whether a turn's settler runs now (messages may be handed to it).
        self.running = False

    def add(self, deferred: Deferred) -> None:
        """Hand ``deferred`` over (its message stays in hand until settled);
        only while :attr:`running`."""
        self._queue.append(deferred)
        woken = self._woken
        if woken is not None:
            self._woken = None
            woken.set()

    def close(self) -> None:
        """No more messages come this turn: :meth:`run` returns once it has
        settled those it has."""
        self._closing = True
        woken = self._woken
        if woken is not None:
            self._woken = None
            woken.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The turn's settler (a task of the turn): until :meth:`close`, await
        the waits of what was handed over, a batch at a time, and settle it.
        Cancelled, it drops what it holds: those messages are still in hand,
        and the turn's end puts them back in the mailbox."""
        self.running, self._closing, self._queue = True, False, []
        task_status.started()
        try:
            while True:
                if not self._queue:
                    if self._closing:
                        return
                    self._woken = woken = trio.Event()
                    await woken.wait()
                    continue
                batch, self._queue = self._queue, []
                await wait_all([wait for deferred in batch for wait in deferred.waits])
                self._settle(batch)
        finally:
            self.running = False
            self._woken = None
            self._queue = []


async def wait_all(waits: list[Wait]) -> None:
    """Await each distinct wait of ``waits`` once (one commit's wait serves
    every message of a batch); a wait that fails has each ``failed`` given
    with it awaited, in their order."""
    distinct: dict[Callable[[], Awaitable[None]], list[Callable[[Exception], Awaitable[None]]]]
    distinct = {}
    for wait, failed in waits:
        distinct.setdefault(wait, []).append(failed)
    for wait, fallbacks in distinct.items():
        try:
            await wait()
        except Exception as exc:
            for failed in fallbacks:
                await failed(exc)
