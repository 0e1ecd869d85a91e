"""ActorCell: the runtime around one actor, across its incarnations.

It owns the actor's mailbox and its life: a fresh incarnation at each start,
activation (no task while the mailbox is empty; a message starts a turn, which
ends once the mailbox has stayed empty for ``IDLE_LINGER``: ``_turns.py``), the
tasks the actor starts, crashes, stopping and retiring. What each way of
ending does with the actor's messages (those in hand kept for the next
incarnation, the culprit of a crash sent back, those queued released when
there is none) is ``_ending.py``. How one message is run (the handler looked
up, the arguments bound, the reply sent, then the settlement: acks-late) is
its dispatch, ``_dispatch.py``."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import final

import trio

from .._errors import ActorctlError, ConfigError
from ..mailbox import RELEASED, Envelope, Inbound, Mailbox
from ._actor import Actor
from ._address import Address
from ._background import TaskFn
from ._counters import ActorCounters
from ._dedup import Handled, ReplyMemory, SeenWindow
from ._dispatch import Dispatch
from ._ending import drain_actor, release_queued, report_crash, requeue_inflight, run_on_stop
from ._handlers import Behaviour
from ._monitor import Monitors
from ._parts import NO_COUNTERS, CellParts
from ._ref import Outbox
from ._settling import Deferred, Settler
from ._turns import Turns

__all__ = ["ActorCell", "CellState"]


class CellState(enum.StrEnum):
    """Where a cell's actor is; its value is the word logs and tests show."""

    NEW = "new"  #: not started yet
    RUNNING = "running"
    STOPPED = "stopped"  #: ended normally, or was stopped
    CRASHED = "crashed"


