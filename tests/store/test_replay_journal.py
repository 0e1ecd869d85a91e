"""The replay journal (a node's replay cache, kept in its store) is bounded in bytes.

A row holds ids as long as their sender made them, so the table is bounded in
bytes (``max_replay_journal_bytes``) besides its count: the oldest rows are
deleted first, and reaching the bound is logged once. The parts are tested on a
real SQLite file; the end-to-end test sends real signed messages with long ids
over mutual TLS on 127.0.0.1 to a node with a durable store, reads its /metrics
and its SQLite file, and restarts it on that file.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from actorctl import Actor, Envelope, Node, handler, open_node
from actorctl.cluster import INSECURE
from actorctl.cluster._replays import EXPIRY_GRACE, TABLE, ReplayJournal, row_bytes
from actorctl.cluster.link._limits import Limits
from actorctl.mailbox import ReplayCache, encode, sign_ed25519
from actorctl.store import Store
from tests.support.harness import Logs, Secrets, send_raw
from tests.support.metrics import scrape, value

START = 1_767_225_600.0  # the fake wall clock of the parts' tests
WINDOW_MS = 300_000.0


def _rows(path: Path) -> list[tuple[str, bytes]]:
    """The journal's rows in the SQLite file, in the order written."""
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT key, value FROM entries WHERE tbl = ? ORDER BY rowid", (TABLE,)
        ).fetchall()
    db.close()
    return [(key, bytes(value)) for key, value in rows]


def _ids(rows: list[tuple[str, bytes]]) -> list[str]:
    """The ids the rows hold (a node's: ``<message-id>@<creation-time>``)."""
    return [value.decode().split(" ", 2)[2] for _, value in rows]


