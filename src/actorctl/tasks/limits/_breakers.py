"""Circuit breakers on tasks: one per task, or one per downstream resource
that several tasks share.

``@app.task(breaker=True)`` gives the task a breaker of its own (named after
it, with the default policy); ``breaker=BreakerPolicy(...)`` one with that
policy; ``breaker="payments-api"`` the breaker declared with
``app.breaker("payments-api", failures=5, reset=60)``, shared by every task
that names it (a resource is down for all of them at once).

Each worker actor has its own breakers, so one node's open breaker leaves the
pool's other workers running: while a task's breaker is open the worker
answers ``modified`` before the task takes a run slot, the pool's router moves
the task to another worker, and when every worker's breaker is open the
router's backlog keeps it (durably) and sends it again until one closes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from ..._errors import ConfigError
from ..._log import log
from ...actors import Address, BadArguments, Outbox
from ...mailbox import ACCEPTED, Envelope, Outcome
from ...supervision import CIRCUIT_OPEN, Breaker, BreakerPolicy, RetryPolicy, failure_mark
from ..app._task import Retry, Task
from ._limits import TaskFailure
from ._policies import is_poison, retry_policy_of

__all__ = ["KEPT", "downstream_failure", "policy_of", "record", "refuse", "task_breakers"]

#: The suffix of the message id of a task that a worker with no router in
#: front keeps in its own node's backlog while its breaker is open.
KEPT: Final = "/kept"


def policy_of(name: str, options: Mapping[str, Any]) -> BreakerPolicy:
    """A breaker policy from keyword options (``app.breaker``, cluster.toml).

    Raises:
        ConfigError: naming the breaker and the option that is wrong.
    """
    try:
        return BreakerPolicy(**options)
    except TypeError as exc:
        known = ", ".join(a.name for a in BreakerPolicy.__attrs_attrs__)
        raise ConfigError(f"breaker {name!r}: {exc} (its options are: {known})") from None
    except ValueError as exc:
        raise ConfigError(f"breaker {name!r}: {exc}") from None


def task_breakers(
    tasks: Mapping[str, Task], declared: Mapping[str, BreakerPolicy]
) -> tuple[dict[str, Breaker], dict[str, Breaker]]:
    """A worker's breakers: by task name (the tasks that have one), and by
    breaker name (each once).

    Raises:
        ConfigError: a task names a breaker that ``app.breaker`` did not declare.
    """
    by_name: dict[str, Breaker] = {}
    by_task: dict[str, Breaker] = {}
    for task in tasks.values():
        wanted: object = getattr(task, "breaker", None)
        if wanted is None or wanted is False:
            continue
        if isinstance(wanted, str):
            policy = declared.get(wanted)
            if policy is None:
                raise ConfigError(
                    f"task {task.name!r} names breaker {wanted!r}, which the app does not "
                    f"declare (declared: {sorted(declared) or 'none'}); add "
                    f'app.breaker("{wanted}", ...) or use breaker=True for one of its own'
                )
            name = wanted
        elif wanted is True or isinstance(wanted, BreakerPolicy):
            policy = wanted if isinstance(wanted, BreakerPolicy) else BreakerPolicy()
            name = task.name
        else:
            raise ConfigError(
                f"task {task.name!r}: breaker= takes True, a BreakerPolicy or the name of "
                f"a breaker declared with app.breaker(...), not {wanted!r}"
            )
        breaker = by_name.get(name)
        if breaker is None:
            breaker = by_name[name] = Breaker(name, policy)
        by_task[task.name] = breaker
    return by_task, by_name


def record(
    breaker: Breaker, ran: list[Any] | BaseException | None, task: Task, envelope: Envelope
) -> None:
    """Tell ``breaker`` how a run went: values are a success; a failure of
    what it guards (:func:`downstream_failure`) a failure; anything else (it
    did not run: revoked, expired; or it failed in a way that says nothing of
    what the breaker guards) neither."""
    if isinstance(ran, list):
        breaker.succeeded()
    elif ran is None or not downstream_failure(ran, task, envelope):
        breaker.released()
    else:
        cause = ran.exc if isinstance(ran, Retry) and ran.exc is not None else ran
        breaker.failed(f"{type(cause).__name__}: {cause}")


def downstream_failure(ran: BaseException, task: Task, envelope: Envelope) -> bool:
    """Whether a failed run counts against the task's breaker: a failure its
    retry policy would retry (bad luck downstream), a retry the task asked
    for, or a run stopped by its time limit (a downstream that hangs). Not a
    programming error (the policy's ``never``), a failure inside
    ``poisonous()`` or a misuse of the API, arguments that do not fit, or a revoke: another attempt,
    whatever the downstream does, fails the same way."""
    if isinstance(ran, Retry):
        ran = ran.exc if ran.exc is not None else ran
        if isinstance(ran, Retry):
            return True
    if isinstance(ran, TaskFailure):
        return ran.type_name != "TaskRevoked"
    if is_poison(ran) or isinstance(ran, BadArguments):
        return False
    mark = failure_mark(ran)
    policy = mark if isinstance(mark, RetryPolicy) else retry_policy_of(task, envelope)
    return policy.retries(ran)


async def refuse(
    envelope: Envelope, task: str, refused: str, *, routed: bool, here: Address, outbox: Outbox
) -> tuple[Outcome, None]:
    """The task's breaker is open: answer ``modified`` when the pool has a
    router in front (``routed``: the router, or its backlog, offers it again
    later), or when it came from this node's own backlog (below).

    With no router in front (a cluster with no services node) a caller's send
    is neither durable nor confirmed, and nobody would send it again: the
    worker keeps the task in its own node's durable backlog instead, as
    ``<message id>/kept`` sent to itself (a new id: the receiver remembers the
    caller's as handled), and accepts it. The backlog offers it again with
    backoff; it runs once the breaker lets it in (docs/fault-tolerance.md).
    """
    outcome = Outcome.modified(CIRCUIT_OPEN, f"task {task}: {refused}")
    if routed or envelope.message_id.endswith(KEPT):
        return outcome, None
    kept = attrs.evolve(envelope, message_id=envelope.message_id + KEPT, to=str(here))
    await outbox.send(here, kept, presettled=False, confirm=False, durable=True)
    log("actorctl:task:kept", task=task, message_id=envelope.message_id, why=refused)
    return ACCEPTED, None
