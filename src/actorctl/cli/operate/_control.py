"""``actorctl control``: change a running cluster's task limits, revoke
tasks, stop nodes.

Each command is a signed control message to the cluster's Controller, which
asks the ``_tasks`` actor of every running node that hosts one (workers and
the services node's routers) and answers with each node's reply. A change to
a task's limits is kept in each node's store and outlives a restart; so is a
revoke (``revoke`` also reaches the scheduler, for delayed tasks).
``shutdown`` stops one node (the Controller's ``stop_node``) or the whole
cluster (its ``down``); across hosts, through etcd, as ``cluster down`` does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import asyncclick as click

from ..._errors import ConfigError, WireFormatError
from ...actors._answers import read_answer
from ...ops._unanswered import Unanswered
from ...tasks import rate_limit_of
from ...tasks.limits._report import LimitsReport, TaskLimits
from ..output._table import answered, fail_unanswered
from ..reach._reach import (
    across_hosts,
    ask_controller,
    broadcast,
    down_across,
    load,
    reach_options,
    stop_across,
)
from ._inspect import nobody_runs

__all__ = ["control"]

T = TypeVar("T")

CONTROL_ACTOR = "_tasks"
SCHEDULER_ACTOR = "scheduler"
#: What a task id may look like: 32 hex digits (``new_task_id``), a periodic
#: firing's ``periodic:NAME@TIME``, or an id a caller chose (``task_id=``).
_TASK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@/+-]{0,199}")
_FILE = click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
_TIMEOUT = reach_options
_JSON = click.option("--json", "as_json", is_flag=True, help="Print each node's answer as JSON.")


@click.group()
def control() -> None:
    """Change a running cluster: task limits (rate limits, suspend and resume,
    pool budgets; `limits` shows them), revoke tasks, shut nodes down."""


@control.command("rate-limit")
@_FILE
@click.argument("task")
@click.argument("rate")
@click.option(
    "--global",
    "pool_wide",
    is_flag=True,
    help="The pool-wide limit its router keeps, not each worker's.",
)
@_JSON
@_TIMEOUT
async def rate_limit(
    file: Path, task: str, rate: str, pool_wide: bool, as_json: bool, timeout: float
) -> None:
    """Set TASK's rate limit: RATE as in Celery ("10/s", "100/m", "5/h"; 0 lifts
    it), on each worker (Celery's rate_limit), or with --global across its pool."""
    try:
        limit = rate_limit_of(rate, what="rate-limit")
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    key = "global_rate_limit" if pool_wide else "rate_limit"
    value = None if limit is None else str(limit)
    answers = await _broadcast(file, "limit", [task, key, value], timeout)
    _report(answers, as_json, f"{task}: {key.replace('_', ' ')} {value or 'lifted'}")


@control.command("suspend")
@_FILE
@click.argument("task")
@_JSON
@_TIMEOUT
async def suspend(file: Path, task: str, as_json: bool, timeout: float) -> None:
    """Hold back every new start of TASK: waiting ones stay where they are
    (kept by its router, or waiting at a worker) until `resume`."""
    answers = await _broadcast(file, "limit", [task, "suspended", True], timeout)
    _report(answers, as_json, f"{task}: suspended")


@control.command("resume")
@_FILE
@click.argument("task")
@_JSON
@_TIMEOUT
async def resume(file: Path, task: str, as_json: bool, timeout: float) -> None:
    """Let TASK start again: what waited runs, highest priority first."""
    answers = await _broadcast(file, "limit", [task, "suspended", False], timeout)
    _report(answers, as_json, f"{task}: resumed")


@control.command("pool-grow")
@_FILE
@click.argument("pool")
@click.argument("n", type=click.IntRange(1), default=1)
@_JSON
@_TIMEOUT
async def pool_grow(file: Path, pool: str, n: int, as_json: bool, timeout: float) -> None:
    """Raise each worker's concurrency budget of POOL by N, within its bounds."""
    answers = await _broadcast(file, "budget", [pool, n], timeout, workers_of=pool)
    _report(answers, as_json, None)


@control.command("pool-shrink")
@_FILE
@click.argument("pool")
@click.argument("n", type=click.IntRange(1), default=1)
@_JSON
@_TIMEOUT
async def pool_shrink(file: Path, pool: str, n: int, as_json: bool, timeout: float) -> None:
    """Lower each worker's concurrency budget of POOL by N, within its bounds."""
    answers = await _broadcast(file, "budget", [pool, -n], timeout, workers_of=pool)
    _report(answers, as_json, None)


@control.command("revoke")
@_FILE
@click.argument("task_ids", nargs=-1, required=True, metavar="TASK_ID...")
@click.option(
    "--terminate", is_flag=True, help="Cancel it if it runs now (an async task; a thread runs on)."
)
@_JSON
@_TIMEOUT
async def revoke(
    file: Path, task_ids: tuple[str, ...], terminate: bool, as_json: bool, timeout: float
) -> None:
    """Revoke tasks: one that waits (at a worker, or delayed in the scheduler)
    never runs and reports REVOKED; one that runs sees ctx.is_aborted(), and
    with --terminate an async one is cancelled. Every node keeps the revoke."""
    for task_id in task_ids:
        if not _TASK_ID.fullmatch(task_id):
            raise click.BadParameter(
                f"{task_id!r} is not a task id: expected letters, digits and _ . : @ / + - "
                "(e.g. 3f2a9c0e5b7d4e1fa6b8c9d0e1f2a3b4, as `inspect active` shows them)",
                param_hint="TASK_ID",
            )
    args = [list(task_ids), terminate]
    answers = await _broadcast(file, "revoke", args, timeout)
    delayed = await broadcast(file, timeout, SCHEDULER_ACTOR, "revoke", args)
    answers.update({f"{node} (scheduler)": a for node, a in delayed.items()})
    how = "revoked and terminated" if terminate else "revoked"
    _report(answers, as_json, f"{', '.join(task_ids)}: {how}")


@control.command("shutdown")
@_FILE
@click.argument("node", required=False)
@_JSON
@_TIMEOUT
async def shutdown(file: Path, node: str | None, as_json: bool, timeout: float) -> None:
    """Stop NODE for good (it is not restarted until the cluster is: across
    hosts, until its host's `host up` is), or, with no NODE, the whole
    cluster (as `cluster down`): nodes in reverse order."""
    config = load(file, member=False)  # across hosts, down asks etcd only
    if await across_hosts(config):
        said = await (stop_across(config, node, timeout) if node else down_across(config, timeout))
    else:
        said = await ask_controller(
            file, *(("stop_node", timeout, node) if node else ("down", timeout))
        )
    click.echo(json.dumps({"node": node, "answer": said}) if as_json else said)


@control.command("limits")
@_FILE
@_JSON
@_TIMEOUT
async def limits(file: Path, as_json: bool, timeout: float) -> None:
    """Show each worker's budget, running and waiting tasks, each task's
    limits, and the tasks each pool's router holds back (WAITING)."""
    answers = await _broadcast(file, "limits", [], timeout)
    if as_json:
        click.echo(json.dumps(answers, sort_keys=True))
        fail_unanswered(answers)
        return
    click.echo(f"{'NODE':<12} {'ACTOR':<16} {'BUDGET':>8} {'RUNNING':>8} {'WAITING':>8}  LIMITS")
    for node, said in sorted(answered(answers).items()):
        answer = _read(LimitsReport.from_wire, said, f"node {node}'s answer to 'limits'")
        for name, worker in answer.workers.items():
            low, high = worker.bounds
            budget = f"{worker.budget} {low}-{high}"
            click.echo(
                f"{node:<12} {name:<16} {budget:>8} {worker.running:>8} "
                f"{worker.waiting:>8}  {_limits_text(worker.tasks)}"
            )
        for pool, router in answer.routers.items():
            click.echo(
                f"{node:<12} {pool + ' (router)':<16} {'':>8} {'':>8} "
                f"{router.held:>8}  {_limits_text(router.tasks)}"
            )
    fail_unanswered(answers)


def _read(read: Callable[[object, str], T], said: object, where: str) -> T:
    """``said`` read with ``read``; a malformed answer (a node of another
    release) is the command's error, saying what is wrong."""
    try:
        return read(said, where)
    except WireFormatError as exc:
        raise click.ClickException(str(exc)) from None


def _budgets(said: object, where: str) -> dict[str, int]:
    budgets: dict[str, int] = read_answer(said, dict[str, int], where)
    return budgets


def _limits_text(tasks: Mapping[str, TaskLimits]) -> str:
    parts = []
    for name, limits in tasks.items():
        said = [
            f"rate {limits.rate_limit}" if limits.rate_limit else "",
            f"concurrency {limits.concurrency}" if limits.concurrency is not None else "",
            f"{limits.per_key} per key" if limits.per_key else "",
            "SUSPENDED" if limits.suspended else "",
        ]
        text = ", ".join(s for s in said if s)
        if text:
            parts.append(f"{name}: {text}")
    return "; ".join(parts) or "-"


async def _broadcast(
    file: Path, op: str, args: list[Any], timeout: float, *, workers_of: str | None = None
) -> dict[str, Any]:
    answers = await broadcast(file, timeout, CONTROL_ACTOR, op, args)
    if not answers:
        raise click.ClickException(nobody_runs(file, "task workers"))
    if workers_of is not None:
        # A node without a worker of the pool says so; that is not a failure
        # unless no node has one.
        missing = {n for n, a in answers.items() if _says_no_worker(a)}
        if missing == set(answers):
            raise click.ClickException(f"no running node runs a worker of pool {workers_of!r}")
        answers = {n: a for n, a in answers.items() if n not in missing}
    return answers


def _says_no_worker(answer: Any) -> bool:
    missing = Unanswered.of(answer)
    return missing is not None and "runs no worker of pool" in missing.why


def _report(answers: dict[str, Any], as_json: bool, done: str | None) -> None:
    """Print what each node answered, and name those that did not (exit 1)."""
    done_by = answered(answers)
    if as_json:
        click.echo(json.dumps(answers, sort_keys=True))
    elif done is not None and done_by:
        click.echo(f"{done} on {len(done_by)} node(s): {', '.join(sorted(done_by))}")
    else:
        for node, said in sorted(done_by.items()):
            budgets = _read(_budgets, said, f"node {node}'s answer to 'budget'")
            for worker, budget in sorted(budgets.items()):
                click.echo(f"{node} {worker}: budget {budget}")
    fail_unanswered(answers)
