"""The node's durable store: memory tables written behind to real SQLite files."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

from actorctl import ConfigError, Node, open_node
from actorctl.cluster import INSECURE, load_cluster
from actorctl.ops._foreman import LocalForeman, NodeState
from actorctl.store import Store, Write
from actorctl.store._sqlite import DELETES, PUTS, commit, open_database
from actorctl.store._store import PURGE_EVERY, UNSYNCED_WAIT
from tests.support.cli import node_ready, start_cli
from tests.support.harness import Logs, free_port

ROOT = Path(__file__).resolve().parents[2]


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def running(store: Store) -> AsyncIterator[Store]:
    """Run ``store`` for the block; leaving it cancels the run (which commits)."""
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        yield store
        nursery.cancel_scope.cancel(reason="test done")


def _stores(tmp_path: Path, clock: Callable[[], float]) -> list[Store]:
    return [Store(None, name="m", clock=clock), Store(tmp_path / "s.db", name="s", clock=clock)]


async def test_a_write_nobody_syncs_shares_the_commit_of_the_next_one_synced(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "s.sqlite"
    async with running(Store(path, name="s")) as store:
        # Given a write nobody syncs (a replay row, as a node takes a message)
        store.put("replays", "m1", b"seen")
        await trio.sleep(UNSYNCED_WAIT / 2)
        # Then it waits, uncommitted, for one that somebody syncs
        assert store.commits == 0
        # When one is synced (the message's follow-up, stored before it is settled)
        store.put("backlog", "m2", b"step")
        await store.sync()
        # Then both went to disk in one commit
        assert store.commits == 1
        with sqlite3.connect(path) as db:
            rows = db.execute("SELECT tbl, key FROM entries ORDER BY rowid").fetchall()
        assert rows == [("replays", "m1"), ("backlog", "m2")]


class BatchTimes:
    """A shipper that keeps each batch it is handed and the trio time it came."""

    def __init__(self) -> None:
        self.batches: list[tuple[float, list[str]]] = []

    async def ship(self, batch: Sequence[Write]) -> None:
        self.batches.append((trio.current_time(), [key for _, key, _, _ in batch]))


async def test_writes_nobody_syncs_are_committed_unsynced_wait_after_the_first(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    shipper = BatchTimes()
    store = Store(tmp_path / "s.sqlite", name="s")
    store.ship_to(shipper)
    async with running(store):
        # Given a write nobody syncs, and another one half the wait later
        first = trio.current_time()
        store.put("replays", "m1", b"seen")
        await trio.sleep(UNSYNCED_WAIT / 2)
        store.put("replays", "m2", b"seen")
        # When both wait past UNSYNCED_WAIT after the first
        await trio.sleep(UNSYNCED_WAIT)
        # Then one commit took both, UNSYNCED_WAIT after the first write (the
        # later write did not put it off)
        [(when, keys)] = shipper.batches
        assert keys == ["m1", "m2"]
        assert when == pytest.approx(first + UNSYNCED_WAIT)
        await store.sync()
        assert store.commits == 1


@pytest.mark.parametrize("durable", [False, True], ids=["memory", "disk"])
async def test_put_get_delete_items_and_count(tmp_path: Path, durable: bool) -> None:
    store = Store(tmp_path / "s.sqlite", name="s") if durable else Store.memory("s")
    async with running(store):
        assert store.durable is durable
        # Given three rows, one of them replaced
        store.put("backlog", "a", b"1")
        store.put("backlog", "b", b"2")
        store.put("backlog", "c", b"3")
        store.put("backlog", "a", b"4")
        store.put("other", "a", b"x")
        # When one is deleted (and one that is not there)
        store.delete("backlog", "b")
        store.delete("backlog", "nothing")
        await store.sync()
        # Then reads see the rest, a replaced row as the newest
        assert store.get("backlog", "a") == b"4"
        assert store.get("backlog", "b") is None
        assert store.get("nothing", "a") is None
        assert store.items("backlog") == [("c", b"3"), ("a", b"4")]
        assert store.count("backlog") == 2
        assert store.count("nothing") == 0
        assert store.items("other") == [("a", b"x")]


async def test_rows_expire_on_the_store_clock(tmp_path: Path) -> None:
    clock = Clock()
    for store in _stores(tmp_path, clock):
        async with running(store):
            # Given a row that expires at 1010 and one that does not
            store.put("results", "r1", b"done", expires=1010.0)
            store.put("results", "r2", b"kept")
            assert store.get("results", "r1") == b"done"
            # When the clock reaches its expiry, then it is gone from every read
            clock.now = 1010.0
            assert store.get("results", "r1") is None
            assert store.items("results") == [("r2", b"kept")]
            assert store.count("results") == 1
            clock.now = 1000.0


async def test_expired_rows_are_purged_from_the_disk_now_and_then(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path, clock = tmp_path / "s.sqlite", Clock()
    async with running(Store(path, name="s", clock=clock)) as store:
        # Given a row that expired, on disk
        store.put("results", "old", b"1", expires=1010.0)
        store.put("results", "kept", b"2")
        await store.sync()
        clock.now = 1010.0
        # When the purge period passes (its commit ends before the store stops)
        await trio.sleep(PURGE_EVERY + 1)
    # Then the row is gone from the file too
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT key FROM entries").fetchall() == [("kept",)]
    db.close()


async def test_what_was_written_is_loaded_in_order_when_the_store_opens_again(
    tmp_path: Path,
) -> None:
    path, clock = tmp_path / "data" / "node" / "store.sqlite", Clock()
    # Given rows written, replaced, deleted, one expiring (no sync: stopping commits)
    async with running(Store(path, name="s", clock=clock)) as store:
        for key in "abcd":
            store.put("t", key, key.encode())
        store.put("t", "a", b"A")
        store.delete("t", "b")
        store.put("t", "soon", b"s", expires=1005.0)
    assert path.is_file()  # the directory was made
    # When it opens again after the expiry
    clock.now = 1005.0
    store = Store(path, name="s", clock=clock)
    store.put("t", "c", b"before-run")  # a write before it loaded counts on top
    async with running(store):
        # Then the rows are there in the order they were last written, the expired gone
        assert store.items("t") == [("d", b"d"), ("a", b"A"), ("c", b"before-run")]
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM entries WHERE key = 'soon'").fetchone() == (0,)
    db.close()


async def test_many_concurrent_syncs_share_few_commits(tmp_path: Path) -> None:
    async with running(Store(tmp_path / "s.sqlite", name="s")) as store:
        # Given 1,000 tasks that each write a row and wait until it is on disk
        async def write(i: int) -> None:
            store.put("t", str(i), b"x")
            await store.sync()

        with trio.fail_after(20):
            async with trio.open_nursery() as writers:
                for i in range(1000):
                    writers.start_soon(write, i)
        # Then they shared commits: far fewer commits than writes
        assert 0 < store.commits < 100
        assert store.count("t") == 1000
    with sqlite3.connect(tmp_path / "s.sqlite") as db:
        assert db.execute("SELECT count(*) FROM entries").fetchone() == (1000,)
    db.close()


async def test_a_large_batch_of_puts_and_deletes_is_on_disk_as_memory_has_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.sqlite"
    # Given one batch of runs of puts and of deletes, of sizes on both sides of
    # the most rows one statement writes (256), over keys written again,
    # replaced and deleted within the batch, in three tables
    runs = [1, 2, 3, 255, 256, 257, 511, 600, 5, 1, 300, 7]
    async with running(Store(path, name="s")) as store:
        written = 0
        for number, size in enumerate(runs):
            for i in range(written, written + size):
                key, table = str(i % 397), f"t{i % 3}"
                if number % 2:
                    store.delete(table, key)
                else:
                    store.put(table, key, b"%d" % i, expires=None if i % 2 else 1e10)
            written += size
        expected = {table: store.items(table) for table in ("t0", "t1", "t2")}
        await store.sync()
        assert store.commits == 1
    # When the store opens again from the file
    async with running(Store(path, name="s")) as again:
        # Then every table holds the rows memory held, in the same order
        assert {table: again.items(table) for table in expected} == expected
    assert 100 < sum(map(len, expected.values())) < 3 * 397  # some deleted, some kept


def test_every_statement_a_commit_writes_with_finds_its_rows_by_the_index(
    tmp_path: Path,
) -> None:
    # Given a store's file, as the store makes it
    path = tmp_path / "s.sqlite"
    trio.run(_open_and_close, path)
    with contextlib.closing(sqlite3.connect(path)) as db:
        for statement in [*PUTS.values(), *DELETES.values()]:
            # When SQLite plans a statement a commit may write with
            count = statement.count("?")
            plan = db.execute(f"EXPLAIN QUERY PLAN {statement}", ["t", "k"] * (count // 2))
            steps = [row[3] for row in plan]
            # Then it never scans the table (a delete searches the primary key's index)
            assert not [step for step in steps if step.startswith("SCAN entries")], steps
            if statement.startswith("DELETE"):
                assert any("USING INDEX sqlite_autoindex_entries_1" in step for step in steps)


def test_a_sqlite_with_a_lower_bound_on_parameters_takes_a_batch_in_smaller_statements(
    tmp_path: Path,
) -> None:
    # Given a store's file opened by an SQLite whose statements take at most
    # 999 parameters (its default before 3.32: RHEL 8's 3.26, for one)
    db, _ = open_database(tmp_path / "s.sqlite", 0.0)
    with contextlib.closing(db):
        db.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
        # When a batch of 300 puts, then 299 deletes of them, is committed
        puts: list[Write] = [("t", str(i), b"%d" % i, None) for i in range(300)]
        deletes: list[Write] = [("t", str(i), None, None) for i in range(299)]
        commit(db, puts + deletes, None)
        # Then it is on disk whole (no statement took more than the bound)
        rows = db.execute("SELECT key, value FROM entries").fetchall()
    assert rows == [("299", b"299")]


SPILL_CHILD = """
import sys
from pathlib import Path

