"""The task app of tests/tasks/test_task_state.py (imported by its cluster's nodes).

Every run of a task appends its task id to ``runs.txt`` in $ACTORCTL_STATE_RECORDS,
so that the test counts runs: none lost, and how many ran twice. ``gated`` waits
until the test opens its gate (a file), so that a chord can be left half
complete while a node is killed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import trio

from actorctl import App, TaskContext

#: The directory where each run is recorded (set by the test's cluster).
RECORDS = "ACTORCTL_STATE_RECORDS"
RUNS = "runs.txt"
GATE_TIMEOUT = 120.0

app = App("s")
app.pool("celery", concurrency=8)


def record_run(task_id: str) -> None:
    """One line per run (its task id, or what else the test reads), appended in
    one write (O_APPEND: whole lines, in order)."""
    directory = os.environ.get(RECORDS)
    if not directory:
        return
    fd = os.open(Path(directory) / RUNS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{task_id}\n".encode())
    finally:
        os.close(fd)


def runs(directory: Path) -> list[str]:
    """The task ids recorded in ``directory``, one per run (a line still being
    written, by a node running now, is left for the next read)."""
    path = directory / RUNS
    return whole_lines(path.read_text()) if path.exists() else []


def whole_lines(text: str) -> list[str]:
    """The lines of ``text`` that end in a newline: a reader may see another
    process's append half-copied (Linux does not make a read atomic against a
    write), so the unterminated tail is not a line yet."""
    return [line for line in text.split("\n")[:-1] if line]


def gate(directory: Path, name: str) -> Path:
    """The gate ``name``: a file that a test holds locked while it is shut."""
    return directory / f"gate-{name}"


@contextlib.contextmanager
def shut_gate(directory: Path, name: str) -> Iterator[None]:
    """Hold the gate ``name`` shut (an exclusive lock on its file) for the block:
    a ``gated`` task waits on the lock itself, and goes on once it is let go."""
    with gate(directory, name).open("a") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        yield


async def pass_gate(name: str) -> None:
    """Wait until the test lets the gate ``name`` go (see shut_gate), at most
    GATE_TIMEOUT s."""
    path = gate(Path(os.environ[RECORDS]), name)
    with path.open("a") as file, trio.fail_after(GATE_TIMEOUT):
        # Blocks in a thread until the test lets the lock go (abandoned, with
        # its lock request, if the task is cancelled).
        await trio.to_thread.run_sync(fcntl.flock, file, fcntl.LOCK_SH, abandon_on_cancel=True)


@app.task(bind=True)
def note(ctx: TaskContext, value: int) -> int:
    record_run(ctx.id)
    return value


@app.task(bind=True)
def total(ctx: TaskContext, values: list[int]) -> int:
    record_run(ctx.id)
    return sum(values)


@app.task(bind=True)
def fails(ctx: TaskContext, message: str) -> None:
    record_run(ctx.id)
    raise LookupError(message)


@app.task(bind=True)
async def gated(ctx: TaskContext, name: str, value: int) -> int:
    """Returns ``value`` once the test let the gate ``name`` go (see shut_gate)."""
    await pass_gate(name)
    record_run(ctx.id)
    return value


@app.task(bind=True)
async def paced(ctx: TaskContext, item: object) -> None:
    """Takes a little time per item (a data source's task: tests/tasks/test_sources_cluster.py)."""
    await trio.sleep(0.02)
    record_run(ctx.id)


@app.task(bind=True)
async def steady(ctx: TaskContext, item: object) -> None:
    """Takes 50 ms: 2,000 of them keep a worker busy through a reload
    (tests/ops/test_reload.py)."""
    await trio.sleep(0.05)
    record_run(ctx.id)
