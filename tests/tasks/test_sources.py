"""Data sources on an in-process cluster (``actorctl.testing``): each built-in
kind's items fed through a pool and counted from the runs the task records
(every item ran once: lost 0, twice 0); a slow pool slows the source (its read
position lags what there is); a read that fails is tried again, a source that
keeps failing is restarted by its supervisor; wrong declarations refused by name.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from actorctl import Actor, App, ConfigError, TaskContext, handler, open_node
from actorctl.cluster._http import Request, Response, serve_http
from actorctl.tasks import SourceActor
from actorctl.tasks.sources._source import SourceSpec, item_id
from actorctl.testing import TestCluster, open_cluster
from tests.support.harness import Logs, free_port

WAIT = 20.0
FETCHED = "actorctl:source:states-fetched"

app = App("src")
app.pool("celery", concurrency=8)
app.pool("slow", concurrency=1)


class Runs:
    """The task id of every run, and a wait for a number of distinct ones."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self._changed = trio.Event()

    def add(self, task_id: str) -> None:
        self.seen[task_id] += 1
        self._changed.set()

    async def wait_for(self, count: int) -> None:
        with trio.fail_after(WAIT):
            while len(self.seen) < count:
                self._changed = trio.Event()
                await self._changed.wait()

    def counted(self, ids: list[str]) -> tuple[list[str], list[str]]:
        """The ids that never ran (lost), and those that ran twice or more."""
        lost = [i for i in ids if not self.seen[i]]
        return lost, sorted(i for i, n in self.seen.items() if n > 1)


RUNS = Runs()


@app.task(bind=True)
async def collect(ctx: TaskContext, item: Any) -> None:
    RUNS.add(ctx.id)


@app.task(bind=True, pool="slow")
async def crawl(ctx: TaskContext, item: Any) -> None:
    await trio.sleep(0.02)  # the work itself: a pool that takes a little time per item
    RUNS.add(ctx.id)


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    global RUNS
    RUNS = Runs()
    yield
    app.sources.clear()


def source_of(cluster: TestCluster, name: str) -> SourceActor:
    actor = cluster.actors["services"][f"source.{name}"]
    assert isinstance(actor, SourceActor)
    return actor