@final
class ActorCell:
    """Hosts one actor on a node. Only the node makes cells.

    The cell outlives the actor's incarnations: its address, mailbox and links
    stay while its supervisor starts the actor again. With a ``factory``, each
    start after the first builds a fresh actor (state reset), unless the actor's
    class sets ``keeps_state = True``; without one (an actor given as an
    instance) the same instance is started again, its behaviour reset.

    ``replies`` bounds the bytes of replies its dedup window keeps, with those
    of the node's other actors (``_dedup.py``); None: bounds of its own, the
    defaults.

    An idle cell is small: what only a message needs (its dedup window,
    counters, turns and dispatch) is made at its first message
    (``_parts.py``), and an actor that watches none has no set of watched
    addresses.
    """

    __slots__ = (
        "_concurrency",
        "_culprits",
        "_nursery",
        "_on_end",
        "_parts",
        "_replies",
        "_watching",
        "actor",
        "address",
        "behaviour",
        "crashes_on_error",
        "factory",
        "mailbox",
        "monitors",
        "name",
        "outbox",
        "starts",
        "state",
        "stopped_why",
    )

    def __init__(
        self,
        actor: Actor,
        address: Address,
        outbox: Outbox,
        *,
        factory: Callable[[], Actor] | None = None,
        monitors: Monitors | None = None,
        replies: ReplyMemory | None = None,
    ) -> None:
        if actor._cell is not None:
            raise ValueError(f"{actor!r} is already hosted")
        self.actor = actor
        self.address = address
        #: Its actor's name (its address's): read per message, so an attribute.
        self.name = address.name
        self.outbox = outbox
        self.factory = factory
        self.monitors = monitors
        self.state = CellState.NEW
        #: Why its mailbox is closed, for a message that arrives then (None: open,
        #: or closed with the node).
        self.stopped_why: str | None = None
        self.starts = 0
        self._watching: set[str] | None = None  # see watching
        self.behaviour: Behaviour = actor
        self.mailbox = Mailbox(type(actor).mailbox_capacity)
        concurrency = type(actor).concurrency
        if concurrency < 1:
            raise ValueError(f"{type(actor).__name__}.concurrency must be at least 1")
        self._concurrency = concurrency
        if type(actor).dedup_count < 0 or type(actor).dedup_seconds < 0:
            raise ValueError("the dedup window cannot be negative")
        self._replies = replies
        # While it runs (see activate): where its turns run, and who hears of
        # its end.
        self._nursery: trio.Nursery | None = None
        self._on_end: Callable[[BaseException | None], None] | None = None
        # Its working parts (``_parts.py``), made at its first message.
        self._parts: CellParts | None = None
        #: A handler's exception crashes the actor once its caller has the
        #: error (OTP), or only answers the caller (the default): see
        #: ``Actor.handler_errors``; its supervision tree may choose instead.
        chosen = type(actor).handler_errors
        if chosen not in ("reply", "crash"):
            raise ConfigError(
                f"{type(actor).__name__}.handler_errors = {chosen!r}: expected 'reply' (the "
                "caller gets the error, the actor keeps its state) or 'crash' (OTP: the "
                "caller gets the error, then the actor is restarted fresh)"
            )
        self.crashes_on_error = chosen == "crash"
        self._culprits: list[Inbound] | None = None  # what crashed its turn (_crashed)
        actor._cell = self

    def _made(self) -> CellParts:
        """Its working parts: made now if it has none yet (its first message,
        or the first task it starts), kept from then on."""
        parts = self._parts
        if parts is None:
            kind = type(self.actor)
            seen = SeenWindow(
                kind.dedup_count,
                kind.dedup_seconds,
                _run_clock(),
                memory=self._replies,
                name=self.name,
            )
            counters = ActorCounters()
            # What it handles now, in the order it took them (a requeue keeps it).
            inflight: dict[Inbound, None] = {}
            # What settles the messages whose handlers handed it a wait (a
            # commit's), while a turn with runners runs (``_settling.py``).
            settler = Settler(self._settled)
            # Its turns (``_turns.py``): at most one runs, while it has messages.
            turns = Turns(
                self.mailbox,
                self._concurrency,
                self._handle,
                inflight,
                self._requeue_inflight,
                settler,
            )
            dispatch = Dispatch(self, seen, counters, self._concurrency, settler)
            parts = self._parts = CellParts(seen, counters, inflight, turns, dispatch)
        return parts

    @property
    def watching(self) -> set[str]:
        """Addresses this actor watches (a Terminated from elsewhere is ignored)."""
        watching = self._watching
        if watching is None:
            watching = self._watching = set()
        return watching

    @property
    def counters(self) -> ActorCounters:
        """What it did with its messages (``_counters.py``), read when scraped
        (all zero, and shared, until its first message: never write to them)."""
        parts = self._parts
        return NO_COUNTERS if parts is None else parts.counters

    def refused(self, state: str, condition: str | None) -> None:
        """Count a message settled ``state`` (not accepted) with ``condition``
        in its own counters (made now if it has taken no message yet)."""
        self._made().counters.refuse(state, condition)

    @property
    def kept_reply_bytes(self) -> int:
        """Bytes of replies its dedup window keeps now (for duplicates)."""
        parts = self._parts
        return 0 if parts is None else parts.seen.bytes

    @property
    def background_tasks(self) -> int:
        """How many tasks of its own the actor runs now (``start_soon``)."""
        parts = self._parts
        return 0 if parts is None else len(parts.background)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the actor as a task: :meth:`activate` it, return when it ends
        (its mailbox was closed), :meth:`deactivate` it when cancelled.

        Raises:
            Exception: what the actor crashed with (see :meth:`activate`).
        """
        ended = trio.Event()
        errors: list[BaseException | None] = []

        def on_end(error: BaseException | None) -> None:
            errors.append(error)
            ended.set()

        async with trio.open_nursery() as nursery:
            await self.activate(nursery, on_end)
            task_status.started()
            try:
                await ended.wait()
            finally:
                if not ended.is_set():
                    with trio.CancelScope(shield=True):
                        await self.deactivate()
                    self.stop()  # as a task of its own, nobody may start it again
        if errors and errors[0] is not None:
            raise errors[0]

    async def activate(
        self, nursery: trio.Nursery, on_end: Callable[[BaseException | None], None]
    ) -> None:
        """Start the actor: a fresh incarnation (see the class docstring), then
        its ``on_start``. It has no task while its mailbox is empty: a message
        arriving starts one in ``nursery`` (a turn), which handles messages
        until the mailbox has been empty for ``IDLE_LINGER`` seconds. A node can
        host many idle actors this way for the memory of their objects alone.

        ``on_end`` is told once when the actor ends by itself: ``None`` when its
        mailbox was closed (it stopped), or the exception it crashed with (an
        exception that escaped its own code outside a handler). A crash releases
        the message it crashed on; the others it was handling go back to the
        head of its mailbox, which stays open, with what is queued there, for
        the next incarnation (docs/guarantees.md: a restart loses no message).

        Raises:
            Exception: what ``on_start`` raised (the actor did not start).
        """
        self._incarnate()
        self._nursery = nursery
        try:
            await self.actor.on_start()
        except BaseException:
            await self._stop_background("failed to start")
            raise
        self.state = CellState.RUNNING
        self._on_end = on_end
        self.mailbox.on_arrival(self)  # (see arrived)
        if self.mailbox.pending or self.mailbox.closed:
            self.arrived()

    async def deactivate(self) -> None:
        """Stop the actor from outside (its supervisor), keeping its mailbox:
        the messages it is handling are cancelled and put back at the head of
        the mailbox, beside those queued, for its next incarnation (then
        ``on_stop`` runs). If there is none, :meth:`retire` releases them to
        their senders. ``on_end`` is not told."""
        if self._on_end is None:
            return  # it ended by itself already
        self._on_end = None
        self.mailbox.on_arrival(None)
        if self._parts is not None:
            await self._parts.turns.cancel(f"actor {self.name!r} stopped by its supervisor")
        self._requeue_inflight()
        await self._stop_actor()
        self.state = CellState.STOPPED

    def start_soon(self, fn: TaskFn, *args: object) -> None:
        """Run ``fn(*args)`` as a task of the actor's current incarnation
        (``_background.py``): from its ``on_start`` or its handlers."""
        if self._nursery is None:
            raise ActorctlError(f"actor {self.name!r} is not running: it cannot start a task")
        self._made().background.start_soon(self._nursery, fn, args, self._background_failed)

    async def _background_failed(self, error: Exception) -> None:
        """A task the actor started raised: the actor crashed."""
        on_end = self._on_end
        if on_end is not None:
            await self.deactivate()  # its turn and its other tasks end first
        self._crashed(error)
        if on_end is not None:
            on_end(error)

    async def _stop_background(self, why: str) -> None:
        self._nursery = None  # no task may start from now on
        if self._parts is not None:
            with trio.CancelScope(shield=True):
                await self._parts.background.cancel(f"actor {self.name!r} {why}")

    def retire(self, why: str = "not started again") -> None:
        """Its supervisor will not start it again (``why``): close its mailbox,
        releasing what waits there, so that senders send it again (a plain
        ``tell``'s sender does, within its resend window) instead of waiting."""
        self.mailbox.on_arrival(None)
        self._requeue_inflight()
        self.stopped_why = why
        release_queued(self.mailbox, self.name, why)
        self.state = CellState.STOPPED

    def _requeue_inflight(self) -> None:
        """Messages cancelled mid-handling go back to the head of the mailbox
        (``_ending.py``)."""
        requeue_inflight(self._parts, self.mailbox)

    def arrived(self) -> None:
        """A message arrived (or the mailbox closed): start a turn unless one runs
        (or, for an idle actor whose mailbox closed, end it at once: see
        :meth:`_ends_at_once`). Its mailbox calls it (the cell is its
        ``ArrivalListener``: no bound method kept per actor)."""
        nursery = self._nursery
        parts = self._parts
        if (
            (parts is None or not parts.turns.running)
            and self._on_end is not None
            and nursery is not None
        ):
            if self._ends_at_once():
                self._end_at_once()
                return
            self._made().turns.start(nursery, self._turn_ended)

    def _ends_at_once(self) -> bool:
        """Whether the actor can end now without a task of its own: its mailbox
        closed with nothing queued or in hand, no task of its own running, and
        no ``on_stop`` of its own to run. (A node that stops closes every
        mailbox: a turn per idle actor, to find it closed, cost a node of
        100,000 idle actors more time than the rest of its stop.)"""
        parts = self._parts
        return (
            self.mailbox.closed
            and not self.mailbox.pending
            and (parts is None or (not parts.inflight and not len(parts.background)))
            and type(self.actor).on_stop is Actor.on_stop
        )

    def _end_at_once(self) -> None:
        """What a turn that found the mailbox closed does (``_end``), with
        nothing to wait for."""
        on_end, self._on_end = self._on_end, None
        self.mailbox.on_arrival(None)
        self._nursery = None  # no task may start from now on
        if self.actor._cell is self:
            self.actor._cell = None
        self.state = CellState.STOPPED
        if on_end is not None:
            on_end(None)

    async def _turn_ended(self, closed: bool, error: Exception | None) -> None:
        """Its turn ended (in the turn's task): the mailbox ``closed``, or it
        idled, or it raised ``error`` (the actor crashed)."""
        if self._on_end is None:
            if error is not None:
                self._crashed(error)  # deactivated meanwhile: it does the rest
            return
        if error is not None:
            self._crashed(error)
            await self._end(error)
        elif closed:
            self.mailbox.on_arrival(None)  # closing it again must not start a turn
            self.stop()
            await self._end(None)
        elif self.mailbox.pending:
            self.arrived()  # arrived while this turn was ending

    def _crashed(self, error: Exception) -> None:
        """It crashed: the messages it crashed on go back to their senders;
        those it was handling beside them, and those queued, stay for the next
        incarnation (released by retire() if there is none): ``_ending.py``."""
        self.state = CellState.CRASHED
        culprits, self._culprits = self._culprits or [], None
        self._requeue_inflight()
        report_crash(self.name, error, culprits, self.mailbox.pending)

    async def _end(self, error: Exception | None) -> None:
        on_end = self._on_end
        self._on_end = None
        self.mailbox.on_arrival(None)
        failed = await self._stop_actor()
        if error is None:
            error = failed
            self.state = CellState.STOPPED if failed is None else CellState.CRASHED
        if on_end is not None:
            on_end(error)

    async def _stop_actor(self) -> Exception | None:
        """Run on_stop (``_ending.py``): what it raises is returned, not
        raised. The tasks it started end first."""
        await self._stop_background("stopped")
        actor = self.actor
        failed = await run_on_stop(actor, self.name)
        if actor._cell is self:
            actor._cell = None
        return failed

    def _incarnate(self) -> None:
        """Before each start: after the first, a fresh actor from the factory
        (unless its class keeps state), its own behaviour, an open mailbox."""
        self.starts += 1
        if self.starts > 1:
            if self.factory is not None and not type(self.actor).keeps_state:
                fresh = self.factory()
                if not isinstance(fresh, Actor):
                    raise TypeError(f"the factory of {self.name!r} made {fresh!r}, not an Actor")
                self.actor = fresh
            self.behaviour = self.actor
            self.stopped_why = None
            self.mailbox.reopen()
        self.actor._cell = self

    def drain(self) -> None:
        """Its node begins a graceful stop: take no more messages (those queued
        are released), and tell the actor (``on_drain``), which may give back
        what it holds and has not begun. What it raises is logged: a failure
        of this actor alone, never of the node's stop."""
        self.stop()
        drain_actor(self.actor, self.name)

    def stop(self) -> None:
        """Take no more messages; the actor ends after those it is handling.
        Queued messages are released (their senders may send them elsewhere)."""
        for left in self.mailbox.close():
            left.settle(RELEASED)

    async def _handle(self, inbound: Inbound) -> None:
        parts = self._parts or self._made()  # (made already: its turn runs)
        inflight = parts.inflight
        # Kept while it runs: a restart puts it back in the mailbox.
        inflight[inbound] = None
        try:
            if await parts.dispatch.handle(inbound):
                return  # in the settler's hands: still in hand until it settles it
        except Exception:
            # It crashed the actor: not to be run here again (_crashed).
            inflight.pop(inbound, None)
            if inbound.outcome is not None:
                raise  # answered already (a handler's error, OTP): nothing to release
            if self._culprits is None:
                self._culprits = []
            self._culprits.append(inbound)
            raise
        inflight.pop(inbound, None)

    def _settled(self, batch: list[Deferred]) -> None:
        """The settler's: the waits of the messages handed to it have returned
        (their settlements grant credit once, for the batch)."""
        mailbox = self.mailbox
        parts = self._made()  # (made already: its messages were handled)
        mailbox.begin_batch()
        try:
            parts.dispatch.settle(batch, parts.inflight)
        finally:
            mailbox.end_batch()

    async def dispatch_with(self, behaviour: Behaviour, envelope: Envelope) -> Handled:
        """Run ``envelope``'s handler in ``behaviour`` as every message of this
        cell is run (``_dispatch.py``): for a behaviour that runs the actor's
        own handlers (a circuit breaker's probe)."""
        return await self._made().dispatch.dispatch_with(behaviour, envelope)


def _run_clock() -> Callable[[], float]:
    """trio's clock of this run, read directly (``trio.current_time`` looks the
    run up on every read, and a cell's dedup window reads it per message);
    ``trio.current_time`` itself outside a run."""
    try:
        return trio.lowlevel.current_clock().current_time
    except RuntimeError:
        return trio.current_time
