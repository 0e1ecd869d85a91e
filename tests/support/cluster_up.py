"""``actorctl cluster up`` started from a trio test, and the records its tasks write.

The fault tests (tests/tasks/test_kill.py, tests/tasks/test_warm_shutdown.py)
start ``cluster up`` on a cluster of a task app of tests/apps/ whose tasks
record each run in a file per process (tests/apps/kill_app.py), and wake the
test with a datagram at each record. ``start_cluster_up`` starts it in the
test's nursery, ``Output`` (tests/support/output.py, here for the fault
tests that import it with the rest) reads the lines it writes as the test
asks for them, ``Records`` counts the runs, ``Count`` says what became of the tasks a
test expected, and ``ClusterUp`` is the running cluster: the pids of its
nodes, and the files a test locks to hold tasks (or a node) back.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import signal
import socket
import subprocess
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import attrs
import trio

from tests.apps.kill_app import RECORDS, WAKE
from tests.support.cli import cli_env, start_cli
from tests.support.output import Output

__all__ = [
    "START",
    "WAIT",
    "ClusterUp",
    "Count",
    "Output",
    "Records",
    "records_env",
    "start_cluster_up",
]

#: Seconds the work of one test may take to run to the end on a loaded 2-core machine.
WAIT = 60.0
#: Seconds a cluster or a caller may take to say it is ready, or a node to be restarted.
START = 30.0


class Records:
    """The runs the tasks of tests/apps/kill_app.py recorded in ``directory``: one
    line (a label) per run, in a file per process. Read incrementally; a
    datagram to the directory's socket wakes whoever waits for more."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.counts: collections.Counter[str] = collections.Counter()
        self.by_file: collections.Counter[str] = collections.Counter()
        self.fresh: list[str] = []  # what the last read found
        self._offsets: dict[Path, int] = {}
        self._wake = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._wake.bind(str(directory / WAKE))
        self._wake.setblocking(False)

    def close(self) -> None:
        self._wake.close()

    def read(self) -> collections.Counter[str]:
        """Count the runs recorded since the last read; return all counts so far."""
        self.fresh = []
        for path in sorted(self.directory.glob("*.log")):
            offset = self._offsets.get(path, 0)
            with path.open("rb") as file:
                file.seek(offset)
                data = file.read()
            whole = data[: data.rfind(b"\n") + 1]  # a line still being written waits
            self._offsets[path] = offset + len(whole)
            labels = whole.decode().split()
            self.fresh += labels
            self.counts.update(labels)
            self.by_file[path.stem] += len(labels)
        return self.counts

    def of_process(self, pid: int) -> int:
        """How many runs the process ``pid`` recorded."""
        self.read()
        return self.by_file[str(pid)]

    async def wait_until(self, done: Callable[[], bool], timeout: float = WAIT) -> bool:
        """Wait until ``done()`` (asked after each read) is true; False after ``timeout``."""
        with trio.move_on_after(timeout):
            while True:
                self.read()
                if done():
                    return True
                await trio.lowlevel.wait_readable(self._wake)
                with contextlib.suppress(BlockingIOError):
                    while self._wake.recv(64):
                        pass
        return False

    async def wait_for(self, labels: Iterable[str], timeout: float = WAIT) -> Count:
        """Wait until each of ``labels`` ran (at most ``timeout`` seconds); count them."""
        expected = set(labels)
        missing = expected - self.counts.keys()

        def done() -> bool:
            missing.difference_update(self.fresh)
            return not missing

        await self.wait_until(done, timeout)
        return Count.of(expected, self.counts)


@attrs.frozen
class Count:
    """What became of the tasks a test expected to run."""

    expected: int
    lost: list[str]
    duplicated: int  # runs beyond the first of an expected task
    runs: int  # every run of an expected task

    @classmethod
    def of(cls, expected: set[str], counts: collections.Counter[str]) -> Count:
        lost = sorted(label for label in expected if not counts[label])
        runs = sum(counts[label] for label in expected)
        return cls(len(expected), lost, runs - (len(expected) - len(lost)), runs)

    def report(self, what: str) -> None:
        print(
            f"{what}: {self.expected} expected, {len(self.lost)} lost, "
            f"{self.duplicated} duplicate runs ({self.runs} runs)"
        )

    def check(self, what: str, logs: Path, *, max_duplicates: int) -> None:
        """Assert that none was lost, and that duplicates stay under a bound."""
        self.report(what)
        assert not self.lost, (
            f"{what}: {len(self.lost)} of {self.expected} never ran, e.g. "
            f"{self.lost[:10]} (node logs: {logs})"
        )
        assert self.duplicated <= max_duplicates, f"{what}: {self.duplicated} duplicates"


def _pid(line: str) -> int:
    """The PID in ``cluster up``'s line ``node NAME ready at ADDRESS (pid PID)``."""
    return int(line.rpartition("(pid ")[2].partition(")")[0])


def records_env(records: Path) -> dict[str, str]:
    """This environment, with the records' directory, and this checkout first on
    the path (the nodes and callers import the apps of tests/apps/)."""
    return cli_env({RECORDS: str(records)})


async def start_cluster_up(
    nursery: trio.Nursery, path: Path, records: Path, *, stderr: bool = False
) -> trio.Process:
    """``actorctl cluster up`` on ``path`` in ``nursery``, its stdout (and, with
    ``stderr``, its stderr) a pipe, its tasks recording in ``records``."""
    options = {"stderr": subprocess.PIPE} if stderr else {}
    return await start_cli(nursery, "cluster", "up", path, env=records_env(records), **options)


@attrs.define
class ClusterUp:
    """A cluster that ``cluster up`` runs for a test: what it said, what its
    tasks recorded, the pid of each node, and the files the test holds locked."""

    path: Path
    process: trio.Process
    out: Output
    records: Records
    pids: dict[str, int] = attrs.field(factory=dict, kw_only=True)
    _held: dict[str, int] = attrs.field(factory=dict, kw_only=True)

    def lock(self, key: str, name: str) -> None:
        """Lock (exclusive) the file ``name`` in the records' directory, until
        :meth:`release` of ``key``: the apps wait on such files."""
        fd = os.open(self.records.directory / name, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._held[key] = fd

    def release(self, key: str) -> None:
        fd = self._held.pop(key, None)
        if fd is not None:
            os.close(fd)  # and with it, the lock

    def release_all(self) -> None:
        for key in list(self._held):
            self.release(key)

    @property
    def logs(self) -> Path:
        return self.path.parent / "logs"

    async def wait_ready(self, node: str, timeout: float = START) -> int:
        """Wait for ``node`` to say it is (again) ready; its PID."""
        line = await self.out.until(f"node {node} ready at", timeout=timeout)
        self.pids[node] = _pid(line)
        return self.pids[node]

    async def wait_started(self, nodes: Sequence[str], timeout: float = START) -> None:
        """Wait until ``cluster up`` says the cluster is ready, and note the PID
        each of ``nodes`` said it was ready with: they start at once after the
        first, so their lines come in any order (``timeout`` s for each)."""
        await self.out.until("' ready", timeout=timeout * len(nodes))  # cluster 'NAME' ready
        for node in nodes:
            said = [line for line in self.out.lines if f"node {node} ready at" in line]
            assert said, f"cluster up said it was ready before node {node} was: {self.out.lines}"
            self.pids[node] = _pid(said[0])

    def kill(self, node: str) -> None:
        """SIGKILL the node's process (one that cluster up started for this test)."""
        os.kill(self.pids[node], signal.SIGKILL)
