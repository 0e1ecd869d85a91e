"""How an incarnation of an actor ends, and what becomes of its messages.

An actor ends in one of four ways (``_cell.py`` decides which): its mailbox
closed (it stopped), its supervisor stopped it from outside, it crashed, or
its supervisor will not start it again (it retired). Each way settles the
messages it had in a different way, and docs/guarantees.md promises which:

- those it was *handling* go back to the head of its mailbox, for its next
  incarnation (at least once: they may run twice), their dedup entries
  abandoned so that they run again rather than wait for a reply that will
  never come (:func:`requeue_inflight`);
- the message it *crashed on* goes back to its sender as ``modified`` with
  ``actorctl:actor-crashed``, not ``released``: a plain tell's sender sends a
  released message again, and sent again here it could crash the actor again
  (:func:`report_crash`);
- those *queued* stay for the next incarnation, or, when there is none, are
  released to their senders, who send them again elsewhere instead of waiting
  (:func:`release_queued`).

Its own code runs last: ``on_drain`` when its node begins a graceful stop, and
``on_stop`` for at most :data:`ON_STOP_LIMIT` seconds. What either raises is
logged, a failure of this actor alone, never of the task that stops it.
"""

from __future__ import annotations

from typing import Final

import trio

from .._log import log
from ..mailbox import CRASHED, RELEASED, Inbound, Mailbox, Outcome
from ._actor import Actor
from ._dedup import dedup_key
from ._parts import CellParts

__all__ = [
    "ON_STOP_LIMIT",
    "drain_actor",
    "release_queued",
    "report_crash",
    "requeue_inflight",
    "run_on_stop",
]

#: Seconds an actor's ``on_stop`` may take; then it is cancelled (shielded from
#: the cancellation that is stopping it, so that it runs at all).
ON_STOP_LIMIT: Final = 5.0


def requeue_inflight(parts: CellParts | None, mailbox: Mailbox) -> None:
    """Put the messages an actor was handling (``parts.inflight``) back at the
    head of its ``mailbox``, in the order it took them, or release them if the
    mailbox is closed: never left unsettled on a live link."""
    if parts is not None and parts.inflight:
        inflight = list(parts.inflight)
        parts.inflight.clear()
        for inbound in inflight:
            parts.seen.abandon(dedup_key(inbound.envelope))
        mailbox.requeue(inflight)


def release_queued(mailbox: Mailbox, name: str, why: str) -> None:
    """Close ``mailbox`` for good and release what waits there to its senders,
    logging which messages went back and ``why``."""
    released = mailbox.close()
    if released:
        log(
            "actorctl:actor:released",
            actor=name,
            why=why,
            released=[inbound.envelope.message_id for inbound in released],
        )
    for left in released:
        left.settle(RELEASED)


def report_crash(name: str, error: Exception, culprits: list[Inbound], kept: int) -> None:
    """Log that actor ``name`` crashed with ``error`` (``kept`` messages stay in
    its mailbox) and give the messages it crashed on back to their senders as
    ``modified`` (see the module docstring)."""
    log(
        "actorctl:actor:crashed",
        actor=name,
        error_type=type(error).__name__,
        error=str(error),
        released=[inbound.envelope.message_id for inbound in culprits],
        kept=kept,
    )
    if culprits:
        why = f"actor {name!r} crashed on it ({type(error).__name__}: {error})"
        crashed = Outcome.modified(CRASHED, why)
        for inbound in culprits:
            inbound.settle(crashed)


async def run_on_stop(actor: Actor, name: str) -> Exception | None:
    """Run ``actor.on_stop`` (at most :data:`ON_STOP_LIMIT` seconds, shielded):
    what it raises is logged and returned, not raised."""
    failed: Exception | None = None
    with trio.CancelScope(shield=True) as scope:
        scope.deadline = trio.current_time() + ON_STOP_LIMIT
        try:
            await actor.on_stop()
        except Exception as exc:
            failed = exc
            log(
                "actorctl:actor:on-stop-failed",
                actor=name,
                error_type=type(exc).__name__,
                error=str(exc),
            )
    return failed


def drain_actor(actor: Actor, name: str) -> None:
    """Tell ``actor`` its node begins a graceful stop (``on_drain``): it may
    give back what it holds and has not begun. What it raises is logged."""
    try:
        actor.on_drain()
    except Exception as exc:
        log(
            "actorctl:actor:on-drain-failed",
            actor=name,
            error_type=type(exc).__name__,
            error=str(exc),
        )
