"""A node's durable store: small tables kept in memory and written behind to SQLite.

The tables hold what a node must not forget when its process dies: the outgoing
backlog, the scheduler's delayed tasks, revokes, chord barriers, results with a
time to live. Every table is mirrored in memory, so reads are dict lookups that
never touch the disk. Writes change memory at once and are queued; the store's
:meth:`Store.run` task commits the queue to SQLite from a worker thread, one
transaction per batch (a group commit: whoever awaits :meth:`Store.sync` while
a commit is under way shares the next one). A write nobody syncs (a replay
row, the delete of a settled entry) waits up to ``UNSYNCED_WAIT`` for one that
somebody does, to share its commit: a message a node takes and hands on then
costs it one commit, not two, and one hand-off to the commit thread.

A lone write costs the event loop no more than it must: an unsynced write wakes
nobody (it moves the deadline of the committer's wait instead, so the task that
made it runs on without a task switch), and a committer woken by a sync lets the
tasks woken with it (the writer of a reply sent just before the sync) run
before it hands the batch to the commit thread.

What survives what: the database is in WAL mode with ``synchronous=NORMAL``, so
a committed write survives the process being killed (SIGKILL included); a power
loss or an OS crash may lose the last batches committed before it. A write that
nobody synced may be lost with the process.

A disk that fails (a data directory that cannot be made or written, a file that
is not a database, a full disk) is logged once, and the store keeps its state in
memory from then on: nothing is lost while the node lives, and no write raises.
``Store(None)`` (:meth:`Store.memory`) keeps everything in memory from the start:
``durable = false``, for tests and benchmarks.

**Replication.** Given a shipper (:meth:`Store.ship_to`, ``_shipping.py``), the
store hands it each batch while it commits the batch to its own disk, and
:meth:`Store.sync` returns once both are done: a write is confirmed only once it
is where the shipper's rule says (on a standby on another host). A batch the
shipper refuses makes ``sync`` raise :class:`~._shipping.ShipRefused` for its
writers. Without a shipper (the default) nothing of this runs.
"""

from __future__ import annotations

import collections
import functools
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final, final

import trio

from .._log import log
from .._threads import run_sync
from ._handoff import in_thread
from ._shipping import Shipper, ShipRefused, Write
from ._sqlite import commit, open_database

__all__ = ["Store"]

#: Seconds between two purges of expired rows.
PURGE_EVERY: Final = 60.0
#: Seconds a write nobody syncs waits for one that somebody does (to share a
#: commit) before it is committed on its own.
UNSYNCED_WAIT: Final = 0.005
#: Seconds the last commit may take when the store stops.
CLOSE_TIMEOUT: Final = 2.0

_Write = Write
#: How many refused batches ``sync`` remembers (to tell their writers).
_REFUSALS_KEPT: Final = 64
_Row = tuple[bytes, float | None]
_Tables = dict[str, dict[str, _Row]]


