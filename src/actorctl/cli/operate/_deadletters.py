"""``actorctl deadletters``: what the nodes of a running cluster gave up on.

Each command is a signed control message to the cluster's Controller (as
``cluster status`` is), which asks every running node's ``_deadletters`` actor;
for a cluster that spans hosts that no Controller runs (``host up``), every
node registered in etcd is asked directly.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import asyncclick as click

from ...cluster import ClusterConfig
from ...etcd import EtcdClient
from ...ops import hosts_letters
from ...ops._unanswered import answered, unanswered
from ..reach._reach import Refs, ask_cluster, reach_options

__all__ = ["deadletters"]

_FILE = click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
_TIMEOUT = reach_options
_REASONS = click.Choice(["out-of-retries", "poison", "expired", "not-retried"])


@click.group()
def deadletters() -> None:
    """Dead letters: messages that ran out of retries, were poison, expired, or
    could not be retried (no scheduler)."""


async def _letters(
    file: Path, timeout: float, op: str, letter_id: str | None, reason: str | None, limit: int
) -> Any:
    """``op`` asked of the dead-letter keepers of the cluster ``file`` names."""

    async def across(config: ClusterConfig, client: EtcdClient, ref: Refs) -> Any:
        return await hosts_letters(config, client, ref, op, letter_id, reason, limit, timeout)

    asked = ("deadletters", op, letter_id, reason, limit, timeout)
    return await ask_cluster(file, timeout, asked, across)


@deadletters.command("list")
@_FILE
@click.option("--reason", type=_REASONS, default=None, help="Only the letters of this reason.")
@click.option(
    "--limit", default=100, show_default=True, type=click.IntRange(1), help="The newest N per node."
)
@click.option("--json", "as_json", is_flag=True, help="Print the letters as JSON, one list.")
@_TIMEOUT
async def list_letters(
    file: Path, reason: str | None, limit: int, as_json: bool, timeout: float
) -> None:
    """List the dead letters of every running node of the cluster FILE names."""
    by_node: dict[str, dict[str, Any]] = await _letters(file, timeout, "list", None, reason, limit)
    said = answered(by_node)
    rows = [letter for node in said.values() for letter in node["letters"]]
    total = sum(node["total"] for node in said.values())
    if as_json:
        click.echo(json.dumps(sorted(rows, key=lambda r: r["time"]), sort_keys=True))
    elif not rows:
        click.echo("no dead letters")
    else:
        _table(rows, total)
    _unanswered(by_node)


def _table(rows: list[dict[str, Any]], total: int) -> None:
    click.echo(f"{'ID':<23} {'NODE':<12} {'REASON':<15} {'RETRIES':>7}  {'WHEN':<19}  TASK / ERROR")
    for row in sorted(rows, key=lambda r: r["time"]):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row["time"]))
        error = row.get("error") or {}
        what = f"{row['subject']}: {error.get('type', '')} {error.get('message', '')}".strip()
        click.echo(
            f"{row['id']:<23} {row['node']:<12} {row['reason']:<15} {row['retries']:>7}  "
            f"{when:<19}  {what[:80]}"
        )
    if total > len(rows):
        click.echo(f"({len(rows)} of {total} shown: --limit N shows more)")


def _unanswered(by_node: dict[str, Any]) -> None:
    """Name each node that did not answer (on stderr), and exit 1 if any did not."""
    failed = unanswered(by_node)
    for node, missing in sorted(failed.items()):
        click.echo(f"error: node {node!r} did not answer: {missing.why}", err=True)
    if failed:
        raise SystemExit(1)


@deadletters.command("show")
@_FILE
@click.argument("letter_id")
@_TIMEOUT
async def show_letter(file: Path, letter_id: str, timeout: float) -> None:
    """Show one dead letter (as JSON): its reason, error, ids and message."""
    found = await _letters(file, timeout, "show", letter_id, None, 100)
    if found is None:
        click.echo(f"error: no dead letter {letter_id!r} on any running node", err=True)
        raise SystemExit(1)
    click.echo(json.dumps(found, indent=2, sort_keys=True))


@deadletters.command("retry")
@_FILE
@click.argument("letter_id")
@_TIMEOUT
async def retry_letter(file: Path, letter_id: str, timeout: float) -> None:
    """Send a dead letter again to where it was going, once (with a fresh
    retry budget; its task id and trace id kept)."""
    done = await _letters(file, timeout, "retry", letter_id, None, 100)
    if done is None:
        click.echo(
            f"error: no dead letter {letter_id!r} on any running node: it was re-driven "
            "already, purged, or past its TTL (`actorctl deadletters list`)",
            err=True,
        )
        raise SystemExit(1)
    click.echo(
        f"re-driven {letter_id} to {done['target']} as message {done['message_id']}"
        f" (re-drive {done.get('redrive', 1)})"
    )


@deadletters.command("purge")
@_FILE
@click.option("--reason", type=_REASONS, default=None, help="Only the letters of this reason.")
@_TIMEOUT
async def purge_letters(file: Path, reason: str | None, timeout: float) -> None:
    """Remove the dead letters (of one reason) of every running node."""
    by_node: dict[str, Any] = await _letters(file, timeout, "purge", None, reason, 100)
    click.echo(f"purged {sum(answered(by_node).values())} dead letter(s)")
    _unanswered(by_node)
