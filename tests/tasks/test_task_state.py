"""Task state that outlives its node: delayed tasks, revokes, chord barriers and
results are kept in each node's SQLite store (docs/guarantees.md).

The module runs a cluster of its own: ``actorctl cluster up`` on a cluster.toml
in a temporary directory, so that each node's store is ``data/NODE/store.sqlite``
there. It has a services node (the pool's router, the scheduler, the chord
barrier) and one worker node, so that a task can only run where the test kills.
A test kills a node with SIGKILL, by its pid, and waits until ``cluster up``
has started it again; then it counts what ran: every task records its id in a
file (tests/apps/state_app.py). Nothing may be lost; what ran twice is reported.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from examples._cluster import stop_cluster

from actorctl import AskTimeout, TaskRevoked, chord
from actorctl.tasks.protocol._protocol import new_task_id
from tests.apps.state_app import RECORDS, app, fails, gated, note, runs, shut_gate, total
from tests.support.harness import free_port

ROOT = Path(__file__).resolve().parents[2]
ACTORCTL = [sys.executable, "-m", "actorctl"]
WAIT = 30.0  # seconds any one result, restart or record may take on a loaded 2-core machine
READY = 90.0  # seconds the whole cluster may take to start
COUNTDOWN = 6.0  # seconds until a delayed task is due: past a node's restart

CLUSTER = """\
[cluster]
name = "state"
dev = true
controller = "127.0.0.1:{controller}"

[[node]]
name = "services"
listen = "127.0.0.1:{services}"
actors = "tests.apps.state_app:app"
services = true

