"""The gate: which task that waits on a worker runs next.

A worker holds more tasks than it runs (``_worker.py``); each waits at its
worker's gate for a run slot. The gate gives a free slot to the waiting task
of the highest ``priority`` (0-9; among equals, the one that came first)
whose own limits let it start now:

- the worker's **concurrency budget**: how many tasks run at once (``_budget.py``
  makes it grow and shrink between the pool's bounds);
- a task's **rate limit** on this worker (``rate_limit="10/s"``, ``_rates.py``);
- a task's **concurrency** on this worker (``concurrency=N``; 0 or a suspend:
  none starts);
- a task's **concurrency tokens**: at most N running per key, the key computed
  from its arguments (``concurrency_key=``, ``concurrency_per_key=``).

A task that its own limits hold back never holds up another task: the gate
passes over it to the next one. A task waiting for its rate limit wakes at the
moment its limit lets it start; one held by a cap or a suspend, when a run
ends or the limit changes. Nothing here polls, and the gate costs nothing
beyond a counter for a task that has no limits while nobody waits.

The same gate, with no budget, paces a pool's router for a task's global rate
limit and holds back a suspended task there (``_pacing.py``).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Mapping
from typing import Any, Final, final

import trio

from ..._errors import ActorctlError
from ..protocol._protocol import H_PRIORITY
from ._rates import Pacer, RateLimit

__all__ = ["PRIORITY_DEFAULT", "Gate", "GateClosed", "TaskLimits", "Ticket", "priority_of"]

#: The priorities AMQP 1.0 defines (0 lowest, 9 highest; 4 is the default).
PRIORITY_DEFAULT: Final = 4


def priority_of(headers: Mapping[str, Any]) -> int:
    """A message's priority (its ``priority`` header, 0-9, higher first);
    the default (4) when it has none, and the nearest bound when out of range."""
    given = headers.get(H_PRIORITY)
    if given is None or isinstance(given, bool) or not isinstance(given, int | float):
        return PRIORITY_DEFAULT
    return max(0, min(9, int(given)))


@final
class TaskLimits:
    """The limits of one task at one gate, and what runs under them."""

    __slots__ = ("cap", "keys", "pacer", "per_key", "running", "suspended")

    def __init__(
        self,
        pacer: Pacer,
        *,
        cap: int | None = None,
        per_key: int | None = None,
    ) -> None:
        self.pacer = pacer
        self.cap = cap  # runs at once; None: no cap of its own
        self.per_key = per_key
        self.suspended = False
        self.running = 0
        self.keys: dict[str, int] = {}

    def held(self, key: str | None) -> bool:
        """Whether a cap, a suspend or its key's tokens hold a start back now."""
        if self.suspended or (self.cap is not None and self.running >= self.cap):
            return True
        return (
            key is not None and self.per_key is not None and self.keys.get(key, 0) >= self.per_key
        )


@final
class Ticket:
    """One task at the gate: waiting, then running until it leaves."""

    __slots__ = ("admitted", "event", "key", "limits", "order")

    def __init__(self, limits: TaskLimits | None, key: str | None, order: tuple[int, int]) -> None:
        self.limits = limits
        self.key = key
        self.order = order  # (-priority, arrival): the smallest runs first
        self.admitted = False
        self.event: trio.Event | None = None  # made only if it has to wait

    def __lt__(self, other: Ticket) -> bool:
        return self.order < other.order


class GateClosed(ActorctlError):
    """The gate was closed (its worker's node stops): what waited, or comes
    now, is not let in."""


