"""The task app of the warm shutdown tests (tests/tasks/test_warm_shutdown.py).

Its one task, ``hold``, records each of its runs in a file of its process in
$ACTORCTL_KILL_RECORDS (as tests/apps/kill_app.py does, and waking the test the
same way): ``took:LABEL`` when its worker takes it (``task_received``: it may
wait for a run slot), ``begin:LABEL`` when it begins, then, once it may go on,
``LABEL`` when it ends. It may go on once the test no longer holds an exclusive lock (flock) on
the file ``hold-PID`` there, PID its own process's: the test holds the tasks
of one worker node back, or of both, and lets them go one node at a time.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from actorctl import App, signals
from tests.apps.kill_app import RECORDS, wait_while_held, wake_test

app = App("s", default_pool="work")
#: Two run at once on each worker; what else a worker holds waits for a run slot.
RUNS = 2
app.pool("work", concurrency=RUNS)


def held_by(pid: int) -> str:
    """The file in RECORDS a test locks (exclusive) to hold back the tasks of process ``pid``."""
    return f"hold-{pid}"


def _write(directory: str, line: str) -> None:
    """Append ``line`` to this process's record file, and wake the test."""
    path = Path(directory) / f"{os.getpid()}.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)
    wake_test(directory)


@app.task
def hold(label: str) -> str:
    directory = os.environ.get(RECORDS)
    if not directory:
        return label
    _write(directory, f"begin:{label}")
    wait_while_held(directory, held_by(os.getpid()))  # in the task's worker thread
    _write(directory, label)
    return label


@signals.task_received.connect(sender=hold)
def _took(request: Any, **_: object) -> None:
    """Record that this process's worker took the task (``took:LABEL``)."""
    directory = os.environ.get(RECORDS)
    if directory:
        _write(directory, f"took:{request.args[0]}")
