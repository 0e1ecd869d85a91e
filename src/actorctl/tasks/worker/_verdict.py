"""What follows a task's run, decided: its state and what is sent for it.

A run that returned sends its result (or the next step of its chain, and its
callbacks). One that raised is retried (the scheduler holds it until its
countdown is over) while its retry policy allows, else it fails: its caller
gets the error, its errbacks run, and it is dead-lettered when it was poison,
out of retries, or asked for a delayed retry in a cluster without a scheduler
(docs/fault-tolerance.md). The worker (``_worker.py``) calls :func:`follow`
once a run has ended, after its run slot is free; ``_followups.py`` sends.
"""

from __future__ import annotations

import attrs

from ..._log import log
from ...actors import BadArguments
from ...cluster import REASON_NOT_RETRIED, REASON_OUT_OF_RETRIES, REASON_POISON
from ...mailbox import Envelope
from ...supervision import RetryPolicy, failure_mark
from ..app._task import Retry, Task
from ..limits._limits import TaskFailure
from ..limits._policies import NO_SCHEDULER, can_delay, delay_bound, is_poison, retry_policy_of
from ..protocol._protocol import FAILURE, RETRY, REVOKED, SCHEDULER
from ..protocol._task_errors import NotRun, NotRunKind, TaskError
from . import _hooks as hooks
from ._followups import FollowUps

__all__ = ["follow", "retry_later"]


async def follow(
    followups: FollowUps,
    envelope: Envelope,
    task: Task,
    task_id: str,
    retries: int,
    raised: BaseException,
) -> str:
    """Send what follows a run that raised (``raised``): its failure and
    errbacks, or its retry. Returns the run's state. (A run that returned is
    followed by its worker itself: ``followups.succeed``, per task.)"""
    try:
        raise raised
    except Retry as asked:
        exc, countdown = asked.exc, asked.countdown
        return await retry_later(followups, envelope, task, task_id, retries, exc, countdown)
    except TaskFailure as failure:
        if failure.type_name == "TaskRevoked":
            # (raised by _run only: revoked with terminate while it ran)
            terminated = NotRun(NotRunKind.TERMINATED, failure.message)
            await followups.report(envelope, REVOKED, terminated.wire())
            hooks.revoked(task, task_id, *envelope.call(), terminated)
            return REVOKED
        await followups.fail(envelope, task_id, TaskError(failure.type_name, failure.message))
        hooks.failed(task, task_id, *envelope.call(), failure)
        return FAILURE
    except Exception as exc:
        return await _raised(followups, envelope, task, task_id, retries, exc)


async def _raised(
    followups: FollowUps,
    envelope: Envelope,
    task: Task,
    task_id: str,
    retries: int,
    exc: Exception,
) -> str:
    """The run raised ``exc``: retried if its policy says so and it can be,
    else failed (and dead-lettered if poison, or if it could not be delayed)."""
    mark = failure_mark(exc)
    poison = is_poison(exc)
    why = "poison" if poison else "never retried"
    if not poison and not isinstance(exc, BadArguments):
        policy = mark if isinstance(mark, RetryPolicy) else retry_policy_of(task, envelope)
        if policy.retries(exc):
            scheduler = SCHEDULER in followups.client.directory.addresses
            if can_delay(task, policy, retries, scheduler):
                return await retry_later(
                    followups, envelope, task, task_id, retries, exc, None, policy
                )
            why = NO_SCHEDULER
    error = TaskError.of(exc, traceback=hooks.format_traceback(exc))
    log(
        "actorctl:task:failed",
        task=task.name,
        task_id=task_id,
        why=why,
        error_type=error.type,
        error=error.message,
    )
    if poison:
        await followups.dead_letter(envelope, REASON_POISON, error, retries)
    elif why == NO_SCHEDULER:
        await followups.dead_letter(envelope, REASON_NOT_RETRIED, error, retries)
    await followups.fail(envelope, task_id, error)
    hooks.failed(task, task_id, *envelope.call(), exc)
    return FAILURE


async def retry_later(
    followups: FollowUps,
    envelope: Envelope,
    task: Task,
    task_id: str,
    retries: int,
    exc: BaseException | None,
    countdown: float | None,
    policy: RetryPolicy | None = None,
) -> str:
    """Send the task again later (the scheduler holds it), or, its retries
    spent, fail it and dead-letter it."""
    policy = policy or retry_policy_of(task, envelope)
    error = TaskError.of(exc) if exc is not None else TaskError("Retry", "retry requested")
    if policy.exhausted(retries):
        log(
            "actorctl:task:gave-up",
            task=task.name,
            task_id=task_id,
            retries=retries,
            error_type=error.type,
            error=error.message,
        )
        await followups.dead_letter(envelope, REASON_OUT_OF_RETRIES, error, retries)
        error = attrs.evolve(
            error,
            message=f"{error.message} (gave up after {retries} retries)",
            traceback=hooks.format_traceback(exc) if exc is not None else None,
        )
        await followups.fail(envelope, task_id, error)
        hooks.failed(task, task_id, *envelope.call(), exc or Retry())
        return FAILURE
    bound = delay_bound(task, policy, retries) if countdown is None else countdown
    if countdown is None:
        countdown = policy.delay(retries) if task.default_retry_delay is None else bound
    if countdown > 0.001 and SCHEDULER not in followups.client.directory.addresses:
        error = attrs.evolve(
            error,
            message=f"task {task.name} asked for a retry in {countdown:g} s, but the "
            "cluster has no scheduler to delay it: add a services node (services = true "
            "in cluster.toml), or retry with countdown=0",
        )
        log(
            "actorctl:task:failed",
            task=task.name,
            task_id=task_id,
            why=NO_SCHEDULER,
            error_type=error.type,
            error=error.message,
        )
        await followups.dead_letter(envelope, REASON_NOT_RETRIED, error, retries)
        await followups.fail(envelope, task_id, error)
        hooks.failed(task, task_id, *envelope.call(), exc or Retry())
        return FAILURE
    await followups.retry(envelope, task_id, retries, error, countdown)
    log(
        "actorctl:task:retry",
        task=task.name,
        task_id=task_id,
        attempt=retries + 1,
        delay=countdown,
        bound=bound,
        error=error.wire(),
    )
    hooks.retried(task, task_id, retries, *envelope.call(), exc)
    return RETRY
