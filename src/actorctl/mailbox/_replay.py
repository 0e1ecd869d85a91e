"""The replay check's memory: which signed messages were accepted recently."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import final

__all__ = ["Journal", "ReplayCache"]

#: Told each entry the cache adds (its key and the time in ms it is held until),
#: to keep it elsewhere too: a node writes it behind to its durable store.
Journal = Callable[[tuple[str, str], float], None]


@final
class ReplayCache:
    """The (key id, message id) pairs accepted recently.

    Each entry is kept until the time (in ms) it was added with: past that, a
    copy of the message would be outside the time window anyway. At most
    ``max_entries`` are kept: when a flood of messages exceeds that within one
    window, the oldest go early, and a replay of one of those would be accepted.
    Entries are purged from the oldest end as each new one is added, so every
    call is O(1) amortized.

    Attributes:
        journal: told every entry added (not those loaded): None keeps the
            cache in memory alone.
    """

    def __init__(self, max_entries: int = 100_000) -> None:
        if max_entries < 1:
            raise ValueError("a replay cache holds at least one entry")
        self.max_entries = max_entries
        self.journal: Journal | None = None
        self._until: dict[tuple[str, str], float] = {}
        self._order: deque[tuple[float, tuple[str, str]]] = deque()

    def __len__(self) -> int:
        return len(self._until)

    def check_and_add(self, key: tuple[str, str], *, until_ms: float, now_ms: float) -> bool:
        """True if ``key`` was added before and is still held at ``now_ms``;
        otherwise add it, to be held until ``until_ms``, and return False."""
        order, held = self._order, self._until
        while order and order[0][0] < now_ms:
            self._drop(*order.popleft())
        seen = held.get(key)
        if seen is not None and seen >= now_ms:
            return True
        held[key] = until_ms
        order.append((until_ms, key))
        if len(order) > self.max_entries:
            self._drop(*order.popleft())
        journal = self.journal
        if journal is not None:
            journal(key, until_ms)
        return False

    def load(self, entries: list[tuple[tuple[str, str], float]], *, now_ms: float) -> int:
        """Hold ``entries`` (key, until in ms) kept from before a restart, those
        still held at ``now_ms``, oldest first; the journal is not told. Returns
        how many were loaded."""
        loaded = 0
        for key, until_ms in sorted(entries, key=lambda entry: entry[1]):
            if until_ms < now_ms or self._until.get(key, -1.0) >= until_ms:
                continue
            self._until[key] = until_ms
            self._order.append((until_ms, key))
            loaded += 1
        while len(self._order) > self.max_entries:
            self._drop(*self._order.popleft())
        return loaded

    def forget(self, key: tuple[str, str]) -> None:
        """Accept ``key`` once more (its message was not executed, e.g. released)."""
        self._until.pop(key, None)

    def _drop(self, until_ms: float, key: tuple[str, str]) -> None:
        if self._until.get(key) == until_ms:
            del self._until[key]
