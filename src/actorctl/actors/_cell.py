"""ActorCell: the runtime around one actor: its mailbox, its task, its dispatch.

It takes messages from the mailbox, looks the handler up in the current behaviour,
binds the arguments, runs the handler (a trio task, or a worker thread for a plain
``def``) in its message's eliot trace, replies, and only then settles (acks-late)."""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from time import perf_counter
from typing import Any, final

import trio

from .._errors import ActorctlError, ConfigError, WireFormatError
from .._log import TRACE, continue_trace, log
from ..mailbox import (
    ACCEPTED,
    BAD_ARGUMENTS,
    BAD_KIND,
    DECODE_ERROR,
    EXPIRED,
    KIND_DOCUMENT,
    RELEASED,
    STATUS_OK,
    UNKNOWN_HANDLER,
    Envelope,
    Inbound,
    Mailbox,
)
from ._access import NotPermitted, admit
from ._actor import Actor
from ._address import Address
from ._background import Background, TaskFn
from ._counters import ActorCounters
from ._dedup import REDRIVE, REPLY_FORGOTTEN, Handled, ReplyMemory, SeenWindow, dedup_key
from ._handlers import BadArguments, Behaviour, HandlerSpec, converter, run_in_thread
from ._monitor import TERMINATED, Monitors, Terminated
from ._ref import Outbox, to_wire
from ._replies import handler_failed, refuse, send_reply, settle_refused

__all__ = ["ActorCell", "CellState"]


class CellState(enum.StrEnum):
    """Where a cell's actor is; its value is the word logs and tests show."""

    NEW = "new"  #: not started yet
    RUNNING = "running"
    STOPPED = "stopped"  #: ended normally, or was stopped
    CRASHED = "crashed"


class _HandlerCrashed(Exception):
    """A handler raised in an actor whose handler errors crash it: the
    answer its caller gets, and the error the actor crashes with."""

    def __init__(self, handled: Handled, error: Exception) -> None:
        super().__init__(str(error))
        self.handled = handled
        self.error = error


