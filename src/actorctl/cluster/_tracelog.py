"""One task's trace across nodes, read from the nodes' log files.

Each node of a cluster logs eliot JSON lines to ``logs/<node>.log`` beside
its cluster.toml (``_foreman.py``). A task's id (and the trace id that
travels in its messages' headers) appears in the lines each node logged
about it; the eliot task of each such line joins the lines logged within it.
This reader collects them, oldest first, each with the node that logged it:
the web page's task detail. (``actorctl logs --task`` renders the same tree
in a terminal.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

__all__ = ["task_trace"]

#: The most lines one trace shows (a task that looped for hours logs a lot).
MOST: Final = 2000
#: The most bytes read of one log file, from its end.
TAIL: Final = 32 << 20


def task_trace(log_dir: Path, task_id: str) -> list[dict[str, Any]]:
    """The log lines of every node in ``log_dir`` about ``task_id``, oldest
    first, each with ``node`` (the file it came from) added. Empty if none."""
    needle = task_id.encode()
    found: list[dict[str, Any]] = []
    uuids: set[str] = set()
    files = sorted(log_dir.glob("*.log")) if log_dir.is_dir() else []
    lines_of: dict[Path, list[bytes]] = {}
    for path in files:
        with path.open("rb") as file:
            size = path.stat().st_size
            file.seek(max(0, size - TAIL))
            lines_of[path] = file.read().splitlines()
        for line in lines_of[path]:
            if needle in line and (entry := _entry(line, path)) is not None:
                uuids.add(str(entry.get("task_uuid", "")))
    uuids.discard("")
    for path, lines in lines_of.items():
        for line in lines:
            if needle not in line and not any(u.encode() in line for u in uuids):
                continue
            entry = _entry(line, path)
            if entry is not None and (needle in line or str(entry.get("task_uuid", "")) in uuids):
                found.append(entry)
    found.sort(key=lambda e: (float(e.get("timestamp") or 0), e.get("task_level") or []))
    return found[:MOST]


def _entry(line: bytes, path: Path) -> dict[str, Any] | None:
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict):
        return None
    entry["node"] = path.stem
    return entry
