"""The task app of tests/tasks/test_firings.py (imported by its cluster's nodes).

One pool, ``slow``: one task at a time per worker, one message of credit, and
a task that takes ``SLOW`` seconds, so that a schedule firing every fraction
of a second keeps its router's backlog growing. Every run appends its task id
(a firing's id: its schedule's name and due time, ``firing_id``) to the file
tests/apps/state_app.py's ``runs`` reads, so that the test counts runs of each due
time: none lost, and how many ran twice.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

import trio

from actorctl import App, TaskContext
from tests.apps.state_app import RECORDS, RUNS

#: Seconds one run of ``tick`` takes.
SLOW: Final = 0.3

app = App("f")
app.pool("slow", concurrency=1, mailbox_capacity=1)


@app.task(bind=True, pool="slow")
async def tick(ctx: TaskContext, value: int) -> int:
    """Takes ``SLOW`` seconds, then records that it ran."""
    await trio.sleep(SLOW)
    directory = os.environ.get(RECORDS)
    if directory:
        # One line per run, appended in one write (O_APPEND: whole lines, in order).
        fd = os.open(Path(directory) / RUNS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{ctx.id}\n".encode())
        finally:
            os.close(fd)
    return value
