"""The idempotent receiver: what an actor remembers of the messages it handled.

A sender that did not see a message settled sends it again (at-least-once), so
an actor may receive a message it already handled. Within a window bounded in
count and in time it remembers each message id's outcome and reply, and answers
a duplicate as the first time instead of running the handler again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, final

import attrs
import trio

from ..mailbox import Outcome

__all__ = ["Handled", "SeenWindow"]


@attrs.frozen(slots=True)
class Handled:
    """How a message was answered: its outcome and, if one was sent, the reply."""

    outcome: Outcome
    reply: tuple[str, Any] | None  # (status, body)


@final
class SeenWindow:
    """Message ids handled recently, at most ``count`` of them, none older than
    ``seconds``. Lookups and inserts are O(1); old entries go on insert."""

    def __init__(
        self, count: int, seconds: float, clock: Callable[[], float] = trio.current_time
    ) -> None:
        if count < 0 or seconds < 0:
            raise ValueError("the dedup window cannot be negative")
        self.count = count
        self.seconds = seconds
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, Handled]] = OrderedDict()
        # Messages being handled now: a duplicate waits for the first to finish.
        self._running: dict[str, trio.Event] = {}

    def get(self, message_id: str) -> Handled | None:
        entry = self._entries.get(message_id)
        if entry is None:
            return None
        if self._clock() - entry[0] > self.seconds:
            return None
        return entry[1]

    def running(self, message_id: str) -> trio.Event | None:
        return self._running.get(message_id)

    def start(self, message_id: str) -> None:
        if self.count:
            self._running[message_id] = trio.Event()

    def abandon(self, message_id: str) -> None:
        """The message was not handled after all (its handler was cancelled)."""
        done = self._running.pop(message_id, None)
        if done is not None:
            done.set()

    def finish(self, message_id: str, handled: Handled) -> None:
        done = self._running.pop(message_id, None)
        if self.count:
            entries = self._entries
            now = self._clock()
            entries[message_id] = (now, handled)
            entries.move_to_end(message_id)
            while entries and (
                len(entries) > self.count or now - next(iter(entries.values()))[0] > self.seconds
            ):
                entries.popitem(last=False)
        if done is not None:
            done.set()

    def __len__(self) -> int:
        return len(self._entries)
