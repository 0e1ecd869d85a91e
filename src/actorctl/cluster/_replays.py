"""A node's replay cache, kept in its durable store so that it outlives the process.

The replay check (docs/protocol.md §11.8) remembers each signed message a node
accepted until its creation time plus the time window. The entries are written
behind to the node's store: each accepted message queues one row, and the store
commits the queue in its group commits, off the event loop's thread; nothing
waits for the disk. At start the node loads the rows still within their window.

Bounds: the table is a ring of as many rows as the cache holds entries (100 000
by default): each new entry replaces the oldest row, so the table never grows
past that count; rows also expire with their entry, and the store purges them.
A row holds the ids its sender chose, as long as the message allowed, so the
table is bounded in bytes too (``max_bytes``, the node's
``max_replay_journal_bytes``): the journal keeps a running count of what its
rows hold (:func:`row_bytes`) and, before a row would pass the bound, deletes the
oldest rows until it fits (logged once as ``actorctl:replay:journal-full``, and
again once the rows fell back under three quarters of the bound). The count
costs no query: the journal keeps each row's size and expiry in two arrays, one
slot per ring slot, and forgets a row ``EXPIRY_GRACE`` s after it expired (by
then the store has purged it from the disk), so the count is never below what
the rows on disk hold.

What a SIGKILL can lose is the batch not yet committed (milliseconds of
messages): those could be accepted once more after a restart, had the node kept
its container id (it never does: signatures name the node's container id, which
is new in every process, so a message signed before a restart fails at the new
process anyway; this table is the second line).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Final, final

from .._log import log
from ..mailbox import ReplayCache
from ..store._store import PURGE_EVERY, Store

__all__ = ["DEFAULT_JOURNAL_BYTES", "EXPIRY_GRACE", "ROW_BYTES", "ReplayJournal", "row_bytes"]

TABLE: Final = "replay"
#: Bytes the journal's rows may hold at most by default (``max_replay_journal_bytes``).
DEFAULT_JOURNAL_BYTES: Final = 64 << 20
#: What a row costs in the store besides its key and value: the table's name, the
#: expiry, the row's entry in the primary key's index and SQLite's headers (about).
ROW_BYTES: Final = 64
#: Seconds a row is counted past its expiry: the store purges expired rows from
#: the disk every ``PURGE_EVERY`` s, so twice that covers a purge that comes late.
EXPIRY_GRACE: Final = 2 * PURGE_EVERY
_GRACE_MS: Final = EXPIRY_GRACE * 1000.0


def row_bytes(slot: str, value: bytes) -> int:
    """What the row ``slot`` holding ``value`` counts against the journal's bound."""
    return len(slot) + len(value) + ROW_BYTES


