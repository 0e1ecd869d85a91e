"""Tables and node answers, as the commands that ask every node print them."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import asyncclick as click

__all__ = ["answered", "clock", "fail_unanswered", "table"]

#: The key of a node's entry in a Controller's answer when it did not answer.
UNANSWERED = "unanswered"


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
    """The answers of the nodes that answered."""
    return {n: a for n, a in by_node.items() if not (isinstance(a, dict) and UNANSWERED in a)}


def fail_unanswered(by_node: dict[str, Any]) -> None:
    """Name each node that did not answer (on stderr), and exit 1 if any did not."""
    failed = {n: a[UNANSWERED] for n, a in by_node.items() if n not in answered(by_node)}
    for node, error in sorted(failed.items()):
        click.echo(f"error: node {node!r} did not answer: {error}", err=True)
    if failed:
        raise SystemExit(1)
