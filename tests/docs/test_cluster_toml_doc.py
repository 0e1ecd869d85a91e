"""docs/cluster-toml.md describes every table and key the cluster.toml parser
accepts, and no other.

The parser's tables and keys are ``file_keys`` (the runtime's ``KNOWN_KEYS``
and the task layer's own arrays of tables) plus the keys of a ``[[node]]``
table that the task app reads as an actors factory (``App.settings_keys``).
The page gives each table a heading that names it (``## `[cluster]` ``,
``### `[[node.health]]` ``) and each key a row of that heading's table whose
first cell is the key (``| `name` | ...``).
"""

from __future__ import annotations

import re
from pathlib import Path

from actorctl.cluster.config._load import load_cluster
from actorctl.cluster.config._tables import file_keys
from actorctl.tasks import App, cluster_app

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cluster-toml.md"
HEADING = re.compile(r"^#{2,4} `\[{1,2}([a-z_.]+)\]{1,2}`\s*$")
ROW = re.compile(r"^\| `([a-z_]+)` \|")


def documented(text: str) -> dict[str, set[str]]:
    """Each table the page has a heading for, with the keys of its rows."""
    tables: dict[str, set[str]] = {}
    table: str | None = None
    for line in text.splitlines():
        if heading := HEADING.match(line):
            table = heading.group(1)
            assert table not in tables, f"{table!r} has two headings"
            tables[table] = set()
        elif line.startswith("#"):
            table = None
        elif (row := ROW.match(line)) and table is not None:
            tables[table].add(row.group(1))
    return tables


def accepted() -> dict[str, set[str]]:
    """Each table the parser reads (the top level aside), with its keys."""
    known = {name: set(keys) for name, keys in file_keys(cluster_app()).items()}
    known["node"] |= App.settings_keys
    return known


def test_the_page_names_every_table_and_key_the_parser_accepts_and_no_other() -> None:
    page = documented(PAGE.read_text())
    known = accepted()
    top = known.pop("")
    # Every table of the top level has its section, and every section is a table
    assert top == {name for name in known if "." not in name}
    assert set(page) == set(known), "tables: " + repr(set(page) ^ set(known))
    missing = {f"{t}.{k}" for t, keys in known.items() for k in keys - page[t]}
    unknown = {f"{t}.{k}" for t, keys in page.items() for k in keys - known[t]}
    assert (missing, unknown) == (set(), set())


def test_the_check_sees_a_key_missing_from_the_page_and_a_key_the_parser_does_not_know() -> None:
    text = PAGE.read_text()
    row = "| `grace` | seconds | `2.0` |"
    assert row in text
    without = documented(text.replace(row, "| grace | seconds | `2.0` |"))
    assert "grace" not in without["boxed"]
    misspelt = documented(text.replace(row, "| `graze` | seconds | `2.0` |"))
    assert "graze" in misspelt["boxed"]
    assert "graze" not in accepted()["boxed"]


def test_the_small_file_on_the_page_is_a_valid_cluster_file(tmp_path: Path) -> None:
    example = PAGE.read_text().split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "cluster.toml"
    path.write_text(example)
    config = load_cluster(path, cluster_app())
    assert [node.name for node in config.nodes] == ["services", "worker-1"]
    assert config.nodes[1].settings == {"pools": ["celery"]}
