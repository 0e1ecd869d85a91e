"""The store's SQLite file: its one table, how it is opened, how a batch is committed.

Everything here runs in a worker thread (``_store.py`` hands each call over, one
at a time per connection), never on the event loop. The file holds one table,
``entries``, keyed by (table, key); a write is a row put or deleted. A batch is
committed in one transaction, its runs of puts and of deletes each in a few
statements of many rows rather than a statement step per row: ``sqlite3`` lets go
of the GIL around every step, and each time the commit thread takes it back it
waits for the event loop's thread to let go in turn.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

from ._shipping import Write

__all__ = ["DELETES", "PUTS", "Loaded", "commit", "open_database"]

_SCHEMA: Final = """CREATE TABLE IF NOT EXISTS entries (
    tbl TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, expires REAL,
    PRIMARY KEY (tbl, key))"""
_PUT: Final = "INSERT OR REPLACE INTO entries (tbl, key, value, expires) VALUES (?, ?, ?, ?)"
_DELETE: Final = "DELETE FROM entries WHERE tbl = ? AND key = ?"
_PURGE: Final = "DELETE FROM entries WHERE expires IS NOT NULL AND expires <= ?"

#: A database's rows as loaded: (table, key, value, expires), in written order.
Loaded = list[tuple[str, str, bytes, float | None]]


def open_database(path: Path, now: float) -> tuple[sqlite3.Connection, Loaded]:
    """The store's database at ``path`` (made if new), in WAL mode with
    ``synchronous=NORMAL`` and its temporary files in memory, its expired rows
    purged as of ``now``; and its rows, in the order they were written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, check_same_thread=False)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        # A statement of many rows keeps a statement journal (what it changed,
        # to undo that statement alone if it fails midway); past 64 KiB SQLite
        # spills it to a new temporary file, made and unlinked in every commit,
        # and writes each page it changes there too. In memory it costs a copy.
        # No crash reads it (a commit's survival is the WAL's): nothing that
        # survives a kill changes.
        db.execute("PRAGMA temp_store=MEMORY")
        with db:
            db.execute(_SCHEMA)
            db.execute(_PURGE, (now,))
        rows = db.execute("SELECT tbl, key, value, expires FROM entries ORDER BY rowid").fetchall()
    except BaseException:
        db.close()
        raise
    return db, rows


def commit(db: sqlite3.Connection, batch: Sequence[Write], purge: float | None) -> None:
    """Write ``batch`` to ``db`` in one transaction, then purge the rows expired
    by ``purge`` (a time), if given: committed whole, or rolled back."""
    with db:  # one transaction: committed whole, or rolled back
        # Runs of puts and of deletes, in the order made; each run in a few
        # statements of many rows (_chunks), not one statement step per row:
        # sqlite3 lets go of the GIL around every step, and each time it takes
        # it back it waits for the event loop's thread to let go in turn.
        most = _most_rows(db)
        for is_put, run in itertools.groupby(batch, key=lambda write: write[2] is not None):
            writes = list(run)
            if not is_put and not _ROW_VALUES:  # an SQLite before 3.15: a row each
                db.executemany(_DELETE, ((table, key) for table, key, _, _ in writes))
                continue
            for start, count in _chunks(len(writes), most):
                chunk = writes[start : start + count]
                if is_put:
                    db.execute(PUTS[count], [field for write in chunk for field in write])
                else:
                    keys = [field for table, key, _, _ in chunk for field in (table, key)]
                    db.execute(DELETES[count], keys)
        if purge is not None:
            db.execute(_PURGE, (purge,))


#: The most rows one statement writes, a power of two: 1,024 parameters for
#: puts (4 a row). An SQLite built with a lower bound (999 before 3.32, unless
#: the build raised it) gets fewer: ``_most_rows``.
_MOST_ROWS: Final = 256
#: Whether this SQLite reads row values (3.15 on), as the many-row delete does.
_ROW_VALUES: Final = sqlite3.sqlite_version_info >= (3, 15, 0)
# One statement per power of two up to _MOST_ROWS, so that sqlite3's statement
# cache (128 by default) holds every one of them, prepared once.
_SIZES: Final = tuple(1 << bit for bit in range(_MOST_ROWS.bit_length()))
PUTS: Final = {
    n: "INSERT OR REPLACE INTO entries (tbl, key, value, expires) VALUES "
    + ", ".join(["(?, ?, ?, ?)"] * n)
    for n in _SIZES
}
# (A row value IN a bare VALUES list would scan the table: IN a SELECT from
# it, SQLite searches the primary key's index for each; tests/store checks.)
DELETES: Final = {
    n: "DELETE FROM entries WHERE (tbl, key) IN (SELECT column1, column2 FROM (VALUES "
    + ", ".join(["(?, ?)"] * n)
    + "))"
    for n in _SIZES
}
PUTS[1], DELETES[1] = _PUT, _DELETE


def _most_rows(db: sqlite3.Connection) -> int:
    """The most rows one statement writes on ``db``: ``_MOST_ROWS``, or the
    largest power of two whose puts' parameters fit its SQLite's bound."""
    fits = min(_MOST_ROWS, db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // 4)
    return 1 << (max(fits, 1).bit_length() - 1)


def _chunks(total: int, most: int) -> Iterable[tuple[int, int]]:
    """(start, count) of the statements that write ``total`` rows in order:
    ``most`` (a power of two) at a time, then the rest by its set bits,
    largest first."""
    start = 0
    while total - start >= most:
        yield start, most
        start += most
    for size in reversed(_SIZES):
        if (total - start) & size:
            yield start, size
            start += size
