"""The task app the limit tests run (tests/tasks/test_limits.py in this process,
tests/cli/test_control_cli.py in a real cluster).

Every task records when it started (and, for the token test, when it ended):
in this process's ``RUNS`` list, and, when ``ACTORCTL_TEST_RECORDS`` names a
directory, as a line of ``runs.jsonl`` there (the cluster's worker processes
write it; the test counts lost and doubled runs from it). The sleeps here are
the tasks' own work.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import trio

from actorctl import App, Concurrency

#: The directory where tasks write ``runs.jsonl`` (set by the test's cluster).
RECORDS = "ACTORCTL_TEST_RECORDS"

app = App("limits")
app.pool("limited", concurrency=8)
app.pool("ordered", concurrency=1)
app.pool("elastic", concurrency=Concurrency(1, 8, cooldown=0.0))

#: Each run in this process: (task, label, start time, end time or None, key).
RUNS: list[dict[str, Any]] = []
#: Set when a run is recorded (the in-process tests wait on it).
RAN: list[trio.Event] = []


def _wake() -> None:
    for event in RAN:
        event.set()


def _record(task: str, label: str, **more: Any) -> dict[str, Any]:
    run = {"task": task, "label": label, "start": time.time(), **more}
    RUNS.append(run)
    _wake()
    directory = os.environ.get(RECORDS)
    if directory:
        with (Path(directory) / "runs.jsonl").open("a") as out:
            out.write(json.dumps(run) + "\n")
    return run


@app.task(pool="limited", rate_limit="20/s")
async def per_worker(label: str) -> str:
    _record("per_worker", label)
    return label


@app.task(pool="limited", global_rate_limit="20/s")
async def pool_wide(label: str) -> str:
    _record("pool_wide", label)
    return label


@app.task(
    pool="limited",
    concurrency_key=lambda customer, label: customer,
    concurrency_per_key=2,
)
async def per_customer(customer: str, label: str) -> str:
    run = _record("per_customer", label, key=customer)
    await trio.sleep(0.05)  # its work: long enough for runs of one key to overlap
    run["end"] = time.time()
    _wake()
    return label


@app.task(pool="limited")
async def pausable(label: str) -> str:
    _record("pausable", label)
    return label


@app.task(pool="ordered")
async def ordered(label: str) -> str:
    _record("ordered", label)
    return label


@app.task(pool="limited", concurrency=0)
async def dormant(label: str) -> str:
    _record("dormant", label)
    return label
