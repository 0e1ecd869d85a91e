"""What a worker tells ``actorctl.signals`` about a task's run, with Celery's
arguments. Each sends only when its signal has receivers (the worker tests
that too, before building the arguments): a signal nobody connected to costs
nothing measurable per task.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...mailbox import Envelope
from ..app import _signals as signals
from ..app._signals import ExceptionInfo, format_traceback
from ..app._task import Retry, Task, TaskContext
from ..protocol._protocol import H_MAP
from ..protocol._task_errors import NotRun, NotRunKind
from ._control import WorkerState

__all__ = [
    "failed",
    "format_traceback",
    "postrun",
    "prerun",
    "retried",
    "retval_of",
    "revoked",
    "succeeded",
    "worker_down",
    "worker_up",
]


def worker_up(state: WorkerState, node: str) -> None:
    """A task worker of ``node`` started: the first sends ``worker_ready``."""
    state.workers += 1
    if state.workers == 1 and signals.worker_ready.receivers:
        signals.worker_ready.send(node)


def worker_down(state: WorkerState, node: str) -> None:
    """A task worker of ``node`` stopped: the last sends ``worker_shutdown``."""
    state.workers -= 1
    if state.workers == 0 and signals.worker_shutdown.receivers:
        signals.worker_shutdown.send(node)


def prerun(task: Task, task_id: str, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    if signals.task_prerun.receivers:
        signals.task_prerun.send(task, task_id=task_id, task=task, args=args, kwargs=kwargs)


def postrun(
    task: Task, task_id: str, args: Sequence[Any], kwargs: dict[str, Any], retval: Any, state: str
) -> None:
    if signals.task_postrun.receivers:
        signals.task_postrun.send(
            task, task_id=task_id, task=task, args=args, kwargs=kwargs, retval=retval, state=state
        )


def succeeded(task: Task, value: Any) -> None:
    if signals.task_success.receivers:
        signals.task_success.send(task, result=value)


def failed(
    task: Task, task_id: str, args: Sequence[Any], kwargs: dict[str, Any], exc: BaseException
) -> None:
    if signals.task_failure.receivers:
        einfo = ExceptionInfo.of(exc)
        signals.task_failure.send(
            task,
            task_id=task_id,
            exception=exc,
            args=args,
            kwargs=kwargs,
            traceback=exc.__traceback__,
            einfo=einfo,
        )


def received(
    task: Task, task_id: str, retries: int, args: Sequence[Any], kwargs: dict[str, Any]
) -> None:
    """``task_received``: a worker took the task (it may wait for a run slot)."""
    if signals.task_received.receivers:
        request = TaskContext(task, task_id, retries=retries, args=args, kwargs=kwargs)
        signals.task_received.send(task, request=request)


def retried(
    task: Task,
    task_id: str,
    retries: int,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    exc: BaseException | None,
) -> None:
    """``task_retry``: the task will run again (``retries``: the runs so far
    that asked for one); ``exc`` is why, if an exception."""
    if signals.task_retry.receivers:
        request = TaskContext(task, task_id, retries=retries, args=args, kwargs=kwargs)
        einfo = ExceptionInfo.of(exc) if exc is not None else None
        signals.task_retry.send(task, request=request, reason=exc, einfo=einfo)


def revoked(
    task: Task, task_id: str, args: Sequence[Any], kwargs: dict[str, Any], why: NotRun
) -> None:
    if signals.task_revoked.receivers:
        request = TaskContext(task, task_id, args=args, kwargs=kwargs)
        signals.task_revoked.send(
            task,
            request=request,
            terminated=why.kind is NotRunKind.TERMINATED,
            signum=None,
            expired=why.kind is NotRunKind.EXPIRED,
        )


def retval_of(envelope: Envelope, ran: list[Any] | BaseException) -> Any:
    """What the run returned (a map's list, or the one value), or what it raised."""
    if isinstance(ran, list):
        return ran if envelope.headers.get(H_MAP) else ran[0]
    return ran


def outcome_of(envelope: Envelope, ran: list[Any] | BaseException) -> Any:
    """:func:`retval_of`, with a retry's cause (if it gave one) for the Retry."""
    if isinstance(ran, Retry) and ran.exc is not None:
        return ran.exc
    return retval_of(envelope, ran)
