"""A cluster of real processes run by ``actorctl cluster up``, read from a thread.

``RunningCluster`` writes a cluster.toml (a services node and one worker node,
both importing a task app of tests/apps/) in a directory of its own, so that
each node's store is ``data/NODE/store.sqlite`` there, starts ``cluster up``
on it and reads its output line by line: the pid of each node, and each
restart. A test kills a node with SIGKILL, by its pid, waits until ``cluster
up`` has started it again, and counts what ran in the records directory
(tests/apps/state_app.py writes one line per run). Used by the task state,
acks, periodic, sources, reload, control, ``cluster down`` and boxed-cluster
tests (the last runs a cluster file of its own).
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import select
import signal
import sqlite3
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType

from examples._cluster import stop_cluster, with_free_ports

from tests.apps.state_app import RECORDS, runs
from tests.support.cli import ACTORCTL, ROOT, cli_env
from tests.support.filewatch import wait_written
from tests.support.harness import free_port

__all__ = ["CLUSTER", "READY", "WAIT", "RunningCluster", "counted", "poll_until"]

WAIT = 30.0  # seconds any one result, restart or record may take on a loaded 2-core machine
READY = 90.0  # seconds the whole cluster may take to start

#: The cluster file, its ports and the app its nodes import to be filled in.
CLUSTER = """\
[cluster]
name = "state"
dev = true
controller = "127.0.0.1:{controller}"

[[node]]
name = "services"
listen = "127.0.0.1:{services}"
actors = "{app}"
services = true

[[node]]
name = "worker"
listen = "127.0.0.1:{worker}"
actors = "{app}"
pools = ["celery"]
"""

_READY = re.compile(r"^node (\S+) ready at (\S+) \(pid (\d+)\)(?: \(restart (\d+)\))?$")


class RunningCluster:
    """``actorctl cluster up`` on ``directory/cluster.toml``, its output read
    line by line: the pid of each node, and each restart.

    As a context manager it starts the cluster and stops it (SIGTERM, warm,
    as ``cluster down`` does) on the way out, also when it did not get to be
    ready."""

    def __init__(
        self,
        directory: Path,
        app: str = "tests.apps.state_app:app",
        *,
        text: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """``text``: another cluster file to run than :data:`CLUSTER` (each
        ``127.0.0.1:PORT`` in it given a free port); ``env``: more of the
        environment ``cluster up`` runs in."""
        self.directory = directory
        self.path = directory / "cluster.toml"
        self.records = directory / "records"
        self.records.mkdir()
        ports = {name: free_port() for name in ("controller", "services", "worker")}
        self.path.write_text(
            CLUSTER.format(app=app, **ports) if text is None else with_free_ports(text)
        )
        self.pids: dict[str, int] = {}
        self.restarts: dict[str, int] = {}
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.env = cli_env({RECORDS: str(self.records), **(env or {})})
        self._process: subprocess.Popen[str] | None = None
        self._pumping: threading.Thread | None = None

    def __enter__(self) -> RunningCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

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
        stop_cluster(process)
        if self._pumping is not None:
            self._pumping.join(10)  # it read to the end of the output
        if process.stdout is not None:
            process.stdout.close()

    def down(self) -> subprocess.CompletedProcess[str]:
        """``actorctl cluster down`` this cluster, and wait until ``cluster up``
        has exited (its nodes stopped): what the command did."""
        assert self._process is not None
        said = subprocess.run(
            [*ACTORCTL, "cluster", "down", str(self.path)],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=WAIT,
            check=False,
        )
        if said.returncode == 0:
            self._process.wait(WAIT)
        return said

    def kill(self, node: str, *, dead: Callable[[], None] | None = None) -> None:
        """SIGKILL ``node``'s process and wait until ``cluster up`` started it
        again; with ``dead``, call it once the process is gone, before that."""
        pid = self.pids[node]
        restarts = self.restarts.get(node, 0)
        gone = os.pidfd_open(pid)  # readable once the process has ended
        try:
            os.kill(pid, signal.SIGKILL)
            if dead is not None:
                readable, _, _ = select.select([gone], [], [], WAIT)
                assert readable, f"node {node} (pid {pid}) still ran {WAIT:g} s after SIGKILL"
                dead()
        finally:
            os.close(gone)
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

    def wait_until(self, what: str, check: Callable[[], bool], timeout: float = WAIT) -> None:
        """Look at the files the cluster writes (its records, its nodes'
        stores) until ``check`` holds: again at each write to one of them
        (tests/support/filewatch.py), for ``timeout`` s."""
        data = self.directory / "data"
        stores = sorted(p for p in data.iterdir() if p.is_dir()) if data.is_dir() else []
        wait_written(what, check, [self.records, *stores], timeout)

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


def poll_until(what: str, check: Callable[[], bool], timeout: float = WAIT) -> None:
    """Ask again every 0.05 s until ``check`` holds, for ``timeout`` s: only
    for what nothing signals to the test (a node asked over the network);
    what the cluster writes to files is waited on by ``RunningCluster.wait_until``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        time.sleep(0.05)  # a poll: no write wakes us (see the docstring)


def counted(cluster: RunningCluster, ids: list[str]) -> tuple[list[str], dict[str, int]]:
    """The ids in ``ids`` that never ran (lost), and those that ran more than once."""
    seen = Counter(runs(cluster.records))
    lost = [task_id for task_id in ids if seen[task_id] == 0]
    twice = {task_id: seen[task_id] for task_id in ids if seen[task_id] > 1}
    if twice:
        print(f"ran more than once: {twice}")
    return lost, twice