from actorctl.store._sqlite import commit, open_database

db, _ = open_database(Path(sys.argv[1]), 0.0)
keys = [f"{i * 7919 % 4000:06d}" for i in range(4000)]  # spread over the index
commit(db, [("t", key, b"x" * 200, None) for key in keys], None)
for start in range(0, 4000, 256):  # statements that change many pages there
    commit(db, [("t", key, b"y" * 200, None) for key in keys[start : start + 256]], None)
db.close()
print("committed", flush=True)
"""


def test_a_commit_of_many_rows_makes_no_temporary_file(tmp_path: Path) -> None:
    # Given SQLite's directory for temporary files, one of the test's own
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    os.utime(temporary, ns=(0, 0))  # a file made there would move it to now
    # When a process commits batches whose statements each change many pages
    # (their statement journals pass the 64 KiB SQLite keeps in memory by default)
    done = subprocess.run(
        [sys.executable, "-c", SPILL_CHILD, str(tmp_path / "s.sqlite")],
        env={**os.environ, "SQLITE_TMPDIR": str(temporary)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout == "committed\n", done.stderr
    # Then no file was made there (made and unlinked, it would leave the
    # directory's modification time moved): the journals stayed in memory
    assert temporary.stat().st_mtime_ns == 0


async def _open_and_close(path: Path) -> None:
    async with running(Store(path, name="s")) as store:
        store.put("t", "k", b"v")


CHILD = """
import sys
from pathlib import Path

