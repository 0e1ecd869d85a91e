"""``actorctl schedule``: the periodic tasks of a running cluster.

The cluster's Controller says which beat holds the scheduler lease
(docs/scheduling.md), and that beat is asked; for a cluster that spans hosts
that no Controller runs (``host up``), the beat that holds the scheduler role
in etcd is asked (tasks/services/_schedules.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import asyncclick as click

from ...ops import answer_within
from ..reach._reach import ask_cluster, reach_options

__all__ = ["schedule"]


@click.group()
def schedule() -> None:
    """Periodic tasks: what the beat fires, when it last did and when it will next."""


@schedule.command("list")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the schedules as JSON, one list.")
@reach_options
async def list_schedules(file: Path, as_json: bool, timeout: float) -> None:
    """List the periodic tasks of the cluster FILE names: each with its
    schedule, timezone, last firing and next firing (in its timezone)."""
    from ...tasks.services._schedules import cluster_schedules, hosts_schedules

    rows: list[dict[str, Any]] = await ask_cluster(
        file,
        timeout,
        lambda controller, ref: cluster_schedules(controller, ref),
        lambda config, client, ref: hosts_schedules(
            config.name, client, lambda to: ref(to).with_options(timeout=answer_within(timeout))
        ),
    )
    if as_json:
        click.echo(json.dumps(rows, sort_keys=True))
    elif not rows:
        click.echo("no periodic tasks (declare them with @app.periodic or [[periodic]] tables)")
    else:
        _table(rows)


def _table(rows: list[dict[str, Any]]) -> None:
    width = max(len("NAME"), *(len(row["name"]) for row in rows))
    shape = max(len("SCHEDULE"), *(len(row["schedule"]) for row in rows))
    zone = max(len("TZ"), *(len(row["tz"]) for row in rows))
    head = f"{'NAME':<{width}}  {'SCHEDULE':<{shape}}  {'TZ':<{zone}}"
    click.echo(f"{head}  {'LAST':<25}  {'NEXT':<25}  TASK")
    for row in rows:
        last = row["last_text"] or "never"
        following = row["next_text"] or "-"
        click.echo(
            f"{row['name']:<{width}}  {row['schedule']:<{shape}}  {row['tz']:<{zone}}  "
            f"{last:<25}  {following:<25}  {row['task']}"
        )