@asynccontextmanager
async def _journal(
    path: Path, clock: Callable[[], float], max_bytes: int, *, entries: int = 1000
) -> AsyncIterator[tuple[ReplayCache, ReplayJournal, Store]]:
    """A replay cache journaled to a store on ``path``, the store running."""

    async def run(store: Store, task_status: trio.TaskStatus[None]) -> None:
        await store.run(task_status=task_status)

    store = Store(path, name="n", clock=clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(run, store)
        cache = ReplayCache(max_entries=entries)
        journal = ReplayJournal(store, cache, clock, max_bytes)
        journal.start()
        yield cache, journal, store
        await store.sync()
        nursery.cancel_scope.cancel()


def _accept(cache: ReplayCache, message_id: str, now: float) -> None:
    key = ("client-key", message_id)
    assert not cache.check_and_add(key, until_ms=now * 1000 + WINDOW_MS, now_ms=now * 1000)


# --- The parts ---------------------------------------------------------------------------


async def test_the_journal_deletes_its_oldest_rows_to_stay_within_its_bytes(
    tmp_path: Path, logs: Logs
) -> None:
    path = tmp_path / "store.sqlite"
    ids = [f"m{i:02d}-" + "x" * 996 for i in range(30)]  # 1,000 characters each
    size = row_bytes("00", f"{(START * 1000 + WINDOW_MS):.0f} client-key {ids[0]}".encode())
    # Given a journal that may hold ten rows of 1,000-character ids
    async with _journal(path, lambda: START, 10 * size) as (cache, journal, _):
        # When thirty such messages are accepted
        for message_id in ids:
            _accept(cache, message_id, START)
            # Then its count never passes the bound
            assert journal.bytes <= journal.max_bytes
    # And the file holds the newest ten rows, what the count says, the oldest gone
    rows = _rows(path)
    assert _ids(rows) == ids[-10:]
    assert sum(row_bytes(key, value) for key, value in rows) <= journal.bytes == 10 * size
    assert journal.pruned == 20
    # And reaching the bound was logged once
    [full] = logs.of_type("actorctl:replay:journal-full")
    assert full["max_bytes"] == 10 * size


async def test_a_lower_bound_at_start_deletes_the_oldest_rows_it_loads(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    async with _journal(path, lambda: START, 1 << 20) as (cache, _, _):
        for i in range(20):
            _accept(cache, f"m{i:02d}-" + "y" * 500, START)
    newest = sum(row_bytes(key, value) for key, value in _rows(path)[-5:])
    # When the node starts again with room for the newest five of its twenty rows
    async with _journal(path, lambda: START, newest) as (cache, journal, _):
        # Then it loads those five and deletes the others
        assert len(cache) == 5
        assert journal.bytes == newest
        assert cache.check_and_add(
            ("client-key", "m19-" + "y" * 500), until_ms=START * 1000 + WINDOW_MS, now_ms=0.0
        )
        # And the next row goes after the newest, deleting the oldest it kept
        _accept(cache, "m20-" + "y" * 500, START)
    assert _ids(_rows(path)) == [f"m{i:02d}-" + "y" * 500 for i in range(16, 21)]


async def test_rows_past_their_expiry_stop_counting_and_the_log_line_rearms(
    tmp_path: Path, logs: Logs
) -> None:
    now = [START]
    path = tmp_path / "store.sqlite"
    async with _journal(path, lambda: now[0], 4000) as (cache, journal, _):
        # Given a journal that reached its bound
        for i in range(8):
            _accept(cache, f"a{i}-" + "z" * 900, now[0])
        assert journal.pruned > 0
        assert len(logs.of_type("actorctl:replay:journal-full")) == 1
        # When its rows expire and the store has had time to purge them
        now[0] += WINDOW_MS / 1000 + EXPIRY_GRACE + 1
        _accept(cache, "b0", now[0])
        # Then they no longer count, and the next time it is full is logged again
        slot = str((journal.next_slot - 1) % 1000)
        b0 = f"{(now[0] * 1000 + WINDOW_MS):.0f} client-key b0".encode()
        assert journal.bytes == row_bytes(slot, b0)
        for i in range(8):
            _accept(cache, f"c{i}-" + "z" * 900, now[0])
    assert len(logs.of_type("actorctl:replay:journal-full")) == 2


async def test_rows_kept_with_gaps_across_the_rings_end_load_and_go_on(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    until = f"{(START * 1000 + WINDOW_MS):.0f}"
    # Given a ring of 50 slots whose rows left are slot 20's and, written after
    # it, past the ring's end, slot 5's (the others expired or were pruned)
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE entries (tbl TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL,"
            " expires REAL, PRIMARY KEY (tbl, key))"
        )
        for slot in ("20", "5"):
            value = f"{until} client-key old-{slot}".encode()
            db.execute("INSERT INTO entries VALUES (?, ?, ?, ?)", (TABLE, slot, value, 2e9))
    db.close()
    # When a journal loads them and takes sixty more entries
    async with _journal(path, lambda: START, 50 * 200, entries=50) as (cache, journal, _):
        assert len(cache) == 2
        assert (journal.rows, journal.next_slot) == (36, 6)
        for i in range(60):
            _accept(cache, f"new-{i:02d}", START)
        # Then it went round its ring, within its bound
        assert journal.rows == 50
        assert journal.bytes <= 50 * 200
    assert _ids(_rows(path))[-1] == "new-59"
    assert len(_rows(path)) == 50


async def test_a_row_larger_than_the_bound_alone_is_not_written(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    async with _journal(path, lambda: START, 500) as (cache, journal, _):
        _accept(cache, "small", START)
        _accept(cache, "big-" + "w" * 600, START)
        # The cache holds it (a replay of it is refused while the process lives)
        assert cache.check_and_add(
            ("client-key", "big-" + "w" * 600), until_ms=START * 1000 + WINDOW_MS, now_ms=0.0
        )
        # And the journal kept the row it had, rather than none
        assert journal.pruned == 1
    assert _ids(_rows(path)) == ["small"]


def test_the_bound_is_a_node_limit() -> None:
    assert Limits().max_replay_journal_bytes == 64 << 20
    node = Node("n", security=INSECURE, limits=Limits(max_replay_journal_bytes=4096))
    assert node.limits.max_replay_journal_bytes == 4096
    with pytest.raises(Exception, match="max_replay_journal_bytes: expected a whole number"):
        Limits(max_replay_journal_bytes=0)


# --- End to end: a node, its SQLite file, signed messages over TLS -----------------------


class Counter(Actor):
    def __init__(self) -> None:
        self.runs: list[str] = []

    @handler
    async def bump(self, tag: str) -> None:
        self.runs.append(tag)


LONG = 2000  # characters of each message id
SENT = 40
BOUND = 24 * 1024  # room for about ten such rows


async def test_a_node_sent_long_ids_keeps_its_journal_within_the_bound(
    secrets: Secrets, tmp_path: Path, logs: Logs
) -> None:
    path = tmp_path / "server" / "store.sqlite"
    signer = functools.partial(sign_ed25519, secrets.keys["client"].identity)

    def server(counter: Counter) -> Any:
        return open_node(
            "server",
            {"counter": counter},
            store=Store(path, name="server"),
            max_replay_journal_bytes=BOUND,
            metrics="127.0.0.1:0",
            **secrets.options("server"),
        )

    first = Counter()
    sent: list[Envelope] = []
    async with (
        server(first) as node,
        open_node("client", host=None, **secrets.options("client")) as client,
    ):
        address = node.address_of("counter")
        # Given a node with a durable store whose journal may hold 24 KiB
        for i in range(SENT):
            message_id = f"long-{i:02d}-" + "x" * (LONG - 8)
            envelope = Envelope(
                message_id=message_id,
                to=str(address),
                subject="bump",
                body=[[f"{i}"], {}],
                creation_time=client.now(),
            )
            sent.append(envelope)
            # When it takes forty signed messages with 2,000-character ids
            data = encode(envelope, signer=signer, actor="counter", node=node.node_id)
            assert (await send_raw(client, address, data, message_id)).state == "accepted"
            # Then its journal's count never passes the bound
            families = await scrape(node)
            assert value(families, "actorctl_node_replay_journal_bytes") <= BOUND
        assert len(first.runs) == SENT
        families = await scrape(node)
        pruned = value(families, "actorctl_node_replay_journal_pruned_total")
        held = value(families, "actorctl_node_replay_journal_bytes")
        await node.store.sync()
        rows = _rows(path)
        # And its SQLite file holds the newest rows only: the oldest went first
        assert 0 < len(rows) < SENT
        assert [i.rpartition("@")[0] for i in _ids(rows)] == [
            e.message_id for e in sent[-len(rows) :]
        ]
        # (rows go to slots 0, 1, ... in turn: each slot before the oldest kept
        # was pruned, those of the client node's own messages, its session's, too)
        assert pruned == int(rows[0][0]) >= SENT - len(rows)
        assert sum(row_bytes(key, v) for key, v in rows) == held <= BOUND
        assert len(logs.of_type("actorctl:replay:journal-full")) == 1
        # And a copy of a recent message is still refused as a replay (the
        # window holds it), as is one of the oldest (the cache in memory holds
        # what the journal deleted)
        for envelope in (sent[-1], sent[0]):
            data = encode(envelope, signer=signer, actor="counter", node=node.node_id)
            outcome = await send_raw(client, address, data, envelope.message_id)
            assert (outcome.state, outcome.condition) == ("rejected", "actorctl:replay")
        assert len(first.runs) == SENT  # neither copy ran

    # When the node starts again on its SQLite file
    second = Counter()
    async with (
        server(second) as node,
        open_node("client", host=None, **secrets.options("client")) as client,
    ):
        address = node.address_of("counter")
        [loaded] = logs.of_type("actorctl:replay:loaded")[-1:]
        assert loaded["entries"] == len(rows)
        # Then a copy of the newest message, signed for this process with the
        # same creation time, is a replay: its row was kept
        data = encode(sent[-1], signer=signer, actor="counter", node=node.node_id)
        outcome = await send_raw(client, address, data, sent[-1].message_id)
        assert (outcome.state, outcome.condition) == ("rejected", "actorctl:replay")
        # While one of the oldest is not: its row was deleted for the bound
        # (so it reaches the actor, whose dedup window is new in this process)
        data = encode(sent[0], signer=signer, actor="counter", node=node.node_id)
        assert (await send_raw(client, address, data, sent[0].message_id)).state == "accepted"
        assert second.runs == ["0"]
