"""What a task worker reads off a task and its message: the retry policy that
applies (the call's over the task's), whether a failure is poison, the longest
delay of a retry, the time limits, the task its boxed worker serves or why
there is none; and the warning a worker logs when nothing can delay its
retries.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from ..._errors import MisuseError
from ..._log import log
from ...mailbox import Envelope
from ...supervision import POISON, Boxed, RetryPolicy, failure_mark
from ..app._task import Task
from ..protocol._protocol import H_RETRY_POLICY, H_TIMELIMIT
from ._limits import BOXED_MODULE, TimeLimits, foreign_handler

__all__ = [
    "NO_SCHEDULER",
    "can_delay",
    "delay_bound",
    "foreign_task",
    "is_poison",
    "limits_of",
    "retry_policy_of",
    "unknown_task",
    "warn_no_scheduler",
]

#: Why a retry was not made (logged, and the dead letter's reason not-retried).
NO_SCHEDULER: Final = "not retried: no scheduler to delay it"


def is_poison(exc: BaseException) -> bool:
    """Whether a task's failure is poison: never retried, and its message
    kept as a dead letter (reason ``poison``) at once. A failure inside
    ``poisonous()`` is, and so is a misuse of the API (``MisuseError``: a
    blocking call in trio's thread, a wait for a result nobody receives),
    which fails the same way however often it runs."""
    return failure_mark(exc) == POISON or isinstance(exc, MisuseError)


def can_delay(task: Task, policy: RetryPolicy, retries: int, scheduler: bool) -> bool:
    """Whether a retry the policy makes (not one the task asks for) can be
    made where a worker runs (with a ``scheduler`` in its cluster or not): a
    delay needs a scheduler, unless the budget is spent already (then the task
    is dead-lettered)."""
    if policy.exhausted(retries) or scheduler:
        return True
    return delay_bound(task, policy, retries) <= 0.001


def warn_no_scheduler(tasks: Iterable[Task], pool: str) -> None:
    """Once, as a worker starts in a cluster with no scheduler: the tasks of
    its pool whose retries need one (a delay over 1 ms) are not retried there."""
    needing = sorted(
        task.name
        for task in tasks
        if task.pool == pool
        and not task.retry_policy.exhausted(0)
        and delay_bound(task, task.retry_policy, 0) > 0.001
    )
    if needing:
        log(
            "actorctl:worker:no-scheduler",
            level="warning",
            pool=pool,
            tasks=needing,
            why="the cluster has no services node, so no scheduler delays retries: a failure "
            "these tasks' policies would retry fails at once and becomes a dead letter "
            "(reason not-retried); add a node with services = true",
        )


def delay_bound(task: Task, policy: RetryPolicy, retries: int) -> float:
    """The longest delay of retry ``retries``: Celery's ``default_retry_delay``
    (doubled each retry with ``retry_backoff``), if the task has one, else the
    policy's backoff bound."""
    if task.default_retry_delay is None:
        return policy.bound(retries)
    return task.default_retry_delay * (2**retries if task.retry_backoff else 1)


def retry_policy_of(task: Task, envelope: Envelope) -> RetryPolicy:
    """The task's retry policy, as its message's ``retry_policy`` header
    overrides it (a call's own, docs/fault-tolerance.md)."""
    given = envelope.headers.get(H_RETRY_POLICY)
    return task.retry_policy if given is None else task.retry_policy.with_wire(given)


def limits_of(task: Task, headers: Mapping[str, Any], unlimited: TimeLimits) -> TimeLimits:
    """The task's limits, as its message's ``timelimit`` header overrides them
    (an unreadable header is ignored, docs/protocol.md §14.2); ``unlimited``
    (its worker's one ``TimeLimits(None, None)``) when it has none, the usual
    run: nothing is made per run. Nothing writes to it: with no soft limit,
    ``run_async`` opens no soft scope (and so sets no ``soft_scope``)."""
    hard, soft = task.time_limit, task.soft_time_limit
    given = headers.get(H_TIMELIMIT)
    if given is None and hard is None and soft is None:
        return unlimited
    if isinstance(given, str):
        try:
            hard_given, soft_given = json.loads(given)
            hard = hard if hard_given is None else float(hard_given)
            soft = soft if soft_given is None else float(soft_given)
        except (ValueError, TypeError):
            pass
    return TimeLimits(hard, soft)


def foreign_task(boxed: Boxed | None, known: dict[str, Task], name: str, pool: str) -> Task | None:
    """A task the pool's boxed worker serves but the app does not define (its
    handlers are in another language), made once and kept in ``known``."""
    if boxed is None or (boxed.handlers is not None and name not in boxed.handlers):
        return None
    task = known.get(name)
    if task is None:
        task = known[name] = Task(foreign_handler, name=name, pool=pool, boxed=True)
    return task


def unknown_task(
    boxed: Boxed | None, tasks: Iterable[Task], name: str, pool: str
) -> tuple[str, str]:
    """The error type and message for a task ``name`` that ``pool`` lacks: a
    pool served by a ``[[boxed]]`` worker names the handlers its hello listed
    (``UnknownHandler``, docs/boxed.md); another (the Python reference worker
    runs the app's own ``boxed=True`` tasks) names the app's tasks, since a
    worker runs every task of its app, whatever the pool."""
    if boxed is not None and boxed.handlers is not None and BOXED_MODULE not in boxed.spec.command:
        return "UnknownHandler", f"pool {pool!r}: {boxed.no_handler(name)}"
    known = ", ".join(sorted(t.name for t in tasks)) or "none"
    return "UnknownTask", f"pool {pool!r} has no task {name!r} (it has: {known})"