_YIELD_EVERY = 16
#: Seconds an actor's task waits for the next message before it ends (the
#: actor stays; its next message starts a new task).
IDLE_LINGER = 1.0


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
    """

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
        self.outbox = outbox
        self.factory = factory
        self.monitors = monitors
        self.state = CellState.NEW
        self.starts = 0
        #: Addresses this actor watches (a Terminated from elsewhere is ignored).
        self.watching: set[str] = set()
        self.behaviour: Behaviour = actor
        self.mailbox = Mailbox(type(actor).mailbox_capacity)
        concurrency = type(actor).concurrency
        if concurrency < 1:
            raise ValueError(f"{type(actor).__name__}.concurrency must be at least 1")
        self._concurrency = concurrency
        self._threads: trio.CapacityLimiter | None = None  # made by the first thread
        self._taken = 0
        # While it runs (see activate): where its turns run, who hears of its
        # end, and the turn handling messages now (None: it has no task).
        self._nursery: trio.Nursery | None = None
        self._on_end: Callable[[BaseException | None], None] | None = None
        self._turn: trio.CancelScope | None = None
        self._turn_done: trio.Event | None = None
        self._parked = False  # its turn waits for a message
        # What it handles now, in the order it took them (a requeue keeps it).
        self._inflight: dict[Inbound, None] = {}
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
        self._seen = SeenWindow(
            type(actor).dedup_count,
            type(actor).dedup_seconds,
            memory=replies,
            name=address.name,
        )
        self._background = Background()
        #: What it did with its messages (``_counters.py``), read when scraped.
        self.counters = ActorCounters()
        actor._cell = self

    @property
    def name(self) -> str:
        return self.address.name

    @property
    def kept_reply_bytes(self) -> int:
        """Bytes of replies its dedup window keeps now (for duplicates)."""
        return self._seen.bytes

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
        self.mailbox.on_arrival(self._wake)
        if self.mailbox.pending or self.mailbox.closed:
            self._wake()

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
        turn, done = self._turn, self._turn_done
        if turn is not None and done is not None:
            turn.cancel(reason=f"actor {self.name!r} stopped by its supervisor")
            await done.wait()
        self._requeue_inflight()
        await self._stop_actor()
        self.state = CellState.STOPPED

    def start_soon(self, fn: TaskFn, *args: object) -> None:
        """Run ``fn(*args)`` as a task of the actor's current incarnation
        (``_background.py``): from its ``on_start`` or its handlers."""
        if self._nursery is None:
            raise ActorctlError(f"actor {self.name!r} is not running: it cannot start a task")
        self._background.start_soon(self._nursery, fn, args, self._background_failed)

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
        with trio.CancelScope(shield=True):
            await self._background.cancel(f"actor {self.name!r} {why}")

    def retire(self) -> None:
        """Its supervisor will not start it again: close its mailbox, releasing
        what waits there, so that senders send elsewhere instead of waiting."""
        self.mailbox.on_arrival(None)
        self._requeue_inflight()
        released = self.mailbox.close()
        if released:
            log(
                "actorctl:actor:released",
                actor=self.name,
                why="not started again",
                released=[inbound.envelope.message_id for inbound in released],
            )
        for left in released:
            left.settle(RELEASED)
        self.state = CellState.STOPPED

    def _requeue_inflight(self) -> None:
        """Messages cancelled mid-handling go back to the head of the mailbox
        (for the next incarnation: at least once, so they may run twice), or
        are released if it is closed; never left unsettled on a live link."""
        if self._inflight:
            inflight = list(self._inflight)
            self._inflight.clear()
            for inbound in inflight:
                self._seen.abandon(dedup_key(inbound.envelope))
            self.mailbox.requeue(inflight)

    def _wake(self) -> None:
        """A message arrived (or the mailbox closed): start a turn unless one runs
        (or, for an idle actor whose mailbox closed, end it at once: see
        :meth:`_ends_at_once`)."""
        nursery = self._nursery
        if self._turn is None and self._on_end is not None and nursery is not None:
            if self._ends_at_once():
                self._end_at_once()
                return
            self._turn = turn = trio.CancelScope()
            self._turn_done = done = trio.Event()
            nursery.start_soon(self._run_turn, turn, done)

    def _ends_at_once(self) -> bool:
        """Whether the actor can end now without a task of its own: its mailbox
        closed with nothing queued or in hand, no task of its own running, and
        no ``on_stop`` of its own to run. (A node that stops closes every
        mailbox: a turn per idle actor, to find it closed, cost a node of
        100,000 idle actors more time than the rest of its stop.)"""
        return (
            self.mailbox.closed
            and not self.mailbox.pending
            and not self._inflight
            and not len(self._background)
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

    async def _run_turn(self, turn: trio.CancelScope, done: trio.Event) -> None:
        error: Exception | None = None
        closed = False
        watch = trio.CancelScope()
        assert self._nursery is not None
        self._nursery.start_soon(self._end_turn_when_idle, turn, watch)
        try:
            with turn:
                closed = await self._drain()
        except Exception as exc:
            error = exc
        finally:
            watch.cancel()
            if error is None:
                self._requeue_inflight()  # cancelled mid-message: kept, not lost
            self._turn = self._turn_done = None
            done.set()
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
            self._wake()  # arrived while this turn was ending

    async def _end_turn_when_idle(self, turn: trio.CancelScope, watch: trio.CancelScope) -> None:
        """End ``turn`` once it has waited for a message, taking none, for
        IDLE_LINGER seconds. One timer per turn, not one per message: an
        actor that is busy pays nothing for being able to idle."""
        taken = -1
        with watch:
            while True:
                await trio.sleep(IDLE_LINGER)
                if (
                    self._parked
                    and not self._inflight
                    and not self.mailbox.pending
                    and self._taken == taken
                ):
                    # Parked in receive: cancelling ends the wait at once, before
                    # any later arrival could wake it (that one starts a new turn).
                    turn.cancel(reason="idle")
                    return
                taken = self._taken

    async def _drain(self) -> bool:
        """Handle messages until the mailbox closes (True) or the turn is ended
        for being idle (False)."""
        if self._concurrency == 1:
            while (inbound := await self._next()) is not None:
                await self._handle(inbound)
        else:
            slots = trio.Semaphore(self._concurrency)
            async with trio.open_nursery() as nursery:
                while (inbound := await self._next()) is not None:
                    await slots.acquire()
                    nursery.start_soon(self._handle, inbound, slots)
        return self.mailbox.closed

    def _crashed(self, error: Exception) -> None:
        self.state = CellState.CRASHED
        # The message it crashed on is released: its sender may send it
        # elsewhere (sent again here, it could crash the actor again). Those it
        # was handling beside it, and those queued, stay for the next
        # incarnation (released by retire() if there is none).
        culprits, self._culprits = self._culprits or [], None
        self._requeue_inflight()
        log(
            "actorctl:actor:crashed",
            actor=self.name,
            error_type=type(error).__name__,
            error=str(error),
            released=[inbound.envelope.message_id for inbound in culprits],
            kept=self.mailbox.pending,
        )
        for inbound in culprits:
            inbound.settle(RELEASED)

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
        """Run on_stop (at most 5 s). What it raises is logged and returned: a
        failure of this actor alone, never of the task that stops it. The tasks
        it started end first."""
        await self._stop_background("stopped")
        actor = self.actor
        failed: Exception | None = None
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + 5.0
            try:
                await actor.on_stop()
            except Exception as exc:
                failed = exc
                log(
                    "actorctl:actor:on-stop-failed",
                    actor=self.name,
                    error_type=type(exc).__name__,
                    error=str(exc),
                )
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
            self.mailbox.reopen()
        self.actor._cell = self

    def stop(self) -> None:
        """Take no more messages; the actor ends after those it is handling.
        Queued messages are released (their senders may send them elsewhere)."""
        for left in self.mailbox.close():
            left.settle(RELEASED)

    async def _next(self) -> Inbound | None:
        # Take what is queued without yielding (the mailbox is bounded, so this
        # cannot starve anyone for long): the node's writer then settles a batch
        # of messages in one write instead of one write per message.
        mailbox = self.mailbox
        try:
            self._taken += 1
            if self._taken % _YIELD_EVERY:
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

    async def _handle(self, inbound: Inbound, slots: trio.Semaphore | None = None) -> None:
        # Kept while it runs: a restart puts it back in the mailbox.
        self._inflight[inbound] = None
        try:
            await self._handle_one(inbound)
        except Exception:
            # It crashed the actor: not to be run here again (_crashed).
            self._inflight.pop(inbound, None)
            if inbound.outcome is not None:
                raise  # answered already (a handler's error, OTP): nothing to release
            if self._culprits is None:
                self._culprits = []
            self._culprits.append(inbound)
            raise
        finally:
            if slots is not None:
                slots.release()
        self._inflight.pop(inbound, None)

    async def _handle_one(self, inbound: Inbound) -> None:
        envelope = inbound.envelope
        seen = self._seen
        # dedup_key, inline (per message): a re-drive's count joins the key
        plain = envelope.headers.get(REDRIVE) is None
        key = (envelope.sender, envelope.message_id) if plain else dedup_key(envelope)
        running = seen.running(key)
        if running is not None:
            await running.wait()  # a duplicate of a message being handled now
        handled = seen.get(key)
        if handled is not None:
            log(
                "actorctl:delivery:duplicate",
                actor=self.name,
                handler=envelope.subject,
                message_id=envelope.message_id,
                sender=envelope.sender,
                outcome=handled.outcome.state,
                warning="already handled: answered as the first time, not run again",
            )
            self.counters.duplicates += 1
            reply = handled.reply
            if (
                reply is not None
                and type(reply[1]) is dict
                and reply[1].get("type") == REPLY_FORGOTTEN
            ):
                seen.memory.answered += 1
            self._finish(inbound, handled)
            return
        seen.start(key)
        started = perf_counter()  # one pair per message: the latency histogram
        try:
            with continue_trace(envelope.headers.get(TRACE)):
                handled = await self.dispatch_with(self.behaviour, envelope)
        except _HandlerCrashed as crash:
            # OTP: the caller gets the error (a copy too, from the window),
            # then the actor crashes with it.
            seen.finish(key, crash.handled, self._finish(inbound, crash.handled))
            raise crash.error from crash.error.__cause__
        except BaseException:
            seen.abandon(key)  # never answered: a resend must run it
            raise
        self.counters.record(handled, perf_counter() - started)
        # Answered first, then remembered with its reply's size as sent.
        seen.finish(key, handled, self._finish(inbound, handled))

    def _finish(self, inbound: Inbound, handled: Handled) -> int:
        """Send the reply and settle; return what keeping the reply costs, in
        bytes (``send_reply``; 0: nothing to charge)."""
        size = 0
        if handled.reply is not None:
            size = send_reply(self.outbox, self.name, inbound.envelope, *handled.reply)
        if handled.outcome is ACCEPTED:
            inbound.settle(ACCEPTED)
        else:
            settle_refused(self.name, inbound, handled.outcome)
        return size

    async def dispatch_with(self, behaviour: Behaviour, envelope: Envelope) -> Handled:
        """Run ``envelope``'s handler in ``behaviour`` as every message's is run
        (the cell's own messages with its current behaviour): a document or a
        ``Terminated`` taken apart, the caller's role checked, its arguments
        bound, within the message's expiry, a plain ``def`` under the actor's
        capacity limiter; say how to answer it. (A behaviour such as a circuit
        breaker's probe runs the actor's own handlers so, not a copy of this.)"""
        if envelope.kind == KIND_DOCUMENT and not type(self.actor).takes_documents:
            return refuse(
                BAD_KIND,
                f"actor {self.name!r} takes commands and events; a document "
                "(a reply) goes to the reply address of the call it answers",
            )
        if envelope.subject == TERMINATED:
            return await self._terminated(envelope)
        spec = behaviour.__actorctl_handlers__.get(envelope.subject)
        if spec is None:
            forwarded = await behaviour.handle_unmatched(envelope)
            if forwarded is not None:
                return Handled(*forwarded)
            outcome = behaviour.unhandled(envelope)
            if outcome is not None:
                return Handled(outcome, None)
            return refuse(
                UNKNOWN_HANDLER,
                f"actor {self.name!r} has no handler {envelope.subject!r} "
                f"(it has: {', '.join(sorted(behaviour.__actorctl_handlers__)) or 'none'})",
            )
        refused = admit(self.name, spec, envelope)  # the caller's role, before its body
        if refused is not None:
            return refused
        try:
            args, kwargs = spec.bind(*envelope.call())
        except WireFormatError as exc:
            return refuse(DECODE_ERROR, str(exc))
        except BadArguments as exc:
            return refuse(BAD_ARGUMENTS, str(exc))
        deadline = math.inf
        if envelope.expiry_time is not None:
            left = envelope.expiry_time - self.outbox.now()
            if left <= 0:
                return refuse(EXPIRED, f"message expired {-left:.3f} s before it was handled")
            deadline = trio.current_time() + left
        try:
            if deadline == math.inf:  # no expiry: no cancel scope (it costs per message)
                result = await self._run(spec, behaviour, args, kwargs)
            else:
                with trio.CancelScope(deadline=deadline) as scope:
                    result = await self._run(spec, behaviour, args, kwargs)
                if scope.cancelled_caught:
                    return refuse(
                        EXPIRED, f"handler {envelope.subject!r} ran past the message's expiry"
                    )
        except Exception as exc:
            failed = handler_failed(self.name, envelope, exc)
            # A refusal (NotPermitted) is the caller's error, never the actor's.
            if self.crashes_on_error and not isinstance(exc, NotPermitted):
                raise _HandlerCrashed(failed, exc) from exc
            return failed
        return Handled(ACCEPTED, (STATUS_OK, to_wire(result)))

    async def _terminated(self, envelope: Envelope) -> Handled:
        """A watched actor is gone: tell the actor once (its hook's crash is the actor's)."""
        try:
            args, _ = envelope.call()
            terminated = converter.structure(args[0], Terminated)
        except Exception as exc:  # any malformed body
            return refuse(DECODE_ERROR, f"a Terminated message: {exc}")
        if terminated.address not in self.watching:
            return Handled(ACCEPTED, None)  # unwatched, or already told
        self.watching.discard(terminated.address)
        await self.actor.on_terminated(terminated)
        return Handled(ACCEPTED, None)

    async def _run(
        self, spec: HandlerSpec, behaviour: Behaviour, args: list[Any], kwargs: dict[str, Any]
    ) -> Any:
        if spec.is_async:
            return await spec.fn(behaviour, *args, **kwargs)
        if self._threads is None:
            self._threads = trio.CapacityLimiter(self._concurrency)
        return await run_in_thread(spec, behaviour, args, kwargs, self._threads)