@final
class ReplayJournal:
    """Writes a replay cache behind to a store, and loads it back at start.

    Args:
        store: the node's store; a memory store keeps nothing (the cache stays
            in memory alone).
        cache: the node's replay cache.
        clock: wall-clock seconds since the epoch (the cache's times are on it).
        max_bytes: what its rows may hold, counted by :func:`row_bytes`.

    Attributes:
        bytes: what its rows hold now, counted by :func:`row_bytes` (rows past
            their expiry count until ``EXPIRY_GRACE`` s later); never above
            ``max_bytes``.
        pruned: rows deleted before their time for the bound (or not written:
            one larger than the bound alone).
    """

    def __init__(
        self,
        store: Store,
        cache: ReplayCache,
        clock: Callable[[], float],
        max_bytes: int = DEFAULT_JOURNAL_BYTES,
    ) -> None:
        if max_bytes < 1:
            raise ValueError("a replay journal holds at least one byte")
        self._store = store
        self._cache = cache
        self._clock = clock
        self.max_bytes = max_bytes
        self.bytes = 0
        self.pruned = 0
        self._full = False
        # The ring: slot ``_oldest`` and the ``_span - 1`` after it may hold rows
        # (a slot whose row went holds size 0). Both arrays grow as slots are used.
        self._oldest = 0
        self._span = 0
        self._sizes = array("q")
        self._until = array("d")  # ms

    @property
    def next_slot(self) -> int:
        """The ring's slot the next row goes to."""
        return (self._oldest + self._span) % self._cache.max_entries

    @property
    def rows(self) -> int:
        """How many slots of the ring, from the oldest row's to the newest's, it counts."""
        return self._span

    def start(self) -> int:
        """Load what the store kept (once it has opened), and write every entry
        the cache adds from now on. Returns how many entries were loaded."""
        store, cache = self._store, self._cache
        if not store.durable:
            return 0
        store.disk_only(TABLE)
        rows = self._load(store.items(TABLE))  # oldest first, as written
        self._prune(0)  # the bound may be lower than when they were written
        entries = [entry for slot, entry in rows if self._sizes[slot]]  # those kept
        loaded = cache.load(entries, now_ms=self._clock() * 1000.0)
        cache.journal = self
        log(
            "actorctl:replay:loaded",
            store=store.name,
            entries=loaded,
            kept=len(entries),
            bytes=self.bytes,
        )
        return loaded

    def __call__(self, key: tuple[str, str], until_ms: float) -> None:
        """Journal an entry the cache added (its key, held until ``until_ms``)."""
        # Once per accepted message: the tests that decide whether _expire and
        # _prune have work are made here, and next_slot, row_bytes and _set inline.
        now_ms = self._clock() * 1000.0
        if self._full or (self._span and self._until[self._oldest] + _GRACE_MS < now_ms):
            self._expire(now_ms)
        slots = self._cache.max_entries
        slot = (self._oldest + self._span) % slots  # next_slot: the oldest's, when full
        name = str(slot)
        value = f"{until_ms:.0f} {key[0]} {key[1]}".encode("utf-8", "surrogatepass")
        size = len(name) + len(value) + ROW_BYTES  # row_bytes
        if size > self.max_bytes:
            self.pruned += 1  # larger than the bound alone: the cache holds it only
            return
        if self._span == slots:
            self._forget_oldest()  # its row is replaced by the put below
        if self.bytes + size > self.max_bytes:
            self._prune(size)
        self._store.put(TABLE, name, value, expires=until_ms / 1000.0)
        sizes = self._sizes
        if slot == len(sizes):  # _set, inline: the ring grows to its first ``slots`` rows
            sizes.append(size)
            self._until.append(until_ms)
        else:
            sizes[slot] = size
            self._until[slot] = until_ms
        self._span += 1
        self.bytes += size

    # -- the ring ------------------------------------------------------------------

    def _load(
        self, rows: list[tuple[str, bytes]]
    ) -> list[tuple[int, tuple[tuple[str, str], float]]]:
        """Count the rows the store kept (``rows``, oldest first) into the ring,
        deleting any that fit no slot of it; the entries they hold, by slot."""
        slots = self._cache.max_entries
        entries: list[tuple[int, tuple[tuple[str, str], float]]] = []
        first: int | None = None
        for name, value in rows:
            until, _, rest = value.decode("utf-8", "surrogatepass").partition(" ")
            key_id, _, message = rest.partition(" ")
            if not (name.isdigit() and int(name) < slots and until.isdigit() and message):
                self._store.delete(TABLE, name)  # not a row this journal wrote
                continue
            slot = int(name)
            first = slot if first is None else first
            while len(self._sizes) <= slot:
                self._set(len(self._sizes), 0, 0.0)
            size = row_bytes(name, value)
            self._set(slot, size, float(until))
            self.bytes += size
            self._span = max(self._span, (slot - first) % slots + 1)
            entries.append((slot, ((key_id, message), float(until))))
        self._oldest = first or 0
        while len(self._sizes) < min(slots, self._oldest + self._span):
            self._set(len(self._sizes), 0, 0.0)  # the ring's gaps, up to its end
        return entries

    def _set(self, slot: int, size: int, until_ms: float) -> None:
        if slot == len(self._sizes):
            self._sizes.append(size)
            self._until.append(until_ms)
        else:
            self._sizes[slot] = size
            self._until[slot] = until_ms

    def _forget_oldest(self) -> int:
        """Stop counting the oldest slot; the bytes its row held."""
        slot = self._oldest
        size = self._sizes[slot]
        self._sizes[slot] = 0
        self.bytes -= size
        self._oldest = (slot + 1) % self._cache.max_entries
        self._span -= 1
        return size

    def _expire(self, now_ms: float) -> None:
        """Forget the oldest rows that the store has purged by now."""
        while self._span and self._until[self._oldest] + _GRACE_MS < now_ms:
            self._forget_oldest()
        if self._full and self.bytes < self.max_bytes * 3 // 4:
            self._full = False

    def _prune(self, size: int) -> None:
        """Delete the oldest rows until a row of ``size`` bytes (at most the
        bound) fits within it."""
        if self.bytes + size <= self.max_bytes:
            return
        if not self._full:
            self._full = True
            log(
                "actorctl:replay:journal-full",
                store=self._store.name,
                bytes=self.bytes,
                rows=self._span,
                max_bytes=self.max_bytes,
                warning="the replay journal reached max_replay_journal_bytes: its oldest "
                "rows go before their time (after a restart a copy of one of those is "
                "left to the container id check and the dedup window)",
            )
        while self._span and self.bytes + size > self.max_bytes:
            slot = self._oldest
            if self._forget_oldest():
                self._store.delete(TABLE, str(slot))
                self.pruned += 1
