"""``actorctl inspect``: what the workers of a running cluster hold and know,
with Celery's names (``celery inspect active|reserved|scheduled|stats|registered``).

Each command is a signed control message to the cluster's Controller, which
asks the ``_tasks`` actor of every running node that hosts one (or, for
``scheduled``, the services node's scheduler) at once, and answers with each
node's reply. A node that does not answer is named on stderr, the others are
shown, and the command exits 1.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import asyncclick as click

from ..._errors import ConfigError, WireFormatError
from ...actors._answers import read_answer
from ...tasks.worker._inspect_answers import HeldRow, NodeStats, held_rows
from ..output._table import answered, clock, fail_unanswered, table
from ..reach._reach import broadcast, reach_options, read_cluster

__all__ = ["inspect"]

CONTROL_ACTOR: Final = "_tasks"
SCHEDULER_ACTOR: Final = "scheduler"
_FILE = click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
_TIMEOUT = reach_options
_JSON = click.option("--json", "as_json", is_flag=True, help="Print each node's answer as JSON.")


@click.group()
def inspect() -> None:
    """Look at the task workers of a running cluster: the tasks they run, hold
    and have scheduled, their counts, and the tasks they know."""


async def ask_nodes(file: Path, actor: str, op: str, timeout: float) -> dict[str, Any]:
    """``op`` of ``actor`` on every running node that hosts one, through the
    Controller (or etcd, across hosts): each node's answer (``{"unanswered":
    why}`` for one that did not)."""
    if not timeout > 0:
        raise click.UsageError(f"--timeout {timeout:g}: expected seconds above 0, e.g. 10")
    answers = await broadcast(file, timeout, actor, op, [])
    if not answers:
        what = "a scheduler (a node with services = true)" if actor == SCHEDULER_ACTOR else (
            "task workers (a node that names a task app and pools)"
        )  # fmt: skip
        raise click.ClickException(nobody_runs(file, what))
    return answers


def nobody_runs(file: Path, what: str) -> str:
    """Why no running node answered for the task layer (the Controller did,
    so the cluster is up): the file names no node that hosts a task app, or
    those that do are not running."""
    try:
        config = read_cluster(file)
    except ConfigError as exc:
        return str(exc)
    hosting = [
        n.name for n in config.nodes if n.settings.get("pools") or n.settings.get("services")
    ]
    if not hosting:
        return (
            f'no node of {file} hosts a task app (a node with actors = "MODULE:APP" and '
            "pools = [...] or services = true), so there are no task workers to ask; "
            f"for its actors, see `actorctl cluster status {file}` and `cluster tree {file}`"
        )
    return (
        f"no running node of {file} runs {what}: the nodes that would "
        f"({', '.join(hosting)}) are not running (`actorctl cluster status {file}`)"
    )


def _show(
    answers: dict[str, Any],
    as_json: bool,
    header: Sequence[str],
    rows_of: Callable[[str, Any], list[list[object]]],
    none: str,
) -> None:
    """Print the answers (JSON, or a table of the rows each node's answer
    gives), then name the nodes that did not answer (exit 1)."""
    if as_json:
        click.echo(json.dumps(answers, sort_keys=True))
    else:
        rows = [row for node, a in sorted(answered(answers).items()) for row in rows_of(node, a)]
        click.echo(table(header, rows) if rows else none)
    fail_unanswered(answers)


def _rows(node: str, answer: object, op: str) -> tuple[HeldRow, ...]:
    """A node's answer to ``op`` (a list of held tasks) as records.

    Raises:
        ClickException: it is malformed (a node of another release), saying how.
    """
    try:
        return held_rows(answer, f"node {node}'s answer to {op!r}")
    except WireFormatError as exc:
        raise click.ClickException(str(exc)) from None


def _read(answer: object, kind: Any, where: str) -> Any:
    try:
        return read_answer(answer, kind, where)
    except WireFormatError as exc:
        raise click.ClickException(str(exc)) from None


def _args(task: HeldRow) -> str:
    """A task's arguments, short, as a call shows them: ``1, 2, key="v"``."""
    args, kwargs = task.args, task.kwargs
    parts = [args] if isinstance(args, str) else [json.dumps(a) for a in args or []]
    if isinstance(kwargs, str):
        parts.append(kwargs)
    else:
        parts += [f"{k}={json.dumps(v)}" for k, v in (kwargs or {}).items()]
    text = ", ".join(parts)
    return text if len(text) <= 60 else text[:57] + "..."


