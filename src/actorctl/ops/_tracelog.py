"""One task's trace across nodes, read from the nodes' log files.

Each node of a cluster logs eliot JSON lines to ``logs/<node>.log`` beside
its cluster.toml (``_foreman.py``). A task's run is an eliot action
(``actorctl:task``), and every message a node sends within an action carries
the action's place in its trace (the ``trace`` header), so that what the
receiving node logs nests under it: the lines of every node a task touched
share one eliot task uuid. The web page's task detail and ``actorctl logs
--task`` both read traces here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

__all__ = ["Line", "read_logs", "task_trace", "trace_ids"]

#: The most lines one trace shows on the web page (a task that looped for
#: hours logs a lot).
MOST: Final = 2000
#: The most bytes the web page reads of one log file, from its end.
TAIL: Final = 32 << 20

#: One eliot line, with ``_node``: the node whose log it came from.
Line = dict[str, Any]


def read_logs(files: Iterable[Path], *, tail: int | None = None) -> list[Line]:
    """Every eliot JSON line of ``files`` (of the last ``tail`` bytes of each,
    if given), each with the node it came from (``_node``: the file's name
    without ``.log``); other lines, and one cut short, are skipped."""
    lines: list[Line] = []
    for path in files:
        with path.open("rb") as file:
            if tail is not None:
                file.seek(max(0, path.stat().st_size - tail))
            raw_lines = file.read().splitlines()
        for raw in raw_lines:
            if not raw.startswith(b"{"):
                continue
            try:
                line = json.loads(raw)
            except ValueError:
                continue  # a line cut short (the node was writing it)
            if isinstance(line, dict) and "task_uuid" in line and "task_level" in line:
                line["_node"] = path.stem
                lines.append(line)
    return lines


def trace_ids(lines: list[Line], wanted: str) -> list[str]:
    """The task uuids of the traces ``wanted`` names: itself if it is one, else
    those of the lines whose ``task_id`` is ``wanted``, in the order they came."""
    if any(line["task_uuid"] == wanted for line in lines):
        return [wanted]
    found: dict[str, None] = {}
    for line in sorted(lines, key=lambda line: line.get("timestamp", 0.0)):
        if line.get("task_id") == wanted:
            found[line["task_uuid"]] = None
    return list(found)


def task_trace(log_dir: Path, task_id: str) -> list[Line]:
    """The lines of every node in ``log_dir`` in the traces of ``task_id`` (a
    task id or an eliot task uuid), oldest first. Empty if none."""
    files = sorted(log_dir.glob("*.log")) if log_dir.is_dir() else []
    lines = read_logs(files, tail=TAIL)
    uuids = set(trace_ids(lines, task_id))
    found = [line for line in lines if line["task_uuid"] in uuids]
    found.sort(key=lambda line: (float(line.get("timestamp") or 0), line["task_level"]))
    return found[:MOST]
