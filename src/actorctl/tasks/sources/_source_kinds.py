"""The built-in data sources, and how a source's ``kind`` makes its reader.

- ``directory``: the lines of the files in a directory (``pattern``, a glob,
  default ``*``), files in name order: new files, and new lines appended to a
  growing file. Position: ``[file name, byte offset]`` just past the line;
  only whole lines (ended by a newline) are read, so a line being written is
  read once it is whole. A file whose name sorts before the file being read
  is not read when it appears later: name files so that they sort in the order
  they come (a timestamp first). Each item is ``{"file": NAME, "line": TEXT}``.
- ``http``: a JSON list of objects from ``url`` (plain ``http://``), polled;
  ``key`` names a field whose values grow (an id, a time): the items whose key
  is past the position, in key order. The key makes an item idempotent: the
  same key is the same message, however often a poll returns it.
- ``sqlite``: ``SELECT columns FROM table WHERE key > :last ORDER BY key LIMIT
  n`` over the SQLite file ``database`` (opened read-only). Each item is the
  row as an object; its position is its key.
- ``module:Class``: a user's :class:`~actorctl.tasks.sources._source.Source`, made with
  the table's ``settings`` as keyword arguments.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import json
import re
import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FunctionType, MappingProxyType
from typing import Any, Final, final
from urllib.parse import urlsplit

from ..._errors import ConfigError
from ..._threads import run_sync
from ...cluster import http_get
from ...supervision import import_target
from ._kind_tables import read_kind
from ._source import Source

__all__ = [
    "BUILT_IN",
    "DirectorySource",
    "HttpSource",
    "SqliteSource",
    "checked_factory",
    "reader_factory",
]

_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@final
class DirectorySource:
    """The whole lines of the files of ``path`` that match ``pattern``."""

    def __init__(self, path: str | Path, pattern: str = "*") -> None:
        if not isinstance(path, str | Path) or not str(path):
            raise ConfigError(f"path: expected a directory, got {path!r}")
        if not isinstance(pattern, str) or not pattern:
            raise ConfigError(f"pattern: expected a glob like '*.log', got {pattern!r}")
        self.path = Path(path)
        self.pattern = pattern

    async def read(self, after: Any, limit: int) -> list[tuple[Any, Any]]:
        return await run_sync(self._read, after, limit)

    def _read(self, after: Any, limit: int) -> list[tuple[Any, Any]]:
        name, offset = (str(after[0]), int(after[1])) if after is not None else ("", 0)
        if not self.path.is_dir():
            raise FileNotFoundError(f"source directory {str(self.path)!r} does not exist")
        files = sorted(p.name for p in self.path.glob(self.pattern) if p.is_file())
        found: list[tuple[Any, Any]] = []
        for file in (f for f in files if f >= name):
            at = offset if file == name else 0
            with (self.path / file).open("rb") as handle:
                handle.seek(at)
                while len(found) < limit:
                    line = handle.readline()
                    if not line.endswith(b"\n"):
                        break  # the end, or a line not yet whole
                    at += len(line)
                    text = line.decode("utf-8", "replace").rstrip("\r\n")
                    found.append(([file, at], {"file": file, "line": text}))
            if len(found) >= limit:
                break
        return found


@final
class HttpSource:
    """The objects of a JSON list at ``url`` whose ``key`` is past the position."""

    def __init__(self, url: str, key: str, timeout: float = 10.0) -> None:
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme != "http" or not parts.hostname:
            raise ConfigError(f"url: expected http://HOST:PORT/PATH, got {url!r}")
        if not isinstance(key, str) or not key:
            raise ConfigError(f"key: expected the name of a field of each item, got {key!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ConfigError(f"timeout: expected seconds > 0, got {timeout!r}")
        self.host, self.port = parts.hostname, parts.port or 80
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.url, self.key, self.timeout = url, key, float(timeout)

    async def read(self, after: Any, limit: int) -> list[tuple[Any, Any]]:
        status, body = await http_get(self.host, self.port, self.target, timeout=self.timeout)
        if status != 200:
            raise OSError(f"GET {self.url}: status {status}")
        items = json.loads(body)
        if not isinstance(items, list) or not all(
            isinstance(i, dict) and self.key in i for i in items
        ):
            raise ValueError(f"GET {self.url}: expected a JSON list of objects with {self.key!r}")
        new = [i for i in items if after is None or i[self.key] > after]
        new.sort(key=lambda i: i[self.key])
        return [(item[self.key], item) for item in new[:limit]]


@final
class SqliteSource:
    """The rows of ``table`` in ``database`` whose ``key`` column is past the position."""

    def __init__(self, database: str | Path, table: str, key: str, columns: str = "*") -> None:
        if not isinstance(database, str | Path) or not str(database):
            raise ConfigError(f"database: expected the path of a SQLite file, got {database!r}")
        names = [c.strip() for c in columns.split(",")] if isinstance(columns, str) else []
        for what, value in (("table", table), ("key", key), *(("columns", n) for n in names)):
            if value != "*" and not (isinstance(value, str) and _IDENTIFIER.fullmatch(value)):
                raise ConfigError(
                    f"{what}: expected an SQL name (letters, digits, _), got {value!r}"
                )
        if not names or ("*" in names and len(names) > 1):
            raise ConfigError(f"columns: expected '*' or 'a, b, c', got {columns!r}")
        if "*" not in names and key not in names:
            names.append(key)
        self.database, self.key = Path(database), key
        self.query = f"SELECT {', '.join(names)} FROM {table}"  # names checked above

    async def read(self, after: Any, limit: int) -> list[tuple[Any, Any]]:
        return await run_sync(self._read, after, limit)

    def _read(self, after: Any, limit: int) -> list[tuple[Any, Any]]:
        if not self.database.exists():
            raise FileNotFoundError(f"source database {str(self.database)!r} does not exist")
        uri = f"file:{self.database}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
            db.row_factory = sqlite3.Row
            where = "" if after is None else f" WHERE {self.key} > :last"
            sql = f"{self.query}{where} ORDER BY {self.key} LIMIT :limit"
            rows = db.execute(sql, {"last": after, "limit": limit}).fetchall()
        return [(row[self.key], dict(row)) for row in rows]


#: Each built-in kind's class (its keys: its record, ``_kind_tables.py``).
BUILT_IN: Final[Mapping[str, type[Any]]] = MappingProxyType(
    {"directory": DirectorySource, "http": HttpSource, "sqlite": SqliteSource}
)


def reader_factory(
    kind: object, settings: Mapping[str, Any], *, root: Path | None = None
) -> Callable[[], Source]:
    """What makes the reader of a source of ``kind`` with ``settings`` (checked
    now, by making one: a reader's constructor does no I/O).

    Args:
        root: where relative paths start (cluster.toml's directory).

    Raises:
        ConfigError: an unknown kind ("did you mean"), a missing key, a key
            of another kind, or a value the reader refuses.
    """
    if not isinstance(kind, str) or not kind:
        raise ConfigError(
            f"kind: expected one of {sorted(BUILT_IN)} or 'module:Class', got {kind!r}"
        )
    if kind in BUILT_IN:
        given = read_kind(kind, settings)  # its record's keys, each value checked
        for key in ("path", "database"):
            if key in given and root is not None:
                given[key] = str(root / given[key])
        return checked_factory(BUILT_IN[kind], kind, given)
    if ":" not in kind:
        close = difflib.get_close_matches(kind, sorted(BUILT_IN), n=1)
        hint = f": did you mean {close[0]!r}?" if close else ""
        raise ConfigError(
            f"kind: no source kind {kind!r}{hint} (kinds: {sorted(BUILT_IN)}, or 'module:Class')"
        )
    make = import_target(kind)
    if not callable(make):
        raise ConfigError(f"kind {kind!r}: expected a class with read(after, limit)")
    return checked_factory(make, kind, settings)


def checked_factory(
    make: Callable[..., Any], label: str, settings: Mapping[str, Any]
) -> Callable[[], Source]:
    """``make`` with ``settings``, checked by making one reader now.

    Raises:
        ConfigError: the settings do not fit, or what it makes is no Source.
    """
    if isinstance(make, type) and not callable(getattr(make, "read", None)):
        raise ConfigError(f"{label!r}: class {make.__qualname__} has no read(after, limit) method")
    if not isinstance(make, type) and callable(getattr(make, "read", None)):
        raise ConfigError(f"{label!r}: give its class (or a factory), not a Source made already")
    if not isinstance(make, type) and not isinstance(make, functools.partial | FunctionType):
        raise ConfigError(
            f"{label!r}: expected a Source class (with read(after, limit)), got {make!r}"
        )
    made = functools.partial(make, **settings)
    try:
        reader = made()
    except TypeError as exc:
        raise ConfigError(f"{label!r}: its settings {dict(settings)!r} do not fit: {exc}") from None
    if not isinstance(reader, Source):
        raise ConfigError(f"{label!r}: {reader!r} has no read(after, limit) method")
    return made
