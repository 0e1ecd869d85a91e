"""The app of the retry and dead-letter tests (tests/tasks/test_retries.py,
tests/tasks/test_retry_cluster.py): tasks that call a downstream TCP service which
the test runs on 127.0.0.1 and which answers each connection ``ok`` or
``fail`` (or holds it until the test lets it answer).

Its retry policy is short (a few tens of milliseconds), so that a test with
real sockets and real processes waits on events, never long.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from actorctl import App, RetryPolicy, optional, poisonous, retry

#: Where each run records itself: one line "<task id> <task> <attempt>" per run.
RECORDS = "ACTORCTL_RETRY_RECORDS"

POLICY = RetryPolicy(max_retries=3, interval_start=0.01, interval_step=0.02, interval_max=0.2)
app = App("retries", retry_policy=POLICY)


class DownstreamError(ConnectionError):
    """The downstream service answered ``fail``."""


def call(port: int) -> str:
    """One request to the downstream service: its answer, or DownstreamError."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        answer = sock.makefile().readline().strip()
    if answer != "ok":
        raise DownstreamError(f"downstream answered {answer or 'nothing'!r}")
    return answer


def _record(task_id: str, task: str, attempt: int) -> None:
    directory = os.environ.get(RECORDS)
    if directory:
        with (Path(directory) / f"{os.getpid()}.log").open("a") as out:
            out.write(f"{task_id} {task} {attempt}\n")


@app.task(bind=True)
def fetch(ctx: object, port: int) -> str:
    """Calls the downstream service: retried under the app's policy."""
    _record(ctx.id, "fetch", ctx.retries)  # type: ignore[attr-defined]
    return call(port)


@app.task(bind=True)
def fetch_scoped(ctx: object, port: int) -> str:
    """The call in a ``retry`` scope of its own: 5 retries, on DownstreamError only."""
    _record(ctx.id, "fetch_scoped", ctx.retries)  # type: ignore[attr-defined]
    with retry(max_retries=5, interval_start=0.01, interval_step=0.01, on=(DownstreamError,)):
        return call(port)


@app.task
def enrich(port: int) -> str:
    """The downstream call is optional: its failure is logged, and the task goes on."""
    extra = "none"
    with optional(DownstreamError):
        extra = call(port)
    return f"done (extra: {extra})"


@app.task(bind=True)
def parse(ctx: object, record: str) -> int:
    """A record that does not parse is poison: never retried."""
    _record(ctx.id, "parse", ctx.retries)  # type: ignore[attr-defined]
    with poisonous():
        return int(record)


@app.task(bind=True)
def wrong_call(ctx: object) -> str:
    """A programming error (a wrong call): never retried."""
    _record(ctx.id, "wrong_call", ctx.retries)  # type: ignore[attr-defined]
    return "x".join(1, 2)  # type: ignore[call-arg, arg-type]


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task(bind=True)
def retry_later(ctx: object) -> str:
    """Asks for a retry in 5 s (which needs the scheduler to delay it)."""
    _record(ctx.id, "retry_later", ctx.retries)  # type: ignore[attr-defined]
    ctx.retry(countdown=5)  # type: ignore[attr-defined]
    return "never"


# -- misuse of the API inside a task: programming errors, never retried -----------


@app.task(bind=True)
def step(ctx: object, x: int) -> int:
    """The subtask the misusing tasks send: each run is recorded."""
    _record(ctx.id, "step", ctx.retries)  # type: ignore[attr-defined]
    return x + 1


@app.task(bind=True)
def waits_inside(ctx: object, x: int) -> int:
    """Waits for its subtask's result, which nobody receives inside a task."""
    _record(ctx.id, "waits_inside", ctx.retries)  # type: ignore[attr-defined]
    result: int = step.delay(x).get(timeout=10)
    return result


@app.task(bind=True)
async def awaits_inside(ctx: object, x: int) -> int:
    """Awaits its subtask's result, which nobody receives inside a task."""
    _record(ctx.id, "awaits_inside", ctx.retries)  # type: ignore[attr-defined]
    result: int = await (await step.adelay(x)).aget(timeout=10)
    return result


@app.task(bind=True)
async def blocks_in_trio(ctx: object, x: int) -> int:
    """Calls the blocking get() in trio's thread."""
    _record(ctx.id, "blocks_in_trio", ctx.retries)  # type: ignore[attr-defined]
    result: int = (await step.adelay(x)).get(timeout=10)
    return result


@app.task(bind=True)
async def sends_blocking_in_trio(ctx: object, x: int) -> int:
    """Calls the blocking delay() in trio's thread (it sends nothing)."""
    _record(ctx.id, "sends_blocking_in_trio", ctx.retries)  # type: ignore[attr-defined]
    step.delay(x)
    return x
