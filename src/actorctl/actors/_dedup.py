"""The idempotent receiver: what an actor remembers of the messages it handled.

A sender that did not see a message settled sends it again (at-least-once), so
an actor may receive a message it already handled. Within a window bounded in
count and in time it remembers each message's outcome and reply, and answers a
duplicate as the first time instead of running the handler again.

A message is known by its sender and its message id (:func:`dedup_key`): the
sender is the identity that authenticated it (or the origin a router asserted
for it), so that one identity never receives another's cached answer, and an
identity that guesses another's message ids only fills its own entries.

What it keeps of replies is bounded in bytes too (:class:`ReplyMemory`): per
actor and per node, the oldest going first. A reply it no longer keeps is
*forgotten*: the entry stays, and a duplicate is answered with a
``ReplyForgotten`` error document instead of the reply, without running the
handler again (docs/guarantees.md, "Replies kept for duplicates").

A message that carries the ``redrive`` header (a dead letter sent again by
hand, docs/protocol.md §5.1, §12.3) is known by its count too: the re-drive of
a message keeps its id, and must run although the original was handled.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Final, final

import attrs
import trio

from .._log import log
from ..mailbox import STATUS_ERROR, Envelope, Outcome

__all__ = [
    "DEFAULT_ACTOR_BYTES",
    "DEFAULT_NODE_BYTES",
    "REDRIVE",
    "REPLY_FORGOTTEN",
    "Handled",
    "ReplyMemory",
    "SeenWindow",
    "dedup_key",
]

#: The error ``type`` of the reply document a duplicate gets when the reply to
#: its first copy is no longer kept (its handler is not run again).
REPLY_FORGOTTEN: Final = "ReplyForgotten"
#: Bytes of replies the dedup windows of one node keep at most, all together.
DEFAULT_NODE_BYTES: Final = 64 << 20
#: Bytes of replies one actor's dedup window keeps at most.
DEFAULT_ACTOR_BYTES: Final = 16 << 20

#: The header of a re-driven dead letter: how many times it was re-driven.
REDRIVE: Final = "redrive"


def dedup_key(envelope: Envelope) -> tuple[Any, ...]:
    """What a message is known by in the window: (sender, message id), and
    its ``redrive`` count if it has one."""
    redrive = envelope.headers.get(REDRIVE)
    if redrive is None:
        return (envelope.sender, envelope.message_id)
    return (envelope.sender, envelope.message_id, redrive)


@attrs.frozen(slots=True)
class Handled:
    """How a message was answered: its outcome and, if one was sent, the reply."""

    outcome: Outcome
    reply: tuple[str, Any] | None  # (status, body)


def forgotten(handled: Handled, size: int, why: str) -> Handled:
    """``handled`` with its reply replaced by the ``ReplyForgotten`` error a
    duplicate gets: the handler ran once, its reply of ``size`` bytes is gone."""
    return Handled(
        handled.outcome,
        (
            STATUS_ERROR,
            {
                "type": REPLY_FORGOTTEN,
                "message": f"this message was handled already and is not run again; its "
                f"reply ({size} bytes) is no longer kept: {why}",
            },
        ),
    )


@final
class ReplyMemory:
    """The bytes of replies that the dedup windows of one node keep, and their bounds.

    A window charges each reply it keeps with its size as encoded (its caller
    measured it when it sent it: no walk over the value). When one actor's
    window holds more than ``per_actor`` bytes, its own oldest replies are
    forgotten; when the node's windows hold more than ``max_bytes``, the node's
    oldest, whichever actor kept them. A reply larger than either bound is not
    kept at all. A forgotten reply's entry stays in its window (the message is
    still known: it is not run again). Each bound reached is logged
    (``actorctl:dedup:bound-reached``) once, and again only after the bytes
    fell back under three quarters of it; :attr:`forgotten` counts them all.

    Attributes:
        bytes: the bytes of replies kept now, all windows together.
        forgotten: replies forgotten for a bound (or never kept, too large).
        answered: duplicates answered with ``ReplyForgotten`` (not run again).
    """

    __slots__ = (
        "_full",
        "_order",
        "answered",
        "bytes",
        "forgotten",
        "max_bytes",
        "node",
        "per_actor",
    )

    def __init__(
        self,
        max_bytes: int = DEFAULT_NODE_BYTES,
        per_actor: int = DEFAULT_ACTOR_BYTES,
        node: str = "",
    ) -> None:
        if max_bytes < 0 or per_actor < 0:
            raise ValueError("a bound of kept replies cannot be negative")
        self.max_bytes = max_bytes
        self.per_actor = per_actor
        self.node = node
        self.bytes = 0
        self.forgotten = 0
        self.answered = 0
        # Every reply kept, oldest first: (window, key) -> its size.
        self._order: OrderedDict[tuple[SeenWindow, Hashable], int] = OrderedDict()
        self._full = False  # the node's bound was reached (and logged)

    def keep(self, window: SeenWindow, key: Hashable, size: int) -> None:
        """``window`` keeps a reply of ``size`` bytes for ``key``; the node's
        oldest replies are forgotten while the node is over its bound."""
        self._order[(window, key)] = size
        self.bytes += size
        if self.bytes > self.max_bytes:
            self._over()

    def release(self, window: SeenWindow, key: Hashable) -> None:
        """``window`` no longer keeps the reply for ``key``."""
        size = self._order.pop((window, key), 0)
        self.bytes -= size
        if self._full and self.bytes < self.max_bytes * 3 // 4:
            self._full = False

    def _over(self) -> None:
        if not self._full:
            self._full = True
            bound_reached(self.node, "", self.bytes, self.max_bytes, "max_kept_reply_bytes")
        order = self._order
        while self.bytes > self.max_bytes and order:
            window, key = next(iter(order))
            window.forget(
                key,
                f"the node keeps at most {self.max_bytes} bytes of replies for "
                "duplicates (max_kept_reply_bytes), the oldest going first",
            )


def bound_reached(node: str, actor: str, held: int, bound: int, name: str) -> None:
    """Log that a bound of kept replies was reached: the oldest go from now on."""
    log(
        "actorctl:dedup:bound-reached",
        node=node,
        actor=actor,
        bound=name,
        bytes=held,
        max_bytes=bound,
        warning="replies kept for duplicates reached their bound: the oldest are "
        "forgotten (a duplicate of one gets a ReplyForgotten error, not a second run)",
    )


@final
class SeenWindow:
    """Messages handled recently, by key (:func:`dedup_key`), at most ``count``
    of them, none older than ``seconds``, their replies within the bounds of
    ``memory`` (a fresh :class:`ReplyMemory` with the default bounds if None).
    Lookups and inserts are O(1); old entries go on insert."""

    def __init__(
        self,
        count: int,
        seconds: float,
        clock: Callable[[], float] = trio.current_time,
        *,
        memory: ReplyMemory | None = None,
        name: str = "",
    ) -> None:
        if count < 0 or seconds < 0:
            raise ValueError("the dedup window cannot be negative")
        self.count = count
        self.seconds = seconds
        self.name = name
        self.memory = memory if memory is not None else ReplyMemory()
        #: Bytes of the replies this window keeps now.
        self.bytes = 0
        self._clock = clock
        self._entries: OrderedDict[Hashable, tuple[float, Handled]] = OrderedDict()
        # When its oldest entry was made, or earlier (when it has one): while
        # no entry could have aged out, none is read per insert to know it.
        self._oldest_at = 0.0
        # The keys whose replies it keeps, oldest first, with their sizes.
        self._kept: OrderedDict[Hashable, int] = OrderedDict()
        self._full = False  # its own bound was reached (and logged)
        # Messages being handled now: a duplicate waits for the first to finish,
        # on an event the first such duplicate makes (None until one does: a
        # duplicate mid-run is rare, and an event per message costs).
        self._running: dict[Hashable, trio.Event | None] = {}

    def get(self, key: Hashable) -> Handled | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if self._clock() - entry[0] > self.seconds:
            return None
        return entry[1]

    def running(self, key: Hashable) -> trio.Event | None:
        """What a duplicate of ``key`` waits on while its first copy is being
        handled (set when it finishes, or is abandoned), or None if it is not
        (finished already: :meth:`get` has its answer). The event is made by
        the first duplicate that asks; the first copy sets it if one was."""
        running = self._running
        if key not in running:
            return None
        done = running[key]
        if done is None:
            done = running[key] = trio.Event()
        return done

    def begin(self, key: Hashable) -> bool:
        """If ``key`` is neither being handled nor remembered (most messages),
        :meth:`start` it and return True; else False, and nothing changes: the
        caller asks :meth:`running` and :meth:`get` (one call per message
        instead of those three)."""
        if key in self._running or key in self._entries:
            return False
        if self.count:
            self._running[key] = None
        return True

    def start(self, key: Hashable) -> None:
        """The message ``key`` is being handled (its duplicates wait: :meth:`running`)."""
        if self.count:
            self._running[key] = None

    def abandon(self, key: Hashable) -> None:
        """The message was not handled after all (its handler was cancelled)."""
        done = self._running.pop(key, None)
        if done is not None:
            done.set()

    def clock(self) -> float:
        """The window's clock now (what :meth:`finish` takes as ``now``)."""
        return self._clock()

    def finish(
        self, key: Hashable, handled: Handled, size: int = 0, now: float | None = None
    ) -> None:
        """Remember how the message ``key`` was answered. ``size``: what keeping
        its reply costs, in bytes (its length as encoded); 0 charges nothing (a
        ``None`` result). ``now``: :meth:`clock` read already (a batch's)."""
        done = self._running.pop(key, None)
        # ``modified`` (an open circuit breaker) and ``released`` (given back by
        # an actor that stops) are not remembered: the message was not handled,
        # and the same message sent again later must run.
        if self.count and handled.outcome.state not in ("modified", "released"):
            entries = self._entries
            if now is None:
                now = self._clock()
            if self._kept and key in self._kept:
                self._release(key)  # handled again (its entry had expired)
            if size and handled.reply is not None:
                handled = self._keep(key, handled, size)
            if key in entries:  # handled again (its entry had expired): now the newest
                entries[key] = (now, handled)
                entries.move_to_end(key)
                self._oldest_at = next(iter(entries.values()))[0]
            else:
                if not entries:
                    self._oldest_at = now
                entries[key] = (now, handled)
            kept = self._kept
            while len(entries) > self.count:  # full (under load: one goes per message)
                old, _ = entries.popitem(last=False)
                if kept and old in kept:
                    self._release(old)
            # ``_oldest_at`` is never after the oldest entry's time (a pop for
            # the count leaves it as it was: the oldest only gets newer), so
            # the oldest is looked at only when it may have aged out.
            seconds = self.seconds
            while entries and now - self._oldest_at > seconds:
                oldest_at = next(iter(entries.values()))[0]
                if now - oldest_at <= seconds:
                    self._oldest_at = oldest_at
                    break
                old, _ = entries.popitem(last=False)
                if kept and old in kept:
                    self._release(old)
        if done is not None:
            done.set()

    def _keep(self, key: Hashable, handled: Handled, size: int) -> Handled:
        """Charge the reply to ``key`` (``size`` bytes) to this window and the
        node; return what to remember (the reply forgotten if it is too large)."""
        memory = self.memory
        bound = memory.per_actor
        if size > bound or size > memory.max_bytes:
            memory.forgotten += 1
            name, most = (
                ("max_kept_reply_bytes_per_actor", bound)
                if size > bound
                else ("max_kept_reply_bytes", memory.max_bytes)
            )
            return forgotten(handled, size, f"it is larger than {name} ({most} bytes)")
        self._kept[key] = size
        self.bytes += size
        if self.bytes > bound:
            if not self._full:
                self._full = True
                bound_reached(
                    memory.node, self.name, self.bytes, bound, "max_kept_reply_bytes_per_actor"
                )
            why = (
                f"actor {self.name!r} keeps at most {bound} bytes of replies for duplicates "
                "(max_kept_reply_bytes_per_actor), the oldest going first"
            )
            while self.bytes > bound:
                self.forget(next(iter(self._kept)), why)
        memory.keep(self, key, size)  # may forget the node's oldest replies, here too
        return handled

    def forget(self, key: Hashable, why: str) -> None:
        """Keep the entry of ``key`` but no longer its reply: a duplicate gets
        a ``ReplyForgotten`` error saying ``why``."""
        size = self._kept.get(key)
        if size is None:
            return
        self._release(key)
        self.memory.forgotten += 1
        entry = self._entries.get(key)
        if entry is not None:
            self._entries[key] = (entry[0], forgotten(entry[1], size, why))

    def _release(self, key: Hashable) -> None:
        self.bytes -= self._kept.pop(key)
        self.memory.release(self, key)
        if self._full and self.bytes < self.memory.per_actor * 3 // 4:
            self._full = False

    def __len__(self) -> int:
        return len(self._entries)