@final
class Gate:
    """Run slots of one worker (or a router's pacing), and who gets the next.

    Args:
        capacity: run slots (the worker's concurrency budget now); None for
            no budget (a router: only the tasks' own limits hold them back).
        on_blocked: called when a task waits for a slot that the budget holds
            back (the budget may grow).
        widen: the factor its rate limits' intervals are widened by (``Pacer``).
    """

    def __init__(
        self,
        capacity: int | None,
        *,
        on_blocked: Callable[[], None] | None = None,
        widen: float = 1.0,
    ) -> None:
        self.capacity = math.inf if capacity is None else capacity
        self.widen = widen
        self.running = 0
        self.started = 0  # runs it let start, ever
        self.tasks: dict[str, TaskLimits] = {}
        self._waiting: list[Ticket] = []
        self._watchers: list[tuple[int, trio.Event]] = []  # wait_waiting's
        self._arrivals = itertools.count()
        self.on_blocked = on_blocked
        self.closed = False
        # The ticket of every task let in at once with no limits of its own:
        # it holds nothing of that task (no limits, no key, never waited), so
        # one serves them all, and nothing changes it (``leave`` only reads it).
        self._admitted = Ticket(None, None, (0, -1))
        self._admitted.admitted = True

    @property
    def waiting(self) -> int:
        """Tasks waiting at the gate now."""
        return len(self._waiting)

    def limits(self, task: str) -> TaskLimits:
        """The limits of ``task`` here, made (with none set) on first use."""
        found = self.tasks.get(task)
        if found is None:
            found = self.tasks[task] = TaskLimits(Pacer(None, widen=self.widen))
        return found

    # -- entering and leaving -----------------------------------------------------------

    async def enter(
        self, task: str, priority: int = PRIORITY_DEFAULT, key: str | None = None
    ) -> Ticket:
        """Wait until ``task`` may run here; the ticket must be given to
        :meth:`leave` when it has run (or if this is cancelled, nothing need be).

        Raises:
            GateClosed: the gate is closed, or was while this waited (:meth:`close`).
        """
        if self.closed:
            raise GateClosed(f"task {task}: the gate is closed")
        limits = self.tasks.get(task)
        free = not self._waiting and self.running < self.capacity
        if free and limits is None:
            # The fast path for a task with no limits of its own (most):
            # nobody waits, nothing holds it, and its ticket is the shared one.
            self.running += 1
            self.started += 1
            return self._admitted
        ticket = Ticket(limits, key, (-priority, next(self._arrivals)))
        if free and self._may_start(ticket):
            self._start(ticket)  # the fast path: nobody waits, nothing holds it
            return ticket
        ticket.event = trio.Event()
        bisect.insort(self._waiting, ticket)
        if self._watchers:
            self._tell_watchers()
        try:
            while True:
                self._dispatch()
                if ticket.admitted:
                    break
                with trio.move_on_at(self._wake_at(ticket)):
                    await _event(ticket).wait()
                if ticket.admitted:
                    break
                if self.closed:
                    raise GateClosed(f"task {task}: the gate was closed while it waited")
                ticket.event = trio.Event()  # to be woken again
        except BaseException:
            if ticket.admitted:
                self.leave(ticket)
            else:
                self._waiting.remove(ticket)
            raise
        return ticket

    def close(self) -> None:
        """Let nothing more in: each task waiting now, and any that comes, gets
        :class:`GateClosed` (its worker's node stops and gives them back). No
        cost per task: a waiting task learns of it when it is woken."""
        self.closed = True
        for ticket in self._waiting:
            _event(ticket).set()

    async def wait_waiting(self, count: int) -> None:
        """Wait until at least ``count`` tasks wait at the gate at once."""
        if len(self._waiting) >= count:
            return
        event = trio.Event()
        self._watchers.append((count, event))
        try:
            await event.wait()
        finally:
            self._watchers = [w for w in self._watchers if w[1] is not event]

    def _tell_watchers(self) -> None:
        waiting = len(self._waiting)
        for count, event in self._watchers:
            if waiting >= count:
                event.set()

    def leave(self, ticket: Ticket) -> None:
        """``ticket``'s run is over: its slot goes to the next that may start."""
        self.running -= 1
        limits = ticket.limits
        if limits is not None:
            limits.running -= 1
            key = ticket.key
            if key is not None and limits.per_key is not None:
                left = limits.keys[key] - 1
                if left:
                    limits.keys[key] = left
                else:
                    del limits.keys[key]
        if self._waiting:
            self._dispatch()

    # -- changes --------------------------------------------------------------------

    def resize(self, capacity: int) -> None:
        """Set the number of run slots (runs above it finish; none starts until
        fewer run)."""
        self.capacity = capacity
        self._dispatch()

    def poke(self) -> None:
        """Look again at who may start (the budget's cooldown is over)."""
        self._dispatch()

    def set_rate(self, task: str, limit: RateLimit | None) -> None:
        """Change ``task``'s rate limit here."""
        self.limits(task).pacer.set(limit)
        self._wake_all()

    def set_cap(self, task: str, cap: int | None) -> None:
        """Change how many of ``task`` run here at once (0: none starts)."""
        self.limits(task).cap = cap
        self._dispatch()

    def suspend(self, task: str, suspended: bool) -> None:
        """Hold back (True) or let go (False) every start of ``task`` here."""
        self.limits(task).suspended = suspended
        self._dispatch()

    # -- who goes next ----------------------------------------------------------------

    def _may_start(self, ticket: Ticket) -> bool:
        limits = ticket.limits
        if limits is None:
            return True
        return not limits.held(ticket.key) and limits.pacer.take()

    def _start(self, ticket: Ticket) -> None:
        ticket.admitted = True
        self.running += 1
        self.started += 1
        limits = ticket.limits
        if limits is not None:
            limits.running += 1
            key = ticket.key
            if key is not None and limits.per_key is not None:
                limits.keys[key] = limits.keys.get(key, 0) + 1

    def _dispatch(self) -> None:
        """Start each waiting task, best first, that may start now, while slots
        are free, and wake it (none once the gate is closed)."""
        if self.closed:
            return
        started: list[Ticket] = []
        blocked_by_budget = False
        for ticket in self._waiting:
            if self.running >= self.capacity:
                blocked_by_budget = True
                break
            limits = ticket.limits
            if limits is not None and (limits.held(ticket.key) or not limits.pacer.take()):
                continue
            self._start(ticket)
            started.append(ticket)
        if started:
            self._waiting = [t for t in self._waiting if not t.admitted]
            for ticket in started:
                _wake(ticket)
        if blocked_by_budget and self.on_blocked is not None:
            self.on_blocked()

    def _wake_at(self, ticket: Ticket) -> float:
        """When a task that could not start may: at the moment its rate limit
        lets it, if that is what holds it back; otherwise when it is woken (a
        run ends, a limit changes). Every waiting task of a paced type wakes at
        that moment and one starts: a worker holds few of them at once."""
        limits = ticket.limits
        if self.running >= self.capacity or limits is None or limits.held(ticket.key):
            return math.inf
        return limits.pacer.ready_at()

    def _wake_all(self) -> None:
        for ticket in self._waiting:
            _wake(ticket)


def _event(ticket: Ticket) -> trio.Event:
    assert ticket.event is not None, "a waiting ticket has its event"
    return ticket.event


def _wake(ticket: Ticket) -> None:
    if ticket.event is not None:
        ticket.event.set()
