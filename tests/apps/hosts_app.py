"""The task app of tests/hosts/ (imported by nodes on three hosts, and the callers).

Every run of ``work`` (and of ``paced`` and ``gather``) appends ``TASK_ID PID
STARTED`` (when it started, Unix time) to ``runs.txt`` in
$ACTORCTL_STATE_RECORDS (a directory every host sees: network namespaces
share the filesystem), so that the test counts runs (none lost, how many ran
twice) and tells the hosts apart by the pid of the node that ran each.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import trio

from actorctl import App, TaskContext
from tests.apps.state_app import whole_lines

#: The directory where each run is recorded (set by the test).
RECORDS = "ACTORCTL_STATE_RECORDS"
RUNS = "runs.txt"
#: Where the periodic task's runs are recorded (beside RUNS).
PERIODIC_RUNS = "periodic.txt"

app = App("hosts")
app.pool("celery", concurrency=8)
app.pool("ticks", concurrency=4)  # beat_tick's, on the hosts a test says


@app.task(bind=True)
async def work(ctx: TaskContext, value: int, seconds: float = 0.1) -> int:
    """Takes ``seconds`` (so that a host's worker holds some when the host is
    lost), then records its run."""
    started = time.time()
    await trio.sleep(seconds)
    _record(RUNS, ctx.id, started)
    return value


@app.task(bind=True, global_rate_limit="1/s")
async def paced(ctx: TaskContext) -> int:
    """Records its run, like ``work``; paced by its pool's router: what exceeds
    its rate waits there (held, in the services node's store)."""
    _record(RUNS, ctx.id, time.time())
    return 1


@app.task(bind=True)
async def gather(ctx: TaskContext, values: list[int]) -> int:
    """A chord's body: records its run, like ``work`` (its task id is the
    chord's), and returns the sum of its header's results."""
    _record(RUNS, ctx.id, time.time())
    return sum(values)


@app.task(bind=True)
async def beat_tick(ctx: TaskContext) -> None:
    """The periodic task of tests/hosts/test_hosts.py's scheduler tests: records its run."""
    _record(PERIODIC_RUNS, ctx.id)


def _record(name: str, task_id: str, started: float | None = None) -> None:
    directory = os.environ.get(RECORDS)
    if directory:
        fd = os.open(Path(directory) / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        when = "" if started is None else f" {started:.3f}"
        try:
            os.write(fd, f"{task_id} {os.getpid()}{when}\n".encode())  # one write: a whole line
        finally:
            os.close(fd)


def runs(directory: Path, name: str = RUNS) -> list[tuple[str, int]]:
    """(task id, pid) of each run recorded in ``directory`` (of ``work``; of
    ``beat_tick`` with ``name=PERIODIC_RUNS``)."""
    return [(task, pid) for task, pid, _ in started_runs(directory, name)]


def started_runs(directory: Path, name: str = RUNS) -> list[tuple[str, int, float]]:
    """(task id, pid, when it started: Unix time, 0 if not recorded) of each run."""
    path = directory / name
    if not path.exists():
        return []
    found = []
    for line in whole_lines(path.read_text()):
        task, pid, *started = line.split()
        found.append((task, int(pid), float(started[0]) if started else 0.0))
    return found


@app.task
async def add(x: int, y: int) -> int:
    """No wait, no record: bench/hosts.py's workload (the cost of the trip)."""
    return x + y
