"""The code blocks of README.md and docs/*.md, with the marks that say how
tests/docs/test_docs_run.py runs each (docs/testing.md, "The docs run").

A mark is an HTML comment on the line right above a block's fence, one mark a
line, several lines for several marks; Markdown renders none of them::

    <!-- docs-test: output -->                 not run: output, a diagram, bytes
    <!-- docs-test: other-hosts REASON -->     not run: it needs hosts other than this one
    <!-- docs-test: long REASON -->            not run here: REASON names what runs it
    <!-- docs-test: file NAME -->              written to NAME in the page's directory
    <!-- docs-test: setup COMMAND -->          COMMAND, what the prose says was done, first
    <!-- docs-test: cluster NAME -->           `actorctl cluster up NAME` runs meanwhile
    <!-- docs-test: dir NAME -->               run in NAME, a directory of the page's own

Every other block runs: Python, shell and console blocks as programs, TOML,
JSON and YAML parsed (a cluster file loaded as ``cluster up`` loads it, a
fragment's tables and keys checked against the parser's).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Final

import attrs

from actorctl.cluster.config._tables import file_keys
from actorctl.tasks import App, cluster_app

__all__ = [
    "NOT_RUN",
    "PAGES",
    "ROOT",
    "RUNS",
    "Block",
    "blocks",
    "fence_lines",
    "unknown_keys",
]

ROOT: Final = Path(__file__).resolve().parents[2]
PAGES: Final = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))

NOT_RUN: Final = frozenset({"output", "other-hosts", "long"})
"""Marks that keep a block from running; all but ``output`` need a reason."""

RUNS: Final = frozenset({"python", "sh", "bash", "console", "toml", "json", "yaml"})
"""The languages a block may have to run."""

_KINDS: Final = NOT_RUN | {"file", "setup", "cluster", "dir"}
_FENCE: Final = re.compile(r"^(\s*)(```+|~~~+)\s*([\w-]*)\s*$")
_MARK: Final = re.compile(r"^\s*<!-- docs-test: (.*?) -->\s*$")


@attrs.frozen
class Block:
    """One fenced block: where it is, its language, its text, its marks."""

    page: str
    line: int
    language: str
    text: str
    marks: tuple[tuple[str, str], ...]

    @property
    def id(self) -> str:
        return f"{self.page}:L{self.line}"

    def mark(self, kind: str) -> str | None:
        """The argument of the block's mark of ``kind`` (None: no such mark)."""
        return next((arg for k, arg in self.marks if k == kind), None)

    def all(self, kind: str) -> list[str]:
        return [arg for k, arg in self.marks if k == kind]

    @property
    def not_run(self) -> str | None:
        """Why the block is not run (None: it runs)."""
        for kind, arg in self.marks:
            if kind in NOT_RUN:
                return f"{kind}: {arg}".rstrip(": ")
        return None


def blocks() -> list[Block]:
    """Every fenced block of README.md and docs/*.md, in page order."""
    found: list[Block] = []
    for page in PAGES:
        found += _page_blocks(page)
    return found


def fence_lines(page: Path) -> int:
    """How many lines of the page are a fence, opening or closing (a check
    that the parser missed none)."""
    return sum(1 for line in page.read_text().splitlines() if _FENCE.match(line))


def _page_blocks(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    name = str(page.relative_to(ROOT))
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence, language = opening.groups()
        end = i + 1
        while lines[end].strip() != fence:
            end += 1
        body = [line.removeprefix(indent) for line in lines[i + 1 : end]]
        found.append(Block(name, i + 1, language, "\n".join(body) + "\n", _marks(lines, i, name)))
        i = end + 1
    return found


def _marks(lines: list[str], fence: int, page: str) -> tuple[tuple[str, str], ...]:
    marks: list[tuple[str, str]] = []
    above = fence - 1
    while above >= 0 and (mark := _MARK.match(lines[above])):
        kind, _, arg = mark.group(1).partition(" ")
        if kind not in _KINDS:
            raise ValueError(f"{page}:L{above + 1}: unknown docs-test mark {kind!r}")
        marks.insert(0, (kind, arg.strip()))
        above -= 1
    return tuple(marks)


def unknown_keys(fragment: dict[str, Any]) -> list[str]:
    """The tables and keys of a cluster.toml fragment that the parser does not
    know (``node.helth``, ``boxed.graze``)."""
    known = {name: set(keys) for name, keys in file_keys(cluster_app()).items()}
    known["node"] |= App.settings_keys
    return _unknown(fragment, "", known)


def _unknown(table: dict[str, Any], name: str, known: dict[str, set[str]]) -> list[str]:
    wrong: list[str] = []
    for key, value in table.items():
        path = f"{name}.{key}" if name else key
        if key not in known.get(name, set()):
            wrong.append(path)
        elif path in known:
            items = value if isinstance(value, list) else [value]
            for item in items:
                wrong += _unknown(item, path, known) if isinstance(item, dict) else [path]
    return wrong
