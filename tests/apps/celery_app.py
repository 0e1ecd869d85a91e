"""The app of tests/tasks/test_celery.py, written as a Celery project would write it:
Celery's option and setting names, and signal receivers connected with
``@signals.X.connect``.

Each receiver records what it was called with as one JSON line in
``$ACTORCTL_TEST_SIGNALS/signals-<pid>.jsonl`` and then wakes the test with a
datagram (if one listens), so the test counts the signals its worker sent.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path
from typing import Any

import attrs

from actorctl import App, TaskContext, signals

SIGNALS = "ACTORCTL_TEST_SIGNALS"
WAKE = "wake.sock"

app = App("c")
app.conf.update(task_soft_time_limit=20, result_expires=3600)
app.conf.task_time_limit = 30


@app.task(queue="celery", acks_late=True)
def add(x: int, y: int) -> int:
    return x + y


def _deep(text: str) -> None:
    raise KeyError(text)


@app.task
def fails(text: str) -> None:
    _deep(text)


@app.task(bind=True, max_retries=2, default_retry_delay=0)
def retries_once(ctx: TaskContext, marker: str) -> str:
    if ctx.retries == 0:
        raise ctx.retry(exc=ConnectionError("first try"))
    return marker


@app.event
@attrs.define
class SignedUp:
    user_id: int
    email: str


@app.task
def welcome(event: SignedUp) -> str:
    return f"welcome {event.email}"


SignedUp.subscribe(welcome)  # type: ignore[attr-defined]


def _record(name: str, **fields: Any) -> None:
    directory = os.environ.get(SIGNALS)
    if not directory:
        return
    fields.pop("signal", None)  # every receiver gets the Signal itself too
    line = json.dumps({**fields, "signal": name, "pid": os.getpid()}, default=repr)
    with open(Path(directory) / f"signals-{os.getpid()}.jsonl", "a", encoding="utf-8") as out:
        out.write(line + "\n")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as wake, contextlib.suppress(OSError):
        wake.sendto(b"!", str(Path(directory) / WAKE))


@signals.task_prerun.connect
def on_prerun(sender: Any = None, task_id: Any = None, task: Any = None, **kw: Any) -> None:
    _record("task_prerun", sender=sender.name, task_id=task_id, task=task.name, **kw)


@signals.task_postrun.connect
def on_postrun(sender: Any = None, task_id: Any = None, task: Any = None, **kw: Any) -> None:
    retval = kw.pop("retval")
    retval = retval if not isinstance(retval, BaseException) else type(retval).__name__
    _record("task_postrun", sender=sender.name, task_id=task_id, retval=retval, **kw)


@signals.task_success.connect
def on_success(sender: Any = None, result: Any = None, **kw: Any) -> None:
    _record("task_success", sender=sender.name, result=result, keys=sorted(kw))


@signals.task_failure.connect
def on_failure(
    sender: Any = None,
    task_id: Any = None,
    exception: Any = None,
    traceback: Any = None,
    einfo: Any = None,
    **kw: Any,
) -> None:
    _record(
        "task_failure",
        sender=sender.name,
        task_id=task_id,
        exception=type(exception).__name__,
        has_traceback=traceback is not None,
        einfo=einfo.traceback,
        **kw,
    )


@signals.task_retry.connect
def on_retry(sender: Any = None, request: Any = None, reason: Any = None, **kw: Any) -> None:
    _record(
        "task_retry",
        sender=sender.name,
        request_id=request.id,
        retries=request.retries,
        reason=repr(reason),
        has_einfo=kw.get("einfo") is not None,
    )


@signals.worker_ready.connect
def on_ready(sender: Any = None, **kw: Any) -> None:
    _record("worker_ready", sender=sender)
