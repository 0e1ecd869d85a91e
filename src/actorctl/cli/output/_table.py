"""Tables, node answers and the supervision tree, as the commands that ask
every node print them."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import asyncclick as click

from ...ops._unanswered import answered as answers_of
from ...ops._unanswered import unanswered
from ...supervision._status import ABSENT, TreeRow

__all__ = ["answered", "clock", "fail_unanswered", "render_tree", "table"]


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """``rows`` under ``header``, each column as wide as its widest cell."""
    lines = [[str(cell) for cell in header], *([str(cell) for cell in row] for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def clock(seconds: float | None) -> str:
    """A time (seconds since the epoch) as local ``YYYY-MM-DD HH:MM:SS``; ``-`` for None."""
    if seconds is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


def answered(by_node: dict[str, Any]) -> dict[str, Any]:
    """The answers of the nodes that answered (``ops._unanswered`` reads them)."""
    return answers_of(by_node)


def fail_unanswered(by_node: dict[str, Any]) -> None:
    """Name each node that did not answer, or answered with an error (on
    stderr; one line when every node gave the same error), and exit 1 if any
    did."""
    failed = unanswered(by_node)
    refused = {n: missing.why for n, missing in failed.items() if missing.refused}
    if len(refused) > 1 and len(refused) == len(by_node) and len(set(refused.values())) == 1:
        click.echo(f"error: every node refused it: {next(iter(refused.values()))}", err=True)
        raise SystemExit(1)
    for node, missing in sorted(failed.items()):
        if missing.refused:
            click.echo(f"error: node {node!r} refused it: {missing.why}", err=True)
        else:
            click.echo(f"error: node {node!r} did not answer: {missing.why}", err=True)
    if failed:
        raise SystemExit(1)


def render_tree(root: TreeRow) -> str:
    """One line per supervisor, node, actor or process, indented under its
    parent, each with its state, restarts and what its kind adds."""
    lines = [_line(root)]
    _children(root, "", lines)
    return "\n".join(lines)


def _children(parent: TreeRow, indent: str, lines: list[str]) -> None:
    children = parent.children if parent.children is not ABSENT else ()
    for index, child in enumerate(children):
        last = index == len(children) - 1
        lines.append(f"{indent}{'└── ' if last else '├── '}{_line(child)}")
        _children(child, indent + ("    " if last else "│   "), lines)


def _line(item: TreeRow) -> str:
    parts = [item.name, item.kind, item.state]
    if item.cluster is not ABSENT and item.cluster:
        parts.insert(1, f"cluster {item.cluster!r}")
    if item.kind == "host":  # a cluster across hosts: its nodes are under it
        return "  ".join(parts[:2])
    if item.kind == "membership":
        return "  ".join(parts)
    if item.kind in ("health-check", "breaker", "dead-letters"):
        if item.detail is not ABSENT and item.detail:
            parts.append(item.detail)
        return "  ".join(parts)
    restarts = 0 if item.restarts is ABSENT else item.restarts
    if restarts is not None:  # None: not known here (a node of another host)
        parts.append(f"restarts {restarts}")
    if item.mailbox is not ABSENT:
        parts.append(f"mailbox {item.mailbox.depth}/{item.mailbox.capacity}")
    if item.pid is not ABSENT and item.pid:
        parts.append(f"pid {item.pid}")
    if item.in_flight is not ABSENT:  # a boxed worker, or one of its processes
        parts.append(f"in flight {item.in_flight}")
    if item.queued is not ABSENT and item.queued:
        parts.append(f"queued {item.queued}")
    if item.address is not ABSENT and item.address:
        parts.append(item.address)
    if item.error is not ABSENT and item.error:
        parts.append(f"(no answer: {item.error})")
    return "  ".join(parts)
