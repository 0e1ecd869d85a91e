"""Reading cluster.toml's tables with clear errors: a table's keys checked
against what it may and must have (``_tables.py``), and the error for a
wrong value, naming the file, the key, what was expected and what it got.
A table read as a record (its schema, ``_schema.py``) gets both from here.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, final

import attrs

from ..._errors import ConfigError
from ..._schema import read_table
from ._config_keys import unknown_key
from ._tables import OPEN_TABLES, REQUIRED_KEYS, SINGLE_TABLES, file_keys

if TYPE_CHECKING:
    from ._config import ClusterApp

__all__ = ["TableReader"]


@final
class TableReader:
    """Reads the tables of one cluster.toml, each value checked: a wrong one
    is a ``ConfigError`` naming the file, the key, what was expected and what
    it got."""

    def __init__(self, path: Path, app: ClusterApp | None = None) -> None:
        self.path = path
        #: The application's tables, by name.
        self.app_tables = {table.name: table for table in app.tables} if app else {}
        #: Every table's keys.
        self.known = file_keys(app)
        #: Keys of the application's older formats, with where they went.
        self.moved = app.moved_keys if app is not None else None

    def keys(self, table: Mapping[str, Any], prefix: str, kind: str) -> None:
        """Check the keys of ``table`` (at ``prefix``, e.g. ``node[1]``), a table
        of ``kind`` (a key of KNOWN_KEYS, e.g. ``node``, or an application's
        table): a missing required key is reported as missing (naming the
        misspelling, if there is one), and a key nothing reads is refused."""
        app = self.app_tables.get(kind)
        known = self.known[kind]
        required = app.required if app is not None else REQUIRED_KEYS.get(kind, ())
        dot = f"{prefix}." if prefix else ""
        strangers = [key for key in table if key not in known]
        for key in required:
            if key not in table:
                close = difflib.get_close_matches(key, strangers, n=1)
                hint = (
                    f"{dot}{close[0]} is not a key: a misspelling of {key!r}?"
                    if close
                    else f"every {_brackets(kind)} table needs one ({key} = ...)"
                )
                raise ConfigError(f"{self.path}: key {dot + key!r} is missing: {hint}")
        for key in strangers:
            if kind not in OPEN_TABLES or difflib.get_close_matches(key, known, n=1, cutoff=0.8):
                raise unknown_key(self.path, f"{dot}{key}", table[key], known, moved=self.moved)

    def error(self, key: str, expected: str, got: object) -> ConfigError:
        shown = "nothing" if got is None else f"{got!r}"
        return ConfigError(f"{self.path}: key {key!r}: expected {expected}, got {shown}")

    def tables(
        self, items: object, kind: str
    ) -> tuple[tuple[Mapping[str, Any], ...], tuple[attrs.AttrsInstance, ...]]:
        """The ``[[kind]]`` tables, their keys checked; and, for an
        application's table with a schema, each read as its record (its
        values checked)."""
        if not isinstance(items, list):
            raise self.error(kind, f"[[{kind}]] tables", items)
        records: list[attrs.AttrsInstance] = []
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                raise self.error(f"{kind}[{index}]", "a table", item)
            schema = self.app_tables[kind].schema if kind in self.app_tables else None
            if schema is not None:  # its keys, then its values (as its record)
                records.append(read_table(self, item, f"{kind}[{index}]", kind, schema))
            else:
                self.keys(item, f"{kind}[{index}]", kind)
        return tuple(items), tuple(records)


def _brackets(kind: str) -> str:
    """How a table of ``kind`` is written: ``[etcd]``, or ``[[node]]`` for an array."""
    return f"[{kind}]" if kind in SINGLE_TABLES else f"[[{kind}]]"
