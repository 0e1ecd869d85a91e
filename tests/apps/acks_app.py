"""The task app of tests/tasks/test_acks_late.py (imported by its cluster's nodes).

``begin`` records ``TASK_ID:start`` as it starts, waits at the test's gate (a
file the test holds locked, see tests/apps/state_app.py), then records ``TASK_ID``:
a run killed at the gate has a start and no end. ``at_most_once`` is the same
task with ``acks_late=False``. Records go to ``runs.txt`` in
$ACTORCTL_STATE_RECORDS, one line per record.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import trio

from actorctl import App, TaskContext
from tests.apps.state_app import GATE_TIMEOUT, RECORDS, RUNS, gate

app = App("a")
app.pool("celery", concurrency=4)


def _record(line: str) -> None:
    """One line, appended in one write (O_APPEND: whole lines, in order)."""
    fd = os.open(Path(os.environ[RECORDS]) / RUNS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


async def _run(ctx: TaskContext, name: str, value: int) -> int:
    _record(f"{ctx.id}:start")
    path = gate(Path(os.environ[RECORDS]), name)
    with path.open("a") as file, trio.fail_after(GATE_TIMEOUT):
        await trio.to_thread.run_sync(fcntl.flock, file, fcntl.LOCK_SH, abandon_on_cancel=True)
    _record(ctx.id)
    return value


@app.task(bind=True)
async def begin(ctx: TaskContext, name: str, value: int) -> int:
    """At-least-once (the default): run again if its worker dies mid-run."""
    return await _run(ctx, name, value)


@app.task(bind=True, acks_late=False)
async def at_most_once(ctx: TaskContext, name: str, value: int) -> int:
    """At-most-once: never run again, even if its worker dies mid-run."""
    return await _run(ctx, name, value)
