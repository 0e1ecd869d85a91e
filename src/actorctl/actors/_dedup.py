"""The idempotent receiver: what an actor remembers of the messages it handled.

A sender that did not see a message settled sends it again (at-least-once), so
an actor may receive a message it already handled. Within a window bounded in
count and in time it remembers each message's outcome and reply, and answers a
duplicate as the first time instead of running the handler again.

A message is known by its sender and its message id (:func:`dedup_key`): the
sender is the identity that authenticated it (or the origin a router asserted
for it), so that one identity never receives another's cached answer, and an
identity that guesses another's message ids only fills its own entries.

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

from ..mailbox import Envelope, Outcome

__all__ = ["REDRIVE", "Handled", "SeenWindow", "dedup_key"]

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


@final
class SeenWindow:
    """Messages handled recently, by key (:func:`dedup_key`), at most ``count``
    of them, none older than ``seconds``. Lookups and inserts are O(1); old
    entries go on insert."""

    def __init__(
        self, count: int, seconds: float, clock: Callable[[], float] = trio.current_time
    ) -> None:
        if count < 0 or seconds < 0:
            raise ValueError("the dedup window cannot be negative")
        self.count = count
        self.seconds = seconds
        self._clock = clock
        self._entries: OrderedDict[Hashable, tuple[float, Handled]] = OrderedDict()
        # Messages being handled now: a duplicate waits for the first to finish.
        self._running: dict[Hashable, trio.Event] = {}

    def get(self, key: Hashable) -> Handled | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if self._clock() - entry[0] > self.seconds:
            return None
        return entry[1]

    def running(self, key: Hashable) -> trio.Event | None:
        return self._running.get(key)

    def start(self, key: Hashable) -> None:
        if self.count:
            self._running[key] = trio.Event()

    def abandon(self, key: Hashable) -> None:
        """The message was not handled after all (its handler was cancelled)."""
        done = self._running.pop(key, None)
        if done is not None:
            done.set()

    def finish(self, key: Hashable, handled: Handled) -> None:
        done = self._running.pop(key, None)
        # ``modified`` (an open circuit breaker) and ``released`` (given back by
        # an actor that stops) are not remembered: the message was not handled,
        # and the same message sent again later must run.
        if self.count and handled.outcome.state not in ("modified", "released"):
            entries = self._entries
            now = self._clock()
            entries[key] = (now, handled)
            entries.move_to_end(key)
            while entries and (
                len(entries) > self.count or now - next(iter(entries.values()))[0] > self.seconds
            ):
                entries.popitem(last=False)
        if done is not None:
            done.set()

    def __len__(self) -> int:
        return len(self._entries)