def lines(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{n}\n".encode() for n in range(count)]


def line_ids(name: str, file: str, written: list[bytes], start: int = 0) -> list[str]:
    ids, at = [], start
    for line in written:
        at += len(line)
        ids.append(item_id(name, [file, at]))
    return ids


async def test_a_directory_source_sends_every_whole_line_once(tmp_path: Path) -> None:
    # Given two files and a line being written, declared as a source
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    first, second = lines("a", 30), lines("b", 20)
    (inbox / "001.log").write_bytes(b"".join(first))
    (inbox / "002.log").write_bytes(b"".join(second) + b"half")
    app.add_source("files", "directory", task=collect, path=str(inbox), poll=0.05, batch=7)
    async with open_cluster(app, directory=tmp_path / "cluster"):
        # When it reads them, Then every whole line ran once
        ids = line_ids("files", "001.log", first) + line_ids("files", "002.log", second)
        await RUNS.wait_for(len(ids))
        # When the line is finished and a new file comes, Then they are read too
        with (inbox / "002.log").open("ab") as handle:
            handle.write(b"-done\n")
        third = lines("c", 5)
        (inbox / "003.log").write_bytes(b"".join(third))
        grown = sum(map(len, second))
        ids += [item_id("files", ["002.log", grown + len(b"half-done\n")])]
        ids += line_ids("files", "003.log", third)
        await RUNS.wait_for(len(ids))
    lost, twice = RUNS.counted(ids)
    assert (lost, twice, len(RUNS.seen)) == ([], [], len(ids))


async def test_an_http_source_sends_each_key_once_however_often_polled(tmp_path: Path) -> None:
    # Given an endpoint whose list grows, and answers the old items again
    items = [{"id": n, "v": n * n} for n in range(1, 26)]

    async def answer(request: Request) -> Response:
        return Response(200, "application/json", json.dumps(items).encode())

    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_http, answer, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{port}/items"
        app.add_source("feed", "http", task=collect, url=url, key="id", poll=0.05, batch=10)
        async with open_cluster(app, directory=tmp_path / "cluster"):
            await RUNS.wait_for(25)
            items.extend({"id": n, "v": n * n} for n in range(26, 41))
            await RUNS.wait_for(40)
        nursery.cancel_scope.cancel(reason="test over")
    lost, twice = RUNS.counted([item_id("feed", n) for n in range(1, 41)])
    assert (lost, twice, len(RUNS.seen)) == ([], [], 40)


async def test_a_sqlite_source_sends_each_row_past_its_key_once(tmp_path: Path) -> None:
    # Given a table of rows, then more rows added while it runs
    database = tmp_path / "orders.sqlite"
    with sqlite3.connect(database) as db:
        db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
        db.executemany("INSERT INTO orders VALUES (?, ?)", [(n, n / 2) for n in range(1, 51)])
    app.add_source(
        "orders", "sqlite", task=collect, database=str(database), table="orders", key="id",
        poll=0.05, batch=16,
    )  # fmt: skip
    async with open_cluster(app, directory=tmp_path / "cluster"):
        await RUNS.wait_for(50)
        with sqlite3.connect(database) as db:
            db.executemany("INSERT INTO orders VALUES (?, ?)", [(n, 0.0) for n in range(51, 71)])
        await RUNS.wait_for(70)
    lost, twice = RUNS.counted([item_id("orders", n) for n in range(1, 71)])
    assert (lost, twice, len(RUNS.seen)) == ([], [], 70)


async def test_a_slow_pool_slows_its_source(tmp_path: Path) -> None:
    # Given 120 lines for a pool that runs one item at a time, a window of 4
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    written = lines("x", 120)
    (inbox / "big.log").write_bytes(b"".join(written))
    app.add_source("big", "directory", task=crawl, path=str(inbox), poll=0.05, window=4)
    async with open_cluster(app, directory=tmp_path / "cluster") as cluster:
        source = source_of(cluster, "big")
        # When 20 have run, Then the source has read no more than those plus its window
        await RUNS.wait_for(20)
        read = source.position[1]
        total = sum(map(len, written))
        assert source.sent <= len(RUNS.seen) + 4
        assert read < total / 2, (read, total)
        assert len(source.in_flight) <= 4
        await RUNS.wait_for(120)
    lost, twice = RUNS.counted(line_ids("big", "big.log", written))
    assert (lost, twice) == ([], [])


class Flaky:
    """Fails its first ``fails`` reads (over all its instances), then counts to 10."""

    made = 0
    calls = 0

    def __init__(self, fails: int) -> None:
        Flaky.made += 1
        self.fails = fails

    async def read(self, after: Any, limit: int) -> list[tuple[Any, Any]]:
        Flaky.calls += 1
        if Flaky.calls <= self.fails:
            raise OSError(f"read {Flaky.calls} failed")
        start = 0 if after is None else after
        return [(n, n) for n in range(start + 1, min(start + limit, 10) + 1)]


async def test_failing_reads_are_retried_and_a_source_that_keeps_failing_restarts(
    tmp_path: Path,
) -> None:
    # Given a user's source whose first 7 reads fail: 5 in a row restart it
    Flaky.made = Flaky.calls = 0
    app.add_source("flaky", Flaky, task=collect, poll=0.05, fails=7)
    made_by_check = Flaky.made
    async with open_cluster(app, directory=tmp_path / "cluster"):
        # Then every item still ran once, and it was made afresh by a restart
        await RUNS.wait_for(10)
    lost, twice = RUNS.counted([item_id("flaky", n) for n in range(1, 11)])
    assert (lost, twice) == ([], [])
    assert Flaky.made - made_by_check >= 2


class Sink(Actor):
    """An actor a source feeds: counts each item by the message that carried it."""

    name = "sink"

    def __init__(self) -> None:
        self.items: Counter[str] = Counter()
        self.changed = trio.Event()

    @handler
    async def take(self, item: Any) -> None:
        self.items[json.dumps(item)] += 1
        self.changed.set()
        self.changed = trio.Event()


async def test_a_source_feeds_an_actor_each_item_once(tmp_path: Path) -> None:
    # Given an actor on a node of its own, and a directory source that feeds it
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    written = lines("x", 40)
    (inbox / "a.log").write_bytes(b"".join(written))
    sink = Sink()
    async with open_node("sinks", [sink], host="127.0.0.1", port=0, insecure=True) as node:
        address = str(node.address_of("sink"))
        app.add_source("feed", "directory", actor=address, path=str(inbox), poll=0.05, batch=8)
        async with open_cluster(app, directory=tmp_path / "cluster") as cluster:
            # When it reads them, Then the actor took every line once
            with trio.fail_after(WAIT):
                while len(sink.items) < len(written):
                    await sink.changed.wait()
            await cluster.wait_idle(timeout=WAIT)
    assert sorted(sink.items.values()) == [1] * len(written)
    assert len(sink.items) == len(written)
    # (nothing went to the pool: the actor was the target)
    assert not RUNS.seen


def test_wrong_declarations_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no source kind 'directry': did you mean 'directory'"):
        app.add_source("a", "directry", task=collect, path=str(tmp_path))
    with pytest.raises(ConfigError, match=r"no task named 'colect': did you mean '.*collect'"):
        app.add_source("a", "directory", task="colect", path=str(tmp_path))
    with pytest.raises(ConfigError, match=r"key 'url': a directory source does not read it"):
        app.add_source("a", "directory", task=collect, path=str(tmp_path), url="http://x")
    with pytest.raises(ConfigError, match=r"key 'path' is missing"):
        app.add_source("a", "directory", task=collect)
    with pytest.raises(ConfigError, match=r"exactly one of task = \.\.\. and actor"):
        app.add_source("a", "directory", path=str(tmp_path))
    with pytest.raises(ConfigError, match=r"has no read\(after, limit\)"):
        app.add_source("a", dict, task=collect)
    assert not app.sources


class Numbers:
    """Counts 1 to ``total``: each number's position is itself."""

    def __init__(self, total: int) -> None:
        self.total = total

    async def read(self, after: Any, limit: int) -> list[tuple[Any, Any]]:
        start = 0 if after is None else after
        return [(n, n) for n in range(start + 1, min(start + limit, self.total) + 1)]


async def test_a_source_on_a_memory_store_restarted_from_the_start_does_not_stall(
    tmp_path: Path, logs: Logs
) -> None:
    total, window = 30, 10
    spec = SourceSpec(
        "numbers", lambda: Numbers(total), "tests:Numbers", task="src.collect", pool="celery",
        poll=0.05, window=window,
    )  # fmt: skip
    ids = [item_id("numbers", n) for n in range(1, total + 1)]
    async with open_cluster(app, directory=tmp_path / "cluster") as cluster:
        assert cluster.client is not None
        directory = cluster.client.directory
        port = free_port()
        # Given a source on a node with a memory store (durable = false) that fed 30 items
        async with open_node(
            "feeder", {"source.numbers": SourceActor(spec, directory)}, port=port, insecure=True
        ):
            await RUNS.wait_for(total)
        # When its node starts again: it has no checkpoint, and reads from the start
        again = SourceActor(spec, directory)
        async with open_node("feeder", {"source.numbers": again}, port=port, insecure=True):
            # Then what it sends again is taken as a duplicate, not run again, and its
            # window is freed by the results the worker's node keeps: it reads to the end
            with trio.fail_after(WAIT):
                fetched = 1
                while (
                    sum(m["items"] for m in logs.of_type("actorctl:source:states-fetched")) < total
                ):
                    await logs.wait_for("actorctl:source:states-fetched", fetched)
                    fetched += 1
            assert (again.sent, again.done, again.in_flight) == (total, total, {})
    assert RUNS.counted(ids) == ([], [])
    # and it said at each start why it reads from the start
    started = logs.of_type("actorctl:source:from-the-start")
    assert [m["source"] for m in started] == ["numbers", "numbers"]
    assert "durable = false" in started[0]["warning"]
