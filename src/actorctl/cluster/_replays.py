"""A node's replay cache, kept in its durable store so that it outlives the process.

The replay check (docs/protocol.md §11.8) remembers each signed message a node
accepted until its creation time plus the time window. The entries are written
behind to the node's store: each accepted message queues one row, and the store
commits the queue in its group commits, off the event loop's thread; nothing
waits for the disk. At start the node loads the rows still within their window.

Bounds: the table is a ring of as many rows as the cache holds entries (100 000
by default): each new entry replaces the oldest row, so the table never grows
past that and needs no deletes; rows also expire with their entry, and the
store purges them. What a SIGKILL can lose is the batch not yet committed
(milliseconds of messages): those could be accepted once more after a restart,
had the node kept its container id (it never does: signatures name the node's
container id, which is new in every process, so a message signed before a
restart fails at the new process anyway; this table is the second line).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, final

from .._log import log
from ..mailbox import ReplayCache
from ..store._store import Store

__all__ = ["ReplayJournal"]

TABLE: Final = "replay"


@final
class ReplayJournal:
    """Writes a replay cache behind to a store, and loads it back at start.

    Args:
        store: the node's store; a memory store keeps nothing (the cache stays
            in memory alone).
        cache: the node's replay cache.
        clock: wall-clock seconds since the epoch (the cache's times are on it).
    """

    def __init__(self, store: Store, cache: ReplayCache, clock: Callable[[], float]) -> None:
        self._store = store
        self._cache = cache
        self._clock = clock
        self._next = 0  # the ring's next slot

    def start(self) -> int:
        """Load what the store kept (once it has opened), and write every entry
        the cache adds from now on. Returns how many entries were loaded."""
        store, cache = self._store, self._cache
        if not store.durable:
            return 0
        store.disk_only(TABLE)
        entries: list[tuple[tuple[str, str], float]] = []
        rows = store.items(TABLE)  # in the order written: the last one is the newest
        for _, value in rows:
            until, _, rest = value.decode("utf-8", "surrogatepass").partition(" ")
            key_id, _, message = rest.partition(" ")
            if until.isdigit() and message:
                entries.append(((key_id, message), float(until)))
        if rows and rows[-1][0].isdigit():
            self._next = (int(rows[-1][0]) + 1) % cache.max_entries
        loaded = cache.load(entries, now_ms=self._clock() * 1000.0)
        cache.journal = self
        log("actorctl:replay:loaded", store=store.name, entries=loaded, kept=len(entries))
        return loaded

    def __call__(self, key: tuple[str, str], until_ms: float) -> None:
        slot = self._next
        self._next = (slot + 1) % self._cache.max_entries
        value = f"{until_ms:.0f} {key[0]} {key[1]}".encode("utf-8", "surrogatepass")
        self._store.put(TABLE, str(slot), value, expires=until_ms / 1000.0)
