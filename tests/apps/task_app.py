"""The task app the task tests run on a real cluster (imported by its nodes).

The sleeps here are the tasks' own work, in worker processes: time limits,
revokes and aborts need tasks that take time. No test waits on the clock; each
waits for a result or a state document, with a timeout.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import time
import uuid
from pathlib import Path

import attrs
import trio

from actorctl import (
    App,
    DataSink,
    SoftTimeLimitExceeded,
    TaskContext,
    TaskResult,
    check_soft_time_limit,
    soft_time_limit,
)

#: The directory where the event's tasks record each run (set by the test's cluster).
RECORDS = "ACTORCTL_TEST_RECORDS"
#: The datagram socket in RECORDS that a waiting test binds, to be woken by each record.
WAKE = "wake.sock"

app = App("t")
app.pool("celery", concurrency=4)
app.pool("slow", concurrency=2)


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task
async def mul(x: int, y: int) -> int:
    return x * y


@app.task
def div(x: int, y: int) -> float:
    return x / y


@app.task
def collect(values: list[int]) -> int:
    return sum(values)


@app.task
def decode(data: list[int]) -> str:
    return bytes(data).decode()


@app.task
def when(stamp: float) -> object:
    """Returns what JSON has no type for (a datetime), as a task may by mistake."""
    return datetime.datetime.fromtimestamp(stamp, datetime.UTC)


@app.task
async def echo(*args: object, **kwargs: object) -> list[object]:
    return [list(args), kwargs]


@app.task(pool="slow")
async def sleepy(seconds: float) -> str:
    await trio.sleep(seconds)
    return "slept"


@app.task(pool="slow", soft_time_limit=0.2, time_limit=5)
async def cleans_up_async() -> str:
    try:
        with soft_time_limit():
            await trio.sleep(10)
    except SoftTimeLimitExceeded:
        await trio.lowlevel.checkpoint()  # it may still await: its hard limit is 5 s away
        return "cleaned up after the soft limit"
    return "never"


@app.task(pool="slow", soft_time_limit=0.2, time_limit=5)
async def ignores_soft_limit() -> str:
    await trio.sleep(10)
    return "never"


@app.task(pool="slow", soft_time_limit=0.2, time_limit=5)
def cleans_up_sync() -> str:
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            time.sleep(0.01)
            check_soft_time_limit()
    except SoftTimeLimitExceeded:
        return "sync cleaned up after the soft limit"
    return "never"


@app.task(pool="slow", time_limit=0.3)
async def overruns() -> str:
    await trio.sleep(10)
    return "never"


@app.task(pool="slow", time_limit=0.3)
def thread_overruns() -> str:
    time.sleep(1)  # a thread cannot be interrupted: the worker stops waiting
    return "never"


@app.task(pool="slow", bind=True)
async def abortable(ctx: TaskContext, steps: int) -> str:
    for step in range(steps):
        if ctx.is_aborted():
            return f"aborted at step {step}"
        await trio.sleep(0.02)
    return "finished"


@app.task(bind=True, max_retries=3, default_retry_delay=0)
def flaky(ctx: TaskContext, fail_times: int) -> str:
    if ctx.retries < fail_times:
        raise ctx.retry(exc=ConnectionError(f"attempt {ctx.retries} failed"))
    return f"ok after {ctx.retries} retries"


@app.task(autoretry_for=(ConnectionError,), max_retries=2, default_retry_delay=0)
def always_down() -> None:
    raise ConnectionError("the service is down")


@app.task
def record_error(task_id: str, error: dict[str, str]) -> str:
    """An errback: called with the failed task's id and its error."""
    return f"{task_id}:{error['type']}"


@app.task(pool="slow", boxed=True, time_limit=0.5)
def boxed_spin() -> str:
    while True:
        pass


@app.task(pool="slow", boxed=True)
def boxed_square(x: int) -> int:
    return x * x


@app.event
@attrs.define
class UserRegistered:
    user_id: int
    email: str


def _record(task: str, event: UserRegistered) -> None:
    """Record one run of an event's task: a file of its own in $ACTORCTL_TEST_RECORDS
    (written whole, then renamed into place), then a datagram to wake a test that
    waits for it (if one does: nobody may be listening)."""
    directory = os.environ.get(RECORDS)
    if not directory:
        return
    record = {"task": task, "user_id": event.user_id, "email": event.email, "pid": os.getpid()}
    name = f"{task}-{uuid.uuid4().hex}"
    partial = Path(directory) / f"{name}.part"
    partial.write_text(json.dumps(record), encoding="utf-8")
    partial.replace(partial.with_suffix(".json"))
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as wake, contextlib.suppress(OSError):
        wake.sendto(b"!", str(Path(directory) / WAKE))


@app.task
def send_welcome_email(event: UserRegistered) -> str:
    _record(send_welcome_email.name, event)
    return f"welcome {event.email}"


@app.task(pool="slow")
def add_to_crm(event: UserRegistered) -> str:
    _record(add_to_crm.name, event)
    return f"crm {event.user_id}"


UserRegistered.subscribe(send_welcome_email)  # type: ignore[attr-defined]
UserRegistered.subscribe(add_to_crm)  # type: ignore[attr-defined]


class Totals(DataSink):
    """Keeps what it is sent; the test asks it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, object]] = []

    async def on_result(self, result: TaskResult) -> None:
        self.seen.append((result.task, result.state, result.value))
