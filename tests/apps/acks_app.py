"""The task app of tests/tasks/test_acks_late.py (imported by its cluster's nodes).

``begin`` records ``TASK_ID:start`` as it starts, waits at the test's gate (a
file the test holds locked, see tests/apps/state_app.py), then records ``TASK_ID``:
a run killed at the gate has a start and no end. ``at_most_once`` is the same
task with ``acks_late=False``. Records go to ``runs.txt`` in
$ACTORCTL_STATE_RECORDS, one line per record.
"""

from __future__ import annotations

from actorctl import App, TaskContext
from tests.apps.state_app import pass_gate, record_run

app = App("a")
app.pool("celery", concurrency=4)


async def _run(ctx: TaskContext, name: str, value: int) -> int:
    record_run(f"{ctx.id}:start")
    await pass_gate(name)
    record_run(ctx.id)
    return value


@app.task(bind=True)
async def begin(ctx: TaskContext, name: str, value: int) -> int:
    """At-least-once (the default): run again if its worker dies mid-run."""
    return await _run(ctx, name, value)


@app.task(bind=True, acks_late=False)
async def at_most_once(ctx: TaskContext, name: str, value: int) -> int:
    """At-most-once: never run again, even if its worker dies mid-run."""
    return await _run(ctx, name, value)
