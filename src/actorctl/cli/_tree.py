"""The cluster's supervision tree as ``cluster status`` prints it."""

from __future__ import annotations

from typing import Any

__all__ = ["render_tree"]


def render_tree(root: dict[str, Any]) -> str:
    """One line per supervisor, node, actor or process, indented under its
    parent, each with its state, restarts and what its kind adds."""
    lines = [_line(root)]
    _children(root, "", lines)
    return "\n".join(lines)


def _children(parent: dict[str, Any], indent: str, lines: list[str]) -> None:
    children = parent.get("children") or []
    for index, child in enumerate(children):
        last = index == len(children) - 1
        lines.append(f"{indent}{'└── ' if last else '├── '}{_line(child)}")
        _children(child, indent + ("    " if last else "│   "), lines)


def _line(item: dict[str, Any]) -> str:
    parts = [str(item.get("name")), str(item.get("kind")), str(item.get("state", "-"))]
    if item.get("cluster"):
        parts.insert(1, f"cluster {item['cluster']!r}")
    if item.get("kind") == "host":  # a cluster across hosts: its nodes are under it
        return "  ".join(parts[:2])
    if item.get("kind") == "membership":
        return "  ".join(parts)
    if item.get("kind") in ("health-check", "breaker", "dead-letters"):
        if item.get("detail"):
            parts.append(str(item["detail"]))
        return "  ".join(parts)
    if item.get("restarts", 0) is not None:  # None: not known here (a node of another host)
        parts.append(f"restarts {item.get('restarts', 0)}")
    mailbox = item.get("mailbox")
    if isinstance(mailbox, dict):
        parts.append(f"mailbox {mailbox.get('depth')}/{mailbox.get('capacity')}")
    if item.get("pid"):
        parts.append(f"pid {item['pid']}")
    if "in_flight" in item:  # a boxed worker, or one of its processes
        parts.append(f"in flight {item['in_flight']}")
    if item.get("queued"):
        parts.append(f"queued {item['queued']}")
    if item.get("address"):
        parts.append(str(item["address"]))
    if item.get("error"):
        parts.append(f"(no answer: {item['error']})")
    return "  ".join(parts)