import trio

from actorctl import ConfigError, Node, open_node
from actorctl.cluster import INSECURE, load_cluster
from actorctl.store import Store, Write


async def main() -> None:
    store = Store(Path(sys.argv[1]), name="child")
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        for i in range(int(sys.argv[2])):
            store.put("backlog", f"m{i}", b"message %d" % i)
        await store.sync()
        print("synced", flush=True)
        await trio.sleep_forever()


trio.run(main)
"""


async def test_synced_rows_survive_a_sigkill_of_the_process(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    path, rows = tmp_path / "store.sqlite", 500
    paths = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    # Given a process that wrote rows and synced them
    command = [sys.executable, "-c", CHILD, str(path), str(rows)]
    process: trio.Process = await nursery.start(
        functools.partial(trio.run_process, command, stdout=subprocess.PIPE, env=env, check=False)
    )
    assert process.stdout is not None
    with trio.fail_after(30):
        said = b""
        while b"synced\n" not in said:
            chunk = await process.stdout.receive_some(4096)
            assert chunk, "the child exited before it synced"
            said += chunk
        # When it is killed with SIGKILL (our own child, by its PID)
        os.kill(process.pid, signal.SIGKILL)
        assert await process.wait() == -signal.SIGKILL
    # Then every synced row is there when the store opens again
    async with running(Store(path, name="again")) as store:
        assert store.items("backlog") == [(f"m{i}", b"message %d" % i) for i in range(rows)]


@pytest.mark.parametrize("broken", ["parent-is-a-file", "not-a-database"])
async def test_a_store_that_cannot_open_its_file_keeps_state_in_memory(
    tmp_path: Path, broken: str, logs: Logs
) -> None:
    # Given a path under a regular file (fails as root too), or a file that is no database
    (tmp_path / "afile").write_bytes(b"this is no SQLite database, but a file " * 100)
    path = (
        tmp_path / "afile" / "store.sqlite" if broken == "parent-is-a-file" else tmp_path / "afile"
    )
    store = Store(path, name="n1")
    # When it runs, then it says so once, and goes on in memory
    with trio.fail_after(10):
        async with running(store):
            [failed] = logs.of_type("actorctl:store:failed")
            assert failed["store"] == "n1"
            assert failed["path"] == str(path)
            assert failed["error"]
            assert failed["fallback"] == "keeping state in memory from now on"
            assert store.durable is False
            store.put("t", "k", b"v")
            await store.sync()
            assert store.get("t", "k") == b"v"


async def test_a_disk_that_fills_up_is_logged_and_writes_go_on_in_memory(
    tmp_path: Path, logs: Logs
) -> None:
    async with running(Store(tmp_path / "s.sqlite", name="n1")) as store:
        store.put("t", "first", b"1")
        await store.sync()
        # Given a database that may not grow any more (SQLite then says the disk is full)
        assert store._db is not None  # no commit runs now: the test may use it
        pages = store._db.execute("PRAGMA page_count").fetchone()[0]
        store._db.execute(f"PRAGMA max_page_count = {pages}")
        # When a write needs more room
        with trio.fail_after(10):
            store.put("t", "big", os.urandom(1 << 20))
            await store.sync()
        # Then the failure is logged, and nothing is lost in memory
        [failed] = logs.of_type("actorctl:store:failed")
        assert "full" in failed["error"]
        assert store.durable is False
        store.put("t", "after", b"3")
        await store.sync()
        assert [key for key, _ in store.items("t")] == ["first", "big", "after"]


# -- a node's store --------------------------------------------------------------------


async def test_a_node_runs_its_store_and_commits_it_when_it_stops(tmp_path: Path) -> None:
    path = tmp_path / "n1" / "store.sqlite"
    # Given a node with a store on disk
    async with open_node("n1", insecure=True, store=Store(path, name="n1")) as node:
        # Then the store was open before the node was ready, and its outbox has it
        assert node.store.durable
        assert node.outbox.store is node.store
        assert path.is_file()
        # When a write is made that nobody syncs, and the node stops
        node.store.put("backlog", "m1", b"message")
    # Then it was committed on the way out
    async with running(Store(path, name="again")) as store:
        assert store.items("backlog") == [("m1", b"message")]


def test_a_node_without_a_store_keeps_one_in_memory() -> None:
    node = Node("n1", security=INSECURE)
    assert (node.store.path, node.store.durable) == (None, False)
    assert node.outbox.store is node.store


# -- a node's store, from cluster.toml -------------------------------------------------


def _cluster(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "cluster.toml"
    path.write_text(
        f'[cluster]\ninsecure = true\n\n[[node]]\nname = "n1"\nlisten = "127.0.0.1:{free_port()}"\n'
        f"{extra}"
    )
    return path


def test_durable_must_be_true_or_false(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_cluster(_cluster(tmp_path, 'durable = "yes"\n'))
    message = str(caught.value)
    assert str(tmp_path / "cluster.toml") in message
    assert "key 'node[0].durable': expected true or false" in message
    assert "node 'n1'" in message
    assert message.endswith("got 'yes'")


def test_a_node_with_durable_false_has_a_memory_store(tmp_path: Path) -> None:
    config = load_cluster(_cluster(tmp_path, "durable = false\n"))
    store = config.store(config.node("n1"))
    assert (store.path, store.durable) == (None, False)


async def test_a_node_of_a_cluster_keeps_its_store_under_data(tmp_path: Path) -> None:
    # Given a cluster file whose node does not say `durable`
    config = load_cluster(_cluster(tmp_path))
    node = config.node("n1")
    runner = LocalForeman(config, node, NodeState(node.name))
    # When the node runs, then its store is data/n1/store.sqlite beside the file
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(runner.run)
            assert runner.state.state == "running"
            assert (tmp_path / "data" / "n1" / "store.sqlite").is_file()
            nursery.cancel_scope.cancel(reason="test done")


async def test_node_run_with_its_cluster_keeps_its_store_under_data(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    # Given `actorctl node run` for a node of a cluster file
    config = load_cluster(_cluster(tmp_path))
    node = config.node("n1")
    process = await start_cli(
        nursery, "node", "run", "--cluster", config.path, "--name", "n1", "--listen", node.listen,
        "--insecure",
    )  # fmt: skip
    with trio.fail_after(30):
        await node_ready(process)
        # Then its store is data/n1/store.sqlite beside the file
        assert (tmp_path / "data" / "n1" / "store.sqlite").is_file()
        process.send_signal(signal.SIGINT)  # our own child, by its PID
        assert await process.wait() == 0
