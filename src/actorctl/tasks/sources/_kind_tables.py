"""The keys of each built-in source kind, as a record: what a ``[[source]]``
table of that kind (or ``app.add_source``'s settings) gives its reader.

Each record is read by the package's one converter (``actorctl._schema``):
its fields are the keys the kind reads (those without a default the keys it
needs), each with its type and the words of the error for a wrong value.
:func:`read_kind` reads a kind's settings into its record: a missing key, a
key of another kind and a wrong value are refused as they were when each
reader's constructor checked them (``pattern: expected a glob like '*.log',
got 5``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import PurePath
from types import MappingProxyType
from typing import Any, Final, final
from urllib.parse import urlsplit

import attrs

from ..._errors import ConfigError
from ..._schema import key as checked  # a field named key: HttpKeys'
from ..._schema import read_table, schema_keys, schema_required

__all__ = [
    "KIND_KEYS",
    "KIND_TABLES",
    "DirectoryKeys",
    "HttpKeys",
    "SqliteKeys",
    "kind_key",
    "read_kind",
]

_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SQL_NAME: Final = "an SQL name (letters, digits, _)"


def _http_url(value: str) -> bool:
    parts = urlsplit(value)
    return parts.scheme == "http" and bool(parts.hostname)


def _sql_name(value: str) -> bool:
    return _IDENTIFIER.fullmatch(value) is not None


def _columns(value: str) -> bool:
    names = [c.strip() for c in value.split(",")]
    return names == ["*"] or all(_sql_name(n) for n in names)


@final
@attrs.frozen
class DirectoryKeys:
    """``directory``: the lines of the files of ``path`` matching ``pattern``."""

    path: str = checked("a directory")
    pattern: str = checked("a glob like '*.log'", default="*")


@final
@attrs.frozen
class HttpKeys:
    """``http``: the objects of a JSON list at ``url``, past the position by ``key``."""

    url: str = checked("http://HOST:PORT/PATH", _http_url)
    key: str = checked("the name of a field of each item")
    timeout: float = checked("seconds > 0", lambda v: v > 0, default=10.0)


@final
@attrs.frozen
class SqliteKeys:
    """``sqlite``: the rows of ``table`` in ``database``, past the position by ``key``."""

    database: str = checked("the path of a SQLite file")
    table: str = checked(_SQL_NAME, _sql_name)
    key: str = checked(_SQL_NAME, _sql_name)
    columns: str = checked(
        "'*' or SQL names (letters, digits, _) as 'a, b, c'", _columns, default="*"
    )


#: Each built-in kind's record.
KIND_TABLES: Final[Mapping[str, type[attrs.AttrsInstance]]] = MappingProxyType(
    {"directory": DirectoryKeys, "http": HttpKeys, "sqlite": SqliteKeys}
)
#: Every key a built-in kind reads (any other key of a [[source]] table is generic).
KIND_KEYS: Final = frozenset(name for table in KIND_TABLES.values() for name in schema_keys(table))


@final
@attrs.frozen
class _KindReader:
    """What ``read_table`` needs to read a kind's settings: their keys checked
    against the kind's, and errors in the words each reader's own checks use."""

    def keys(self, table: Mapping[str, Any], prefix: str, kind: str) -> None:
        required = schema_required(KIND_TABLES[kind])
        for name in sorted(set(required) - set(table)):
            raise ConfigError(f"key {name!r} is missing: a {kind} source needs {sorted(required)}")
        known = schema_keys(KIND_TABLES[kind])
        for name in sorted(set(table) - known):
            owner = next((k for k, t in KIND_TABLES.items() if name in schema_keys(t)), None)
            why = f"it is for a {owner} source" if owner else "no such key"
            raise ConfigError(f"key {name!r}: a {kind} source does not read it ({why})")

    def error(self, key: str, expected: str, got: object) -> ConfigError:
        return ConfigError(f"{key}: expected {expected}, got {got!r}")


def kind_key(kind: str, name: str) -> Any:
    """A field of a ``[[source]]`` table's schema for the key ``name`` of the
    built-in ``kind``: optional (None: the table leaves it out), its value in
    the words and with the check of the kind's record."""
    field = attrs.fields_dict(KIND_TABLES[kind])[name]
    return checked(field.metadata["expected"], field.metadata["check"], default=None)


def read_kind(kind: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of a built-in ``kind`` read as its record (a path given
    as a ``Path`` taken as its text), as its reader's keyword arguments.

    Raises:
        ConfigError: a missing key, a key of another kind, or a wrong value.
    """
    given = {k: str(v) if isinstance(v, PurePath) else v for k, v in settings.items()}
    record = read_table(_KindReader(), given, "", kind, KIND_TABLES[kind])
    return attrs.asdict(record, recurse=False)
