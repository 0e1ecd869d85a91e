"""``actorctl logs --task ID FILE``: one task's trace across the nodes, as one tree.

Every node of a cluster writes eliot's JSON lines to ``logs/NODE.log`` beside
its cluster file (``cluster up``). A task's run is an eliot action
(``actorctl:task``), and every message a node sends within an action carries
the action's place in its trace (the ``trace`` header, ``UUID@/LEVEL``), so
that what the receiving node logs nests under it: the lines of every node a
task touched share one task uuid, and their levels make one tree.

ID is a task id (any task of the trace: a chain's first or last step) or an
eliot task uuid. The tree is rendered here (eliot-tree would do as well, but
it is not kept up any more, and the tree needs the node each line came from).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import asyncclick as click

from ..._errors import ConfigError
from ...ops import Line, read_logs, trace_ids
from ..output._errors import fail
from ..output._table import clock
from ..reach._reach import read_cluster

__all__ = ["logs", "render_trace"]

_BOOKKEEPING: Final = frozenset(
    {"timestamp", "task_uuid", "task_level", "message_type", "action_type", "action_status"}
)


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--task",
    "task",
    required=True,
    metavar="ID",
    help="A task id (any step of a chain), or an eliot task uuid.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the trace's lines as JSON lines.")
async def logs(file: Path, task: str, as_json: bool) -> None:
    """Show the trace of task ID across every node of the cluster FILE names,
    as one tree: read from the nodes' log files (logs/ beside FILE)."""
    try:
        config = read_cluster(file)
    except ConfigError as exc:
        fail(str(exc))
    folder = config.root / "logs"
    files = sorted(folder.glob("*.log"))
    if not files:
        fail(f"no log files in {folder}: has `actorctl cluster up {file}` run here?", 1)
    lines = read_logs(files)
    uuids = trace_ids(lines, task)
    if not uuids:
        fail(
            f"no line of {', '.join(p.name for p in files)} (in {folder}) names task {task!r}: "
            "give a task id or an eliot task uuid of a task that ran in this cluster",
            1,
        )
    for uuid in uuids:
        mine = [line for line in lines if line.get("task_uuid") == uuid]
        if as_json:
            for line in sorted(mine, key=_level):
                click.echo(json.dumps(line, sort_keys=True))
        else:
            click.echo(render_trace(uuid, mine))


def _level(line: Line) -> tuple[int, ...]:
    return tuple(int(step) for step in line["task_level"])


class _Node:
    """A place in the tree: a level prefix, its lines and its children."""

    def __init__(self) -> None:
        self.start: Line | None = None
        self.end: Line | None = None
        self.children: dict[int, _Node] = {}
        self.line: Line | None = None  # a plain message at exactly this level


def render_trace(uuid: str, lines: list[Line]) -> str:
    """The lines of one trace as a tree: each action (a task's run) with its
    node, status and duration, and under it what happened within it, on
    whichever node it happened."""
    root = _Node()
    for line in lines:
        node = root
        for step in _level(line):
            node = node.children.setdefault(step, _Node())
        node.line = line
    for node in _walk(root):  # an action's start and end are its first and last child
        for child in node.children.values():
            status = (child.line or {}).get("action_status")
            if status == "started":
                node.start = child.line
            elif status in ("succeeded", "failed"):
                node.end = child.line
    out = [uuid]
    top = _Node()  # the trace's root is an action (a task's first run) or a continued trace
    top.children[0] = root
    _render(top, "", out)
    return "\n".join(out)


def _walk(node: _Node) -> Iterable[_Node]:
    yield node
    for child in node.children.values():
        yield from _walk(child)


def _render(node: _Node, indent: str, out: list[str]) -> None:
    items = [
        child
        for _, child in sorted(node.children.items())
        if child.line is None or child.line.get("action_status") is None
    ]
    shown = list(_flatten(items))
    for index, child in enumerate(shown):
        last = index == len(shown) - 1
        out.append(f"{indent}{'└── ' if last else '├── '}{_describe(child)}")
        _render(child, indent + ("    " if last else "│   "), out)


def _flatten(items: list[_Node]) -> Iterable[_Node]:
    """Levels that are neither a line nor an action (a trace continued on
    another node, which logs no start of its own) show their children."""
    for item in items:
        if item.line is None and item.start is None:
            yield from _flatten(list(dict(sorted(item.children.items())).values()))
        else:
            yield item


#: What a task's run ended as, by a line logged within it: the action itself
#: succeeds (it ran to its end) when the task failed and that was handled.
_TASK_ENDS: Final = {
    "actorctl:task:failed": "failed",
    "actorctl:task:gave-up": "failed (out of retries)",
    "actorctl:task:retry": "failed (a retry was sent)",
}


def _status(node: _Node, end: Line) -> str:
    status = str(end.get("action_status", "running (no end logged yet)"))
    if status != "succeeded":
        return status
    for child in node.children.values():
        said = _TASK_ENDS.get(str((child.line or {}).get("message_type")))
        if said is not None:
            return said
    return status


def _describe(node: _Node) -> str:
    if node.start is not None:
        start = node.start
        end = node.end or {}
        status = _status(node, end)
        took = ""
        if "timestamp" in end:
            took = f" in {end['timestamp'] - start['timestamp']:.3f} s"
        fields = _fields({**start, **{k: v for k, v in end.items() if k not in start}})
        return (
            f"{start.get('action_type')} [{start['_node']}] {clock(start.get('timestamp'))}"
            f"  {status}{took}  {fields}"
        ).rstrip()
    line = node.line or {}
    kind = line.get("message_type") or line.get("action_type") or "?"
    return f"{kind} [{line.get('_node')}] {clock(line.get('timestamp'))}  {_fields(line)}".rstrip()


def _fields(line: Line) -> str:
    parts = []
    for key, value in line.items():
        if key in _BOOKKEEPING or key.startswith("_"):
            continue
        text = value if isinstance(value, str) else json.dumps(value, default=repr)
        parts.append(f"{key}={text if len(text) <= 80 else text[:77] + '...'}")
    return " ".join(parts)
