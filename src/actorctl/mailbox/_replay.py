"""The replay check's memory: which signed messages were accepted recently."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Final, final

from .._log import log

__all__ = ["DEFAULT_REPLAY_BYTES", "ENTRY_BYTES", "Journal", "ReplayCache", "entry_name"]

#: Bytes a replay cache holds at most by default (see :class:`ReplayCache`).
DEFAULT_REPLAY_BYTES: Final = 32 << 20
#: What one entry costs besides its ids' characters: the dict slot, the two
#: queue items, its name's string and its float (about, on CPython 3.12,
#: 64-bit; counted as when each entry was a pair of tuples, a little over).
ENTRY_BYTES: Final = 200

#: Told each entry the cache adds (its key and the time in ms it is held until),
#: to keep it elsewhere too: a node writes it behind to its durable store.
Journal = Callable[[tuple[str, str], float], None]


def entry_name(key_id: str, message: str) -> str:
    """The name an entry (a key id and a message's ``id@creation-ms``) is held
    by: the two, a space between. A key id holds no space (16 hex digits, as
    :func:`~actorctl.mailbox._keys.key_id` makes it; the journal's rows rely on
    it too), so the name stands for the pair alone."""
    return f"{key_id} {message}"


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
        # By entry name (``entry_name``), the time each is held until; and the
        # names and their times in the order added, side by side. Strings and
        # floats alone: nothing the cache holds is tracked by the garbage
        # collector, whose every collection a tuple per entry would bring sooner.
        self._until: dict[str, float] = {}
        self._names: deque[str] = deque()
        self._times: deque[float] = deque()

    def __len__(self) -> int:
        return len(self._until)

    def check_and_add(self, key: tuple[str, str], until_ms: float, now_ms: float) -> bool:
        """True if ``key`` was added before and is still held at ``now_ms``;
        otherwise add it, to be held until ``until_ms``, and return False."""
        return self.check_and_add_name(entry_name(*key), until_ms, now_ms)

    def check_and_add_name(self, name: str, until_ms: float, now_ms: float) -> bool:
        """:meth:`check_and_add` of the entry ``name`` (:func:`entry_name`), as
        the receiver calls it (per message: no tuple made)."""
        times, held = self._times, self._until
        while times and times[0] < now_ms:
            self._drop(times.popleft(), self._names.popleft())
        if name in held and held[name] >= now_ms:  # in and []: no call (per message)
            return True
        held[name] = until_ms
        times.append(until_ms)
        self._names.append(name)
        self.bytes += len(name) - 1 + ENTRY_BYTES  # the two ids, less the space
        if len(times) > self.max_entries or self.bytes > self.max_bytes:
            self._trim()
        journal = self.journal
        if journal is not None:
            key_id, _, message = name.partition(" ")
            journal((key_id, message), until_ms)
        return False

    def load(self, entries: list[tuple[tuple[str, str], float]], *, now_ms: float) -> int:
        """Hold ``entries`` (key, until in ms) kept from before a restart, those
        still held at ``now_ms``, oldest first; the journal is not told. Returns
        how many were loaded."""
        loaded = 0
        for key, until_ms in sorted(entries, key=lambda entry: entry[1]):
            name = entry_name(*key)
            if until_ms < now_ms or self._until.get(name, -1.0) >= until_ms:
                continue
            self._until[name] = until_ms
            self._times.append(until_ms)
            self._names.append(name)
            self.bytes += len(name) - 1 + ENTRY_BYTES
            loaded += 1
        self._trim()
        return loaded

    def forget(self, key: tuple[str, str]) -> None:
        """Accept ``key`` once more (its message was not executed, e.g. released)."""
        self._until.pop(entry_name(*key), None)

    def _trim(self) -> None:
        """Drop the oldest entries while a bound is exceeded (logged once)."""
        times = self._times
        if not (len(times) > self.max_entries or self.bytes > self.max_bytes):
            return
        if not self._full:
            self._full = True
            log(
                "actorctl:replay:bound-reached",
                node=self.node,
                entries=len(times),
                max_entries=self.max_entries,
                bytes=self.bytes,
                max_bytes=self.max_bytes,
                warning="the replay cache reached its bound: the oldest ids go before "
                "their time (a replay of one is left to the dedup window)",
            )
        names = self._names
        while times and (len(times) > self.max_entries or self.bytes > self.max_bytes):
            self._drop(times.popleft(), names.popleft())
            self.dropped += 1

    def _drop(self, until_ms: float, name: str) -> None:
        self.bytes -= len(name) - 1 + ENTRY_BYTES
        if (
            self._full
            and self.bytes < self.max_bytes * 3 // 4
            and len(self._times) < self.max_entries * 3 // 4
        ):
            self._full = False
        held = self._until
        if name in held and held[name] == until_ms:  # in and []: no call (per entry)
            del held[name]