[[node]]
name = "worker"
listen = "127.0.0.1:{worker}"
actors = "tests.apps.state_app:app"
pools = ["celery"]
"""

_READY = re.compile(r"^node (\S+) ready at (\S+) \(pid (\d+)\)(?: \(restart (\d+)\))?$")


class RunningCluster:
    """``actorctl cluster up`` on ``directory/cluster.toml``, its output read
    line by line: the pid of each node, and each restart."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / "cluster.toml"
        self.records = directory / "records"
        self.records.mkdir()
        ports = {name: free_port() for name in ("controller", "services", "worker")}
        self.path.write_text(CLUSTER.format(**ports))
        self.pids: dict[str, int] = {}
        self.restarts: dict[str, int] = {}
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.env = {**os.environ, RECORDS: str(self.records)}
        paths = [str(ROOT), self.env.get("PYTHONPATH", "")]
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        self._process: subprocess.Popen[str] | None = None
        self._pumping: threading.Thread | None = None

    def start(self) -> None:
        self._process = subprocess.Popen(
            [*ACTORCTL, "cluster", "up", str(self.path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=ROOT,
            text=True,
        )
        self._pumping = threading.Thread(target=self._pump, daemon=True)
        self._pumping.start()
        self._until(lambda line: line.startswith("cluster ") and line.endswith(" ready"), READY)

    def stop(self) -> None:
        process = self._process
        if process is None:
            return
        stop_cluster(process, self.path, self.env)
        if self._pumping is not None:
            self._pumping.join(10)  # it read to the end of the output
        if process.stdout is not None:
            process.stdout.close()

    def kill(self, node: str) -> None:
        """SIGKILL ``node``'s process and wait until ``cluster up`` started it again."""
        pid = self.pids[node]
        restarts = self.restarts.get(node, 0)
        os.kill(pid, signal.SIGKILL)
        self._until(lambda _: self.restarts.get(node, 0) > restarts, WAIT)
        assert self.pids[node] != pid

    def store(self, node: str) -> Path:
        return self.directory / "data" / node / "store.sqlite"

    def rows(self, node: str, table: str) -> dict[str, bytes]:
        """What ``node``'s store has committed in ``table`` (read by another
        process: only what a commit made durable)."""
        path = self.store(node)
        if not path.exists():
            return {}
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            found = db.execute("SELECT key, value FROM entries WHERE tbl = ?", (table,))
            return {str(key): bytes(value) for key, value in found}

    def _pump(self) -> None:
        assert self._process is not None
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _until(self, done: Callable[[str], bool], timeout: float) -> None:
        """Read output lines (noting pids and restarts) until ``done`` says yes."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"cluster up said nothing for {timeout:g} s") from None
            if line is None:
                raise AssertionError("cluster up ended")
            ready = _READY.match(line)
            if ready is not None:
                name, _, pid, restart = ready.groups()
                self.pids[name] = int(pid)
                self.restarts[name] = int(restart or 0)
            if done(line):
                return


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    running = RunningCluster(tmp_path_factory.mktemp("state"))
    try:
        running.start()
        yield running
    finally:
        running.stop()


def wait_until(what: str, check: Callable[[], bool], timeout: float = WAIT) -> None:
    """Look at files (records, a store) until ``check`` holds, for ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(0.05)


def counted(cluster: RunningCluster, ids: list[str]) -> tuple[list[str], dict[str, int]]:
    """The ids in ``ids`` that never ran (lost), and those that ran more than once."""
    seen = Counter(runs(cluster.records))
    lost = [task_id for task_id in ids if seen[task_id] == 0]
    twice = {task_id: seen[task_id] for task_id in ids if seen[task_id] > 1}
    if twice:
        print(f"ran more than once: {twice}")
    return lost, twice


# -- the scheduler ----------------------------------------------------------------------


def test_delayed_tasks_run_once_although_their_scheduler_node_was_killed(
    cluster: RunningCluster,
) -> None:
    with app.connect(cluster.path):
        # Given delayed tasks that the scheduler holds (each send returns once
        # the scheduler's store has committed it)
        sent = time.time()
        results = [note.apply_async((i,), countdown=COUNTDOWN) for i in range(20)]
        ids = [result.id for result in results]
        held = cluster.rows("services", "delayed")
        assert len(held) == 20
        # When the services node is killed, and started again before they are due
        cluster.kill("services")
        restarted = time.time()
        # Then each runs, once, when due
        values = [result.get(timeout=COUNTDOWN + WAIT) for result in results]
    assert values == list(range(20))
    assert time.time() >= sent + COUNTDOWN
    lost, _ = counted(cluster, ids)
    assert lost == []
    # and the scheduler holds none of them any more
    wait_until("the held tasks deleted", lambda: not cluster.rows("services", "delayed"))
    print(f"services restarted {restarted - sent:.1f} s after the send ({COUNTDOWN:g} s due)")


# -- revokes ----------------------------------------------------------------------------


def test_a_revoke_outlives_a_sigkill_of_the_nodes_that_recorded_it(
    cluster: RunningCluster,
) -> None:
    with app.connect(cluster.path):
        # Given two task ids revoked before their tasks were sent (recorded by
        # the worker node and by the scheduler when revoke returns)
        plain_id, delayed_id = new_task_id(), new_task_id()
        app.control.revoke([plain_id, delayed_id])
        assert plain_id in cluster.rows("worker", "revoked")
        assert delayed_id in cluster.rows("services", "revoked")
        # When both nodes are killed and started again
        cluster.kill("worker")
        cluster.kill("services")
        # Then neither task runs: a worker and the scheduler still know the revokes
        plain = note.apply_async((1,), task_id=plain_id)
        delayed = note.apply_async((2,), task_id=delayed_id, countdown=0.5)
        other = note.delay(3)
        with pytest.raises(TaskRevoked):
            plain.get(timeout=WAIT)
        with pytest.raises(TaskRevoked):
            delayed.get(timeout=WAIT)
        assert other.get(timeout=WAIT) == 3  # (and a task not revoked runs)
    assert plain_id not in runs(cluster.records)
    assert delayed_id not in runs(cluster.records)


# -- chords -----------------------------------------------------------------------------


def test_a_half_complete_chord_outlives_a_sigkill_of_its_barrier_node(
    cluster: RunningCluster,
) -> None:
    name = new_task_id()
    with app.connect(cluster.path), contextlib.ExitStack() as gates:
        # Given a chord two of whose three header tasks are done, their results
        # committed in the barrier's store, the third waiting at a gate
        gates.enter_context(shut_gate(cluster.records, name))
        result = chord([note.s(1), note.s(2), gated.s(name, 3)])(total.s())

        def two_in() -> bool:
            row = cluster.rows("services", "chords").get(result.id)
            return row is not None and len(json.loads(row)["results"]) == 2

        wait_until("two results in the chord's barrier", two_in)
        # When the services node is killed and started again, then the third
        # task finishes
        cluster.kill("services")
        gates.close()  # the gate opens
        # Then the chord completes with every result, and its body ran once
        assert result.get(timeout=WAIT) == 6
    lost, _ = counted(cluster, [result.id])
    assert lost == []
    wait_until("the barrier deleted", lambda: result.id not in cluster.rows("services", "chords"))


# -- results ----------------------------------------------------------------------------

FETCH = """\
import json, sys
from actorctl import AsyncResult, TaskFailed
from tests.apps.state_app import app
with app.connect(sys.argv[1]):
    answers = []
    for task_id in sys.argv[3:]:
        try:
            answers.append(["value", AsyncResult(task_id).get(timeout=float(sys.argv[2]))])
        except TaskFailed as exc:
            answers.append(["error", exc.type_name, str(exc)])
        except TimeoutError as exc:
            answers.append(["timeout", str(exc)])
print(json.dumps(answers))
"""


def fetch(cluster: RunningCluster, timeout: float, *ids: str) -> list[list[object]]:
    """Results by id, as another process (``python -c``) connected to the cluster gets them."""
    done = subprocess.run(
        [sys.executable, "-c", FETCH, str(cluster.path), str(timeout), *ids],
        env=cluster.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=READY,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers: list[list[object]] = json.loads(done.stdout.strip().splitlines()[-1])
    return answers


def test_a_result_is_fetched_by_id_from_another_process_after_its_worker_was_killed(
    cluster: RunningCluster,
) -> None:
    # Given a task that succeeded and one that failed
    with app.connect(cluster.path):
        good, bad = note.delay(42), fails.delay("no such key")
        assert good.get(timeout=WAIT) == 42
        with pytest.raises(LookupError):
            bad.get(timeout=WAIT)
    # Then another process gets each by its id (an unknown id times out)
    unknown = new_task_id()
    answers = fetch(cluster, WAIT, good.id, bad.id)
    assert answers[0] == ["value", 42]
    assert answers[1][:2] == ["error", "LookupError"]
    assert "no such key" in str(answers[1][2])
    assert fetch(cluster, 1.0, unknown)[0][0] == "timeout"
    # and so it does after the worker node that keeps them was killed and restarted
    cluster.kill("worker")
    assert fetch(cluster, WAIT, good.id, bad.id) == answers


async def test_a_result_is_fetched_by_id_in_trio_code(cluster: RunningCluster) -> None:
    # Given a task sent by one client, the result fetched by id by another
    async with app.aconnect(cluster.path):
        sent = await note.adelay(7)
        assert await sent.aget(timeout=WAIT) == 7
    async with app.aconnect(cluster.path):
        found = app.AsyncResult(sent.id)
        assert found.state == "PENDING"  # (in trio, only aget() asks the cluster)
        assert await found.aget(timeout=WAIT) == 7
        assert (found.state, found.ready()) == ("SUCCESS", True)
        with pytest.raises(AskTimeout):
            await app.AsyncResult(new_task_id()).aget(timeout=0.5)