@final
class Store:
    """Durable tables of one node, read from memory and written behind to SQLite.

    Args:
        path: the SQLite file (its directory is made if missing); None keeps
            everything in memory (``durable = false``).
        name: for logs (the node's name).
        clock: wall-clock time in seconds since the epoch: ``expires`` is on it.

    Attributes:
        commits: how many batches were committed to disk (one transaction each).
    """

    def __init__(
        self, path: Path | None, *, name: str, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = path
        self.name = name
        self.commits = 0
        self._clock = clock
        self._tables: _Tables = {}
        self._durable = path is not None
        self._db: sqlite3.Connection | None = None
        self._queue: list[_Write] = []  # written in memory, not yet committed
        self._queued = 0  # writes ever queued
        self._committed = 0  # of those, how many are on disk
        self._committing = 0  # of those, how many the commit under way takes
        self._hurry = trio.Event()  # someone syncs: commit now
        # The committer's wait while no write has moved its deadline (None while
        # it commits, before it runs, and once a write moved it): the first
        # unsynced write of a wait brings its deadline forward.
        self._waiting: trio.CancelScope | None = None
        # Set when the commit under way ends, and when the one after it ends: a
        # sync wakes once, when the commit that takes its writes is done.
        self._flushing = trio.Event()
        self._next_flush = trio.Event()
        self._disk_only: set[str] = set()  # tables whose owner keeps them in memory
        self._shipper: Shipper | None = None
        # Whether writes are queued (for the disk, or for a shipper): read on
        # every write and sync, so kept as a field, set where either changes.
        self._writing = self._durable
        # (after, upto, why): the writes numbered after < n <= upto were refused
        self._refused: collections.deque[tuple[int, int, str]] = collections.deque(
            maxlen=_REFUSALS_KEPT
        )

    @classmethod
    def memory(cls, name: str) -> Store:
        """A store that keeps everything in memory (``durable = false``)."""
        return cls(None, name=name)

    @property
    def durable(self) -> bool:
        """Whether writes go to disk now: False for a memory store, and after a
        disk failure (the store then keeps its state in memory)."""
        return self._durable

    def ship_to(self, shipper: Shipper) -> None:
        """Hand every batch from now on to ``shipper`` too (see the module's
        text). What was committed before is the shipper's to bring over (the
        node's replication sends a standby a :meth:`snapshot` first)."""
        self._shipper = shipper
        self._writing = True

    @property
    def shipper(self) -> Shipper | None:
        """Who its batches are shipped to (None: nobody, the default)."""
        return self._shipper

    def snapshot(self) -> list[Write]:
        """Every unexpired row kept in memory, as puts, table by table, oldest
        first: what a new replica starts from (the tables kept on disk alone,
        :meth:`disk_only`, are not in it)."""
        now = self._clock()
        return [
            (table, key, row[0], row[1])
            for table, rows in self._tables.items()
            if table not in self._disk_only
            for key, row in rows.items()
            if self._alive(row, now)
        ]

    def absorb(self, rows: Iterable[Write]) -> list[Write]:
        """Put ``rows`` (another store's, taken over: a replica's) as puts of
        this store's own, but for those whose key this store has already (its
        own row is the live one) and those of tables kept on disk alone (their
        owner keeps its own). Returns the rows put; :meth:`sync` commits them."""
        now = self._clock()
        taken: list[Write] = []
        for table, key, value, expires in rows:
            if value is None or table in self._disk_only or self.get(table, key) is not None:
                continue
            if expires is not None and expires <= now:
                continue
            self.put(table, key, value, expires=expires)
            taken.append((table, key, value, expires))
        return taken

    # -- reads and writes (sync, from the event loop's thread) ----------------------

    def put(self, table: str, key: str, value: bytes, *, expires: float | None = None) -> None:
        """Set ``key`` of ``table``, replacing any row there; the row becomes the
        newest of its table. With ``expires`` (a time on the store's clock) the
        row is gone from then on."""
        self._write((table, key, value, expires))

    def disk_only(self, table: str) -> None:
        """Keep no copy of ``table`` in memory from now on: its puts and deletes
        go to disk alone (its owner keeps its own copy, as the replay cache does).
        The rows loaded at open stay readable (``items``) until they expire.
        On a memory store, writes to it are dropped."""
        self._disk_only.add(table)

    def delete(self, table: str, key: str) -> None:
        """Remove ``key`` from ``table``, if it is there."""
        self._write((table, key, None, None))

    def get(self, table: str, key: str) -> bytes | None:
        """The value of ``key`` in ``table``; None if it is absent or expired."""
        row = self._tables.get(table, {}).get(key)
        if row is None or not self._alive(row, self._clock()):
            return None
        return row[0]

    def items(self, table: str) -> list[tuple[str, bytes]]:
        """The unexpired rows of ``table`` as (key, value), oldest first."""
        now = self._clock()
        rows = self._tables.get(table, {})
        return [(key, row[0]) for key, row in rows.items() if self._alive(row, now)]

    def count(self, table: str) -> int:
        """How many unexpired rows ``table`` has."""
        now = self._clock()
        return sum(1 for row in self._tables.get(table, {}).values() if self._alive(row, now))

    async def sync(self) -> None:
        """Return once every put and delete made before the call is on disk (at
        once for a memory store, or once the store fell back to memory), and,
        with a shipper, replicated. Awaiting it makes sense only while
        :meth:`run` runs: that is what commits.

        Raises:
            ShipRefused: the shipper refused the batch of the last write made
                before the call: confirm nothing of it.
        """
        target = self._queued
        if not self._writing or self._committed >= target:
            await trio.lowlevel.checkpoint()
        else:
            if self._committing < target:  # not in the commit under way
                self._hurry.set()
            while self._writing and self._committed < target:
                if self._committing >= target:
                    await self._flushing.wait()
                else:
                    await self._next_flush.wait()
        for after, upto, why in self._refused:
            if after < target <= upto:
                raise ShipRefused(why)

    def _write(self, write: _Write) -> None:
        if write[0] not in self._disk_only:
            _apply(self._tables, write)
        if self._writing:
            self._queue.append(write)
            self._queued += 1
            waiting = self._waiting
            if waiting is not None:  # committed within UNSYNCED_WAIT, with no task switch now
                # The first write of a wait moves its deadline; no later one can
                # bring it earlier (time only moves on), so they read no clock.
                self._waiting = None
                soon = trio.current_time() + UNSYNCED_WAIT
                if soon < waiting.deadline:
                    waiting.deadline = soon

    @staticmethod
    def _alive(row: _Row, now: float) -> bool:
        return row[1] is None or row[1] > now

    # -- running -------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Open the database, load its unexpired rows, report started, then
        commit queued writes batch by batch until cancelled; on cancellation,
        commit what is still queued (within ``CLOSE_TIMEOUT`` s) and close.

        Writes made before it loaded count on top of what it loads. A memory
        store only purges expired rows now and then.
        """
        try:
            if self.path is not None:
                await self._open(self.path)
            task_status.started()
            await self._serve()
        finally:
            with trio.CancelScope(shield=True):
                with trio.move_on_after(CLOSE_TIMEOUT) as timer:
                    await self._flush(None, abandon=True)
                if not timer.cancelled_caught and self._db is not None:
                    await run_sync(self._db.close)
                self._db = None

    async def _open(self, path: Path) -> None:
        try:
            self._db, rows = await run_sync(open_database, path, self._clock())
        except (OSError, sqlite3.Error) as exc:
            self._fail(exc)
            return
        tables: _Tables = {}
        for table, key, value, expires in rows:
            tables.setdefault(table, {})[key] = (value, expires)
        for write in self._queue:
            if write[0] not in self._disk_only:
                _apply(tables, write)
        self._tables = tables
        log("actorctl:store:opened", store=self.name, path=str(path), rows=len(rows))

    async def _serve(self) -> None:
        next_purge = trio.current_time() + PURGE_EVERY
        while True:
            # Until a sync hurries it, the purge is due, or the oldest queued
            # write has waited UNSYNCED_WAIT (``_write`` moves the deadline).
            with trio.CancelScope(deadline=next_purge) as waiting:
                if self._queue:  # queued while the last commit ran: no write moves it
                    waiting.deadline = min(next_purge, trio.current_time() + UNSYNCED_WAIT)
                else:
                    self._waiting = waiting
                try:
                    await self._hurry.wait()
                finally:
                    self._waiting = None
                # Hurried: the tasks woken with it (the writer of a reply sent
                # just before the sync) run first; the batch waits one pass.
                await trio.lowlevel.checkpoint()
            purge: float | None = None
            if trio.current_time() >= next_purge:
                next_purge = trio.current_time() + PURGE_EVERY
                purge = self._purge_memory()
            self._hurry = trio.Event()
            await self._flush(purge)

    def _purge_memory(self) -> float:
        now = self._clock()
        for rows in self._tables.values():
            for key in [key for key, row in rows.items() if not self._alive(row, now)]:
                del rows[key]
        return now

    async def _flush(self, purge: float | None, *, abandon: bool = False) -> None:
        """Commit what is queued (and purge rows expired at ``purge``) in one
        transaction, and hand it to the shipper meanwhile. The batch leaves the
        queue only once both are done: a cancelled flush leaves it for the next."""
        db = self._db if self._durable else None
        count, after, upto = len(self._queue), self._committed, self._queued
        if db is None and self._shipper is None:
            self._queue.clear()  # a disk that failed: nothing writes these
            return
        if not count and purge is None:
            return
        batch = self._queue[:count]
        flushing = self._flushing = self._next_flush
        self._next_flush = trio.Event()
        self._committing = upto
        done = False

        def committed() -> None:
            # The disk alone, committed: done at once, in trio's thread, when
            # the commit thread's result comes back (its waiters run in the
            # next pass, beside this task, not a pass after it).
            nonlocal done
            done = True
            self._committed_batch(count, upto, flushing)

        try:
            if self._shipper is None or not batch:  # the disk alone: no nursery
                if db is not None:
                    await self._commit_here(db, batch, purge, abandon, committed)
            else:
                async with trio.open_nursery() as nursery:
                    if db is not None:
                        nursery.start_soon(self._commit_here, db, batch, purge, abandon, None)
                    nursery.start_soon(self._ship, self._shipper, batch, after, upto)
        except BaseException:
            if not done:
                self._committing = self._committed  # abandoned: the next commit takes it
                flushing.set()
            raise
        if not done:
            self._committed_batch(count, upto, flushing)

    def _committed_batch(self, count: int, upto: int, flushing: trio.Event) -> None:
        """The batch of the first ``count`` queued writes (numbered up to
        ``upto``) is kept: it leaves the queue, and its waiters are woken."""
        del self._queue[:count]
        self.commits += 1
        self._committed = upto
        flushing.set()

    async def _commit_here(
        self,
        db: sqlite3.Connection,
        batch: list[_Write],
        purge: float | None,
        abandon: bool,
        committed: Callable[[], None] | None,
    ) -> None:
        try:
            await in_thread(
                functools.partial(commit, db, batch, purge),
                abandon_on_cancel=abandon,
                then=committed,
            )
        except (OSError, sqlite3.Error) as exc:
            self._fail(exc)

    async def _ship(self, shipper: Shipper, batch: list[_Write], after: int, upto: int) -> None:
        try:
            await shipper.ship(batch)
        except ShipRefused as exc:
            log("actorctl:store:ship-refused", store=self.name, writes=len(batch), error=str(exc))
            self._refused.append((after, upto, str(exc)))

    def _fail(self, exc: BaseException) -> None:
        log(
            "actorctl:store:failed",
            store=self.name,
            path=str(self.path),
            error=str(exc),
            fallback="keeping state in memory from now on",
        )
        self._durable = False
        self._writing = self._shipper is not None
        db, self._db = self._db, None
        if db is not None:
            # No thread uses it now (a failed commit returned); closing is quick.
            db.close()
        # Whoever waits looks again (a memory store, or a shipper's alone).
        self._flushing.set()
        self._next_flush.set()
        self._next_flush = trio.Event()


def _apply(tables: _Tables, write: _Write) -> None:
    table, key, value, expires = write
    rows = tables.setdefault(table, {})
    rows.pop(key, None)  # a replaced row moves to the end, as INSERT OR REPLACE does
    if value is not None:
        rows[key] = (value, expires)
