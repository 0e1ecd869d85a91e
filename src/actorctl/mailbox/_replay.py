"""The replay check's memory: which signed messages were accepted recently."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Final, final

from .._log import log

__all__ = ["DEFAULT_REPLAY_BYTES", "ENTRY_BYTES", "Journal", "ReplayCache"]

#: Bytes a replay cache holds at most by default (see :class:`ReplayCache`).
DEFAULT_REPLAY_BYTES: Final = 32 << 20
#: What one entry costs besides its ids' characters: the dict slot, the queue
#: item, their tuples and float (about, on CPython 3.12, 64-bit).
ENTRY_BYTES: Final = 200

#: Told each entry the cache adds (its key and the time in ms it is held until),
#: to keep it elsewhere too: a node writes it behind to its durable store.
Journal = Callable[[tuple[str, str], float], None]


@final
class ReplayCache:
    """The (key id, message id) pairs accepted recently.

    Each entry is kept until the time (in ms) it was added with: past that, a
    copy of the message would be outside the time window anyway. At most
    ``max_entries`` are kept: when a flood of messages exceeds that within one
    window, the oldest go early, and a replay of one of those would be accepted
    (the receiving actor's dedup window still answers it without a second run,
    if it holds it). It holds at most ``max_bytes`` too, each entry counted as
    the lengths of its two ids plus :data:`ENTRY_BYTES`: ids are as long as a
    sender makes them, so a count alone does not bound the memory. Reaching
    either bound is logged (``actorctl:replay:bound-reached``) once, and again
    after the cache fell back under three quarters of it.
    Entries are purged from the oldest end as each new one is added, so every
    call is O(1) amortized.

    Attributes:
        journal: told every entry added (not those loaded): None keeps the
            cache in memory alone.
        bytes: what its entries cost now, counted as above.
        dropped: entries dropped early for a bound (before their time ran out).
    """

    def __init__(
        self, max_entries: int = 100_000, max_bytes: int = DEFAULT_REPLAY_BYTES, node: str = ""
    ) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError("a replay cache holds at least one entry and one byte")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.node = node
        self.journal: Journal | None = None
        self.bytes = 0
        self.dropped = 0
        self._full = False
        self._until: dict[tuple[str, str], float] = {}
        self._order: deque[tuple[float, tuple[str, str]]] = deque()

    def __len__(self) -> int:
        return len(self._until)

    def check_and_add(self, key: tuple[str, str], until_ms: float, now_ms: float) -> bool:
        """True if ``key`` was added before and is still held at ``now_ms``;
        otherwise add it, to be held until ``until_ms``, and return False."""
        order, held = self._order, self._until
        while order and order[0][0] < now_ms:
            self._drop(*order.popleft())
        if key in held and held[key] >= now_ms:  # in and []: no call (per message)
            return True
        held[key] = until_ms
        order.append((until_ms, key))
        self.bytes += len(key[0]) + len(key[1]) + ENTRY_BYTES
        if len(order) > self.max_entries or self.bytes > self.max_bytes:
            self._trim()
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
            self.bytes += len(key[0]) + len(key[1]) + ENTRY_BYTES
            loaded += 1
        self._trim()
        return loaded

    def forget(self, key: tuple[str, str]) -> None:
        """Accept ``key`` once more (its message was not executed, e.g. released)."""
        self._until.pop(key, None)

    def _trim(self) -> None:
        """Drop the oldest entries while a bound is exceeded (logged once)."""
        order = self._order
        if not (len(order) > self.max_entries or self.bytes > self.max_bytes):
            return
        if not self._full:
            self._full = True
            log(
                "actorctl:replay:bound-reached",
                node=self.node,
                entries=len(order),
                max_entries=self.max_entries,
                bytes=self.bytes,
                max_bytes=self.max_bytes,
                warning="the replay cache reached its bound: the oldest ids go before "
                "their time (a replay of one is left to the dedup window)",
            )
        while order and (len(order) > self.max_entries or self.bytes > self.max_bytes):
            self._drop(*order.popleft())
            self.dropped += 1

    def _drop(self, until_ms: float, key: tuple[str, str]) -> None:
        self.bytes -= len(key[0]) + len(key[1]) + ENTRY_BYTES
        if (
            self._full
            and self.bytes < self.max_bytes * 3 // 4
            and len(self._order) < self.max_entries * 3 // 4
        ):
            self._full = False
        held = self._until
        if key in held and held[key] == until_ms:  # in and []: no call (per entry)
            del held[key]