@inspect.command("active")
@_FILE
@_JSON
@_TIMEOUT
async def active(file: Path, as_json: bool, timeout: float) -> None:
    """The tasks running now on every worker: id, name, args, started, worker."""
    answers = await ask_nodes(file, CONTROL_ACTOR, "active", timeout)
    _show(
        answers,
        as_json,
        ("NODE", "WORKER", "ID", "NAME", "ARGS", "STARTED"),
        lambda node, tasks: [
            [node, t.worker, t.id, t.name, _args(t), clock(t.started)]
            for t in _rows(node, tasks, "active")
        ],
        "no active tasks",
    )


@inspect.command("reserved")
@_FILE
@_JSON
@_TIMEOUT
async def reserved(file: Path, as_json: bool, timeout: float) -> None:
    """The tasks workers took and have not started (waiting for a run slot,
    or held back by a limit): id, name, args, received, worker."""
    answers = await ask_nodes(file, CONTROL_ACTOR, "reserved", timeout)
    _show(
        answers,
        as_json,
        ("NODE", "WORKER", "ID", "NAME", "ARGS", "RECEIVED"),
        lambda node, tasks: [
            [node, t.worker, t.id, t.name, _args(t), clock(t.received)]
            for t in _rows(node, tasks, "reserved")
        ],
        "no reserved tasks",
    )


@inspect.command("scheduled")
@_FILE
@_JSON
@_TIMEOUT
async def scheduled(file: Path, as_json: bool, timeout: float) -> None:
    """The delayed tasks (countdown, eta, retries) the scheduler holds, soonest
    first: id, name, pool, eta, args."""
    answers = await ask_nodes(file, SCHEDULER_ACTOR, "scheduled", timeout)
    _show(
        answers,
        as_json,
        ("NODE", "ID", "NAME", "POOL", "ETA", "ARGS"),
        lambda node, tasks: [
            [node, t.id, t.name, t.pool, clock(t.eta), _args(t)]
            for t in _rows(node, tasks, "scheduled")
        ],
        "no scheduled tasks",
    )


@inspect.command("stats")
@_FILE
@_JSON
@_TIMEOUT
async def stats(file: Path, as_json: bool, timeout: float) -> None:
    """Per node and worker: pid, uptime, pool, budget, active and reserved
    tasks, and how many runs of each task ended there."""
    answers = await ask_nodes(file, CONTROL_ACTOR, "stats", timeout)

    def rows(node: str, said: object) -> list[list[object]]:
        try:
            answer = NodeStats.from_wire(said, f"node {node}'s answer to 'stats'")
        except WireFormatError as exc:
            raise click.ClickException(str(exc)) from None
        total = ", ".join(f"{name}={n}" for name, n in answer.total.items()) or "-"
        return [
            [node, answer.pid, f"{answer.uptime:.0f}s", name, w.pool,
             "-" if w.budget is None else w.budget, w.active, w.reserved, total]
            for name, w in answer.workers.items()
        ]  # fmt: skip

    header = ("NODE", "PID", "UPTIME", "WORKER", "POOL", "BUDGET", "ACTIVE", "RESERVED")
    _show(answers, as_json, (*header, "PROCESSED (NODE)"), rows, "no task workers")


@inspect.command("registered")
@_FILE
@_JSON
@_TIMEOUT
async def registered(file: Path, as_json: bool, timeout: float) -> None:
    """The tasks each node's workers run (those of the app its pools define)."""
    answers = await ask_nodes(file, CONTROL_ACTOR, "registered", timeout)
    _show(
        answers,
        as_json,
        ("NODE", "TASK", "POOL"),
        lambda node, tasks: [
            [node, name, pool]
            for name, pool in _read(
                tasks, dict[str, str], f"node {node}'s answer to 'registered'"
            ).items()
        ],
        "no registered tasks",
    )
