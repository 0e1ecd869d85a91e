"""Retries and dead letters with real processes: ``actorctl cluster up`` runs a
services node (router, scheduler) and a worker node of tests/apps/retry_app.py,
and the tasks call a downstream TCP service that this test runs in a thread.

Every run of a task records itself (its task id and attempt) in a file; the
test counts them: nothing lost, nothing run more often than its retry budget
allows. ``actorctl deadletters`` is driven as a user drives it, from another
process.
"""

from __future__ import annotations

import json
import os
import signal
import socketserver
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from examples._cluster import running_cluster

from actorctl import AsyncResult
from tests.apps.retry_app import POLICY, RECORDS, app, fetch
from tests.support.cli import run_cli

T = TypeVar("T")
WAIT = 60.0
TASKS = 1000

CLUSTER = """\
[cluster]
name = "retries"
dev = true
controller = "127.0.0.1:5900"

[[node]]
name = "services"
listen = "127.0.0.1:5901"
actors = "tests.apps.retry_app:app"
services = true

[[node]]
name = "worker"
listen = "127.0.0.1:5902"
actors = "tests.apps.retry_app:app"
pools = ["celery"]
"""


class Downstream(socketserver.ThreadingTCPServer):
    """Answers ``fail`` until it has failed ``outage`` calls, then ``ok``:
    the service comes back on that event (``up``), not after a time."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, outage: int) -> None:
        super().__init__(("127.0.0.1", 0), _Answer)
        self.outage = outage
        self.failed = 0
        self.calls = 0
        self.lock = threading.Lock()
        self.up = threading.Event()
        self.called = threading.Condition(self.lock)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def answer(self) -> bytes:
        with self.lock:
            self.calls += 1
            self.called.notify_all()
            if self.failed < self.outage:
                self.failed += 1
                if self.failed == self.outage:
                    self.up.set()
                return b"fail\n"
            return b"ok\n"

    def wait_calls(self, calls: int, timeout: float = WAIT) -> bool:
        with self.lock:
            return self.called.wait_for(lambda: self.calls >= calls, timeout)


class _Answer(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        assert isinstance(self.server, Downstream)
        self.wfile.write(self.server.answer())


@pytest.fixture
def downstream() -> Iterator[type[Downstream]]:
    servers: list[Downstream] = []

    def make(outage: int) -> Downstream:
        server = Downstream(outage)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield make  # type: ignore[misc]
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("records")


@pytest.fixture(scope="module")
def cluster(records: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    toml = tmp_path_factory.mktemp("cluster") / "retries.toml"
    toml.write_text(CLUSTER)
    with running_cluster(toml, echo=False, env={RECORDS: str(records)}) as path:
        yield path


def runs(records: Path) -> list[tuple[str, str, int]]:
    """Every run recorded so far: (task id, task, attempt)."""
    found = []
    for path in records.glob("*.log"):
        for line in path.read_text().splitlines():
            task_id, task, attempt = line.split()
            found.append((task_id, task, int(attempt)))
    return found


def actorctl(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, timeout=WAIT)


def letters(cluster: Path, reason: str = "out-of-retries") -> list[dict[str, Any]]:
    """The letters of one reason, as ``actorctl deadletters list --json`` gives them."""
    listed = actorctl(
        "deadletters", "list", str(cluster), "--limit", str(TASKS), "--reason", reason, "--json"
    )
    assert listed.returncode == 0, listed.stderr
    return list(json.loads(listed.stdout))


def wait_for(check: Callable[[], T | None], what: str, timeout: float = WAIT) -> T:
    """``check()`` until it returns something (not None), by an absolute
    deadline; fails saying what it waited for. (Each check asks the running
    cluster, from this process or another; attempts are 50 ms apart at least.)"""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        found = check()
        if found is not None:
            return found
        if time.monotonic() >= deadline:
            pytest.fail(f"waited {timeout:g} s for {what}")
        pause.wait(0.05)


def succeeded(task_id: str) -> Callable[[], AsyncResult | None]:
    """A check: the result the cluster keeps for ``task_id``, once SUCCESS."""

    def check() -> AsyncResult | None:
        result = app.AsyncResult(task_id)
        result.get(timeout=WAIT, propagate=False)
        return result if result.state == "SUCCESS" else None

    return check


def test_a_thousand_tasks_against_a_downstream_that_is_down_for_a_while(
    cluster: Path, records: Path, downstream: type[Downstream]
) -> None:
    # Given a downstream service that fails its first 1,500 calls, then recovers
    service = downstream(1500)
    budget = 1 + (POLICY.max_retries or 0)
    # When 1,000 tasks call it, each under the app's policy (3 retries)
    with app.connect(cluster):
        results: list[AsyncResult] = [fetch.delay(service.port) for _ in range(TASKS)]
        for result in results:
            result.get(timeout=WAIT, propagate=False)
    # Then every task ended: succeeded, or failed after its retries
    states = Counter(r.state for r in results)
    assert set(states) <= {"SUCCESS", "FAILURE"}, states
    failed = [r for r in results if r.state == "FAILURE"]
    for result in failed:
        assert "gave up after 3 retries" in str(result.result)
    assert service.up.is_set()
    # And none was lost, and none ran more often than its budget allows
    ours = {r.id for r in results}
    counted = Counter(task_id for task_id, task, _ in runs(records) if task_id in ours)
    assert set(counted) == ours
    assert max(counted.values()) <= budget
    attempts = Counter((t, a) for t, _, a in runs(records) if t in ours)
    twice = sum(1 for n in attempts.values() if n > 1)
    assert sum(counted.values()) == service.calls
    # And every task that failed is a dead letter, and no other is (the letters
    # go there through the worker node's backlog: the list may lag a moment)
    rows = wait_for(
        lambda: found if len(found := letters(cluster)) >= len(failed) else None,
        f"{len(failed)} out-of-retries dead letters",
    )
    assert sorted(row["trace_id"] for row in rows) == sorted(r.id for r in failed)
    print(
        f"\n{TASKS} tasks: {states['SUCCESS']} succeeded, {len(failed)} dead-lettered, "
        f"0 lost; {sum(counted.values())} runs; {twice} attempts ran twice"
    )
    assert actorctl("deadletters", "purge", str(cluster)).returncode == 0


def test_deadletters_retry_re_drives_a_letter_once(
    cluster: Path, records: Path, downstream: type[Downstream]
) -> None:
    # Given a task that failed with no retries allowed: a dead letter
    service = downstream(1)
    with app.connect(cluster):
        result = fetch.apply_async((service.port,), max_retries=0)
        result.get(timeout=WAIT, propagate=False)
    assert result.state == "FAILURE"
    rows = wait_for(lambda: letters(cluster) or None, "the task's dead letter")
    [row] = rows
    assert row["trace_id"] == result.id
    letter_id = row["id"]
    # And `cluster status` counts it under the worker node
    status = actorctl("cluster", "status", str(cluster))
    assert status.returncode == 0, status.stderr
    [kept] = [
        line
        for line in status.stdout.splitlines()
        if "dead-letters" in line and " 0 kept" not in line
    ]
    assert "_deadletters  dead-letters  ok  1 kept (max 10000)" in kept
    shown = actorctl("deadletters", "show", str(cluster), letter_id)
    assert shown.returncode == 0, shown.stderr
    letter = json.loads(shown.stdout)
    assert (letter["reason"], letter["trace_id"], letter["retries"]) == (
        "out-of-retries",
        result.id,
        0,
    )
    assert letter["headers"]["task_id"] == result.id
    assert letter["sender"]  # the key id that authenticated it (the client's, via the router)
    # When it is re-driven (the service is up now)
    again = actorctl("deadletters", "retry", str(cluster), letter_id)
    assert again.returncode == 0, again.stderr
    assert f"as message {letter['message_id']} (re-drive 1)" in again.stdout
    # Then it runs again, under its task id, and succeeds: exactly one more run
    with app.connect(cluster):
        done = wait_for(succeeded(result.id), f"task {result.id} to succeed after its re-drive")
    assert done.result == "ok"
    assert [attempt for task_id, _, attempt in runs(records) if task_id == result.id] == [0, 0]
    assert service.calls == 2
    # And a second re-drive of the same letter is refused, saying why
    twice = actorctl("deadletters", "retry", str(cluster), letter_id)
    assert twice.returncode == 1
    assert "re-driven already" in twice.stderr
    # And an unknown operation or reason is a clear error, not a traceback
    bad = actorctl("deadletters", "list", str(cluster), "--reason", "lost")
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr


def test_deadletters_list_reports_a_node_that_does_not_answer(cluster: Path) -> None:
    # Given a running cluster whose worker node is stopped (SIGSTOP: its
    # process is there, its connections open, but it answers nothing)
    status = actorctl("cluster", "status", str(cluster))
    assert status.returncode == 0, status.stderr
    [line] = [x for x in status.stdout.splitlines() if " worker  node " in x]
    pid = int(line.split(" pid ")[1].split()[0])
    os.kill(pid, signal.SIGSTOP)
    try:
        # When the dead letters are listed and purged, within 3 s
        listed = actorctl("deadletters", "list", str(cluster), "--timeout", "3")
        purged = actorctl("deadletters", "purge", str(cluster), "--timeout", "3")
    finally:
        os.kill(pid, signal.SIGCONT)
    # Then the nodes that answered are listed, and the one that did not is
    # named, with why: it was given the caller's timeout less a margin (the
    # nodes are asked at once, not one timeout after another)
    assert listed.returncode == 1
    assert "no dead letters" in listed.stdout  # the services node's (none)
    assert "error: node 'worker' did not answer: AskTimeout" in listed.stderr
    assert "within 2.4 s" in listed.stderr, listed.stderr
    assert "Traceback" not in listed.stderr
    assert purged.returncode == 1
    assert "purged 0 dead letter(s)" in purged.stdout
    assert "error: node 'worker' did not answer" in purged.stderr
