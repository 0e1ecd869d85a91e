"""How a cell runs one message: its dispatch.

A message taken from the mailbox is first looked up in the actor's dedup
window (a duplicate is answered as the first time, not run again); then its
handler is found in the current behaviour, the caller's role checked, its
arguments bound, and the handler run (a trio task, or a worker thread for a
plain ``def``, under the actor's capacity limiter) within the message's
expiry and in its eliot trace; the reply is sent, and only then is the
message settled (acks-late): by the actor's settler (``_settling.py``), once
what the handler handed it is done, if the handler handed it a wait.
``_cell.py`` owns the actor's life around this: its incarnations, its turns,
its crashes.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from time import perf_counter
from typing import Any, Final, Protocol, final

import trio

from .._errors import WireFormatError
from .._log import TRACE, continue_trace, log
from ..mailbox import (
    ACCEPTED,
    BAD_ARGUMENTS,
    BAD_KIND,
    DECODE_ERROR,
    EXPIRED,
    KIND_DOCUMENT,
    STATUS_OK,
    UNKNOWN_HANDLER,
    Envelope,
    Inbound,
)
from ._access import NotPermitted, admit
from ._actor import Actor
from ._counters import ActorCounters
from ._dedup import REDRIVE, REPLY_FORGOTTEN, Handled, SeenWindow, dedup_key
from ._handlers import BadArguments, Behaviour, HandlerSpec, converter, run_in_thread
from ._monitor import TERMINATED, Terminated
from ._ref import Outbox, to_wire
from ._replies import handler_failed, refuse, send_reply, settle_refused
from ._settling import WAITS, Deferred, Settler, Wait, Waits, wait_all

__all__ = ["Dispatch", "DispatchHost"]

#: How a message accepted with no reply was answered: one record for all of
#: them (frozen), not one made per message.
_ACCEPTED: Final = Handled(ACCEPTED, None)


class _HandlerCrashed(Exception):
    """A handler raised in an actor whose handler errors crash it: the
    answer its caller gets, and the error the actor crashes with."""

    def __init__(self, handled: Handled, error: Exception) -> None:
        super().__init__(str(error))
        self.handled = handled
        self.error = error


class DispatchHost(Protocol):
    """What the dispatch reads of its cell, at each message (the actor and its
    behaviour change with its incarnations)."""

    @property
    def name(self) -> str: ...

    outbox: Outbox
    actor: Actor
    behaviour: Behaviour
    crashes_on_error: bool

    @property
    def watching(self) -> set[str]: ...


@final
class Dispatch:
    """Runs the messages of one cell (see the module docstring).

    Args:
        cell: the cell it runs them for.
        seen: the actor's dedup window (the cell forgets what it abandons).
        counters: what it counts of its messages (read when scraped).
        concurrency: the actor's concurrency: the size of the capacity limiter
            its plain ``def`` handlers run under.
        settler: the actor's settler (``_settling.py``): the messages whose
            settlement waits for what their handlers handed it.
    """

    __slots__ = ("_cell", "_concurrency", "_seen", "_settler", "_threads", "counters")

    def __init__(
        self,
        cell: DispatchHost,
        seen: SeenWindow,
        counters: ActorCounters,
        concurrency: int,
        settler: Settler,
    ) -> None:
        self._cell = cell
        self._settler = settler
        self._seen = seen
        self.counters = counters
        self._concurrency = concurrency
        self._threads: trio.CapacityLimiter | None = None  # made by the first thread

    async def handle(self, inbound: Inbound) -> bool:
        """Run one message, or answer a duplicate as the first time, then
        reply and settle it; True if its settlement was handed to the turn's
        settler instead (it is still in hand: the settler lets it go).

        Raises:
            Exception: what crashes the actor (a handler's error, when its
                class says so: answered first).
        """
        envelope = inbound.envelope
        cell = self._cell
        seen = self._seen
        # dedup_key, inline (per message): a re-drive's count joins the key
        headers = envelope.headers
        plain = headers.get(REDRIVE) is None
        key = (envelope.sender, envelope.message_id) if plain else dedup_key(envelope)
        if not seen.begin(key) and await self._answered_before(inbound, key):
            return False
        started = perf_counter()  # one pair per message: the latency histogram
        # Waits its handler hands to the turn's settler (``_settling.py``),
        # when one runs: the message is settled once they have returned.
        settler = self._settler
        handing = Waits() if settler.running else None
        waits: list[Wait] | None = None  # what it handed over, if anything
        try:
            token = WAITS.set(handing) if handing is not None else None
            try:
                trace = headers.get(TRACE)
                if trace is None:  # most messages: no trace to continue, nothing to enter
                    handled = await self.dispatch_with(cell.behaviour, envelope)
                else:
                    with continue_trace(trace):
                        handled = await self.dispatch_with(cell.behaviour, envelope)
            finally:
                if token is not None and handing is not None:
                    WAITS.reset(token)
                    handing.open = False
                    waits = handing.items
            if waits and not settler.running:  # its turn ends: no settler to hand them to
                await wait_all(waits)
                waits = None
        except _HandlerCrashed as crash:
            # OTP: the caller gets the error (a copy too, from the window),
            # then the actor crashes with it.
            if waits:
                await wait_all(waits)
            seen.finish(key, crash.handled, self.finish(inbound, crash.handled))
            raise crash.error from crash.error.__cause__
        except BaseException:
            seen.abandon(key)  # never answered: a resend must run it
            raise
        if waits:
            settler.add(Deferred(inbound, key, handled, started, waits))
            return True
        self.counters.record(handled, perf_counter() - started)
        # Answered first, then remembered with its reply's size as sent.
        if handled is _ACCEPTED:  # finish's answer, inline: settled, no reply
            inbound.settle(ACCEPTED)
            seen.finish(key, handled)
        else:
            seen.finish(key, handled, self.finish(inbound, handled))
        return False

    async def _answered_before(self, inbound: Inbound, key: Hashable) -> bool:
        """A message whose key the window holds, or is handling now
        (``SeenWindow.begin`` said so): a duplicate waits for its first copy
        to finish, and is answered as that was (True). False: it runs after
        all (its entry had expired, or its first copy was abandoned), begun."""
        envelope = inbound.envelope
        seen = self._seen
        running = seen.running(key)
        if running is not None:
            await running.wait()  # a duplicate of a message being handled now
        handled = seen.get(key)
        if handled is None:
            seen.start(key)
            return False
        log(
            "actorctl:delivery:duplicate",
            actor=self._cell.name,
            handler=envelope.subject,
            message_id=envelope.message_id,
            sender=envelope.sender,
            outcome=handled.outcome.state,
            warning="already handled: answered as the first time, not run again",
        )
        self.counters.duplicates += 1
        reply = handled.reply
        if reply is not None and type(reply[1]) is dict and reply[1].get("type") == REPLY_FORGOTTEN:
            seen.memory.answered += 1
        self.finish(inbound, handled)
        return True

    def settle(self, batch: list[Deferred], inflight: dict[Inbound, None]) -> None:
        """Count, answer and settle the messages of ``batch`` (their waits
        returned), remember each in the dedup window, and let it go from
        ``inflight`` (the cell's: one no longer there was put back in the
        mailbox meanwhile, and is left alone)."""
        seen, counters = self._seen, self.counters
        now, ended = seen.clock(), perf_counter()
        for deferred in batch:
            inbound = deferred.inbound
            if inbound not in inflight:
                continue
            handled = deferred.handled
            counters.record(handled, ended - deferred.started)
            # Answered first, then remembered with its reply's size as sent.
            if handled is _ACCEPTED:  # finish's answer, inline: settled, no reply
                inbound.settle(ACCEPTED)
                seen.finish(deferred.key, handled, 0, now)
            else:
                seen.finish(deferred.key, handled, self.finish(inbound, handled), now)
            del inflight[inbound]

    def finish(self, inbound: Inbound, handled: Handled) -> int:
        """Send the reply and settle; return what keeping the reply costs, in
        bytes (``send_reply``; 0: nothing to charge)."""
        size = 0
        cell = self._cell
        if handled.reply is not None:
            size = send_reply(cell.outbox, cell.name, inbound.envelope, *handled.reply)
        if handled.outcome is ACCEPTED:
            inbound.settle(ACCEPTED)
        else:
            settle_refused(cell.name, inbound, handled.outcome)
        return size

    async def dispatch_with(self, behaviour: Behaviour, envelope: Envelope) -> Handled:
        """Run ``envelope``'s handler in ``behaviour`` as every message's is run
        (the cell's own messages with its current behaviour): a document or a
        ``Terminated`` taken apart, the caller's role checked, its arguments
        bound, within the message's expiry, a plain ``def`` under the actor's
        capacity limiter; say how to answer it. (A behaviour such as a circuit
        breaker's probe runs the actor's own handlers so, not a copy of this.)"""
        cell = self._cell
        if envelope.kind == KIND_DOCUMENT and not type(cell.actor).takes_documents:
            return refuse(
                BAD_KIND,
                f"actor {cell.name!r} takes commands and events; a document "
                "(a reply) goes to the reply address of the call it answers",
            )
        if envelope.subject == TERMINATED:
            return await self._terminated(envelope)
        spec = behaviour.__actorctl_handlers__.get(envelope.subject)
        if spec is None:
            forwarded = await behaviour.handle_unmatched(envelope)
            if forwarded is not None:
                if forwarded[0] is ACCEPTED and forwarded[1] is None:
                    return _ACCEPTED  # (most: a task worker's, per message)
                return Handled(*forwarded)
            outcome = behaviour.unhandled(envelope)
            if outcome is not None:
                return Handled(outcome, None)
            return refuse(
                UNKNOWN_HANDLER,
                f"actor {cell.name!r} has no handler {envelope.subject!r} "
                f"(it has: {', '.join(sorted(behaviour.__actorctl_handlers__)) or 'none'})",
            )
        name = cell.name
        refused = admit(name, spec, envelope)  # the caller's role, before its body
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
            left = envelope.expiry_time - cell.outbox.now()
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
            failed = handler_failed(name, envelope, exc)
            # A refusal (NotPermitted) is the caller's error, never the actor's.
            if cell.crashes_on_error and not isinstance(exc, NotPermitted):
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
        cell = self._cell
        if terminated.address not in cell.watching:
            return Handled(ACCEPTED, None)  # unwatched, or already told
        cell.watching.discard(terminated.address)
        await cell.actor.on_terminated(terminated)
        return Handled(ACCEPTED, None)

    async def _run(
        self, spec: HandlerSpec, behaviour: Behaviour, args: list[Any], kwargs: dict[str, Any]
    ) -> Any:
        if spec.is_async:
            return await spec.fn(behaviour, *args, **kwargs)
        if self._threads is None:
            self._threads = trio.CapacityLimiter(self._concurrency)
        return await run_in_thread(spec, behaviour, args, kwargs, self._threads)
