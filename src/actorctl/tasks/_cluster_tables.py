"""The schemas of the task layer's tables of cluster.toml, registered with
the runtime through ``AppTable.of`` (``_cluster_app.py``): each table is read
as its record, its keys checked (a misspelt one named with the nearest known
key) and each value whose type is known without the app (a name, a number,
a boolean, a string, a list, a table) checked, in the runtime's words, when
the file is read. The task layer reads the records
(``ClusterConfig.records``), never the tables' dicts.

A ``[[task]]``'s rates are read into their records (:class:`TableRate`)
here; a ``[[source]]``'s keys of the built-in kinds are typed and checked as
the kind's record (``sources/_kind_tables.py``) has them. Every field has its
type (an interval is seconds, ``args`` a tuple of any TOML values, ``kwargs``
and ``settings`` tables of them), read by the converter, and a wrong one is
named by its key's path (``key 'periodic[0].every': expected seconds > 0``).
A value that needs what only the app knows (its tasks, a schedule's syntax,
which keys go with a source's ``kind``) is checked by its reader with its own
words: ``[[periodic]]`` in ``services/_periodic.py``, ``[[source]]`` in
``sources/_source_config.py``, a ``[[task]]``'s name in ``limits/_tuning.py``;
such a field is a string whose syntax its reader checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, final

import attrs

from .._schema import key as checked  # a field named key: SourceTable's
from .limits._rates import RateLimit, rate_limit_of
from .sources._kind_tables import kind_key

__all__ = ["PeriodicTable", "SourceTable", "TableRate", "TaskTable"]

_STRING: Final = "a non-empty string"
_SECONDS: Final = "seconds > 0"
_WHOLE: Final = "a whole number >= 1"
_NAME_MAX: Final = 200


def _seconds(value: float) -> bool:
    return value > 0


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _text(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= _NAME_MAX and value.isprintable()


@final
@attrs.frozen
class PeriodicTable:
    """``[[periodic]]``: a task fired on a schedule by the services node's beat."""

    name: str = checked(f"text of 1 to {_NAME_MAX} characters without control characters", _text)
    task: str = checked(_STRING)  # one of the app's tasks: checked by periodic_task
    cron: str | None = checked(
        f"{_STRING} (a cron expression)", default=None
    )  # its syntax: Schedule
    every: float | None = checked(_SECONDS, _seconds, default=None)
    tz: str | None = checked(f"{_STRING} (an IANA timezone)", default=None)  # zone_of names it
    args: tuple[Any, ...] | None = checked("a list", default=None)
    kwargs: Mapping[str, Any] | None = checked("a table of keyword arguments", default=None)
    catch_up: bool = checked("true or false", default=True)
    # its firings' options (services/_periodic.py PERIODIC_OPTIONS)
    queue: str | None = checked(_STRING, default=None)
    expires: float | None = checked(_SECONDS, _seconds, default=None)
    priority: int | None = checked(
        "a whole number from 0 to 9", lambda v: 0 <= v <= 9, default=None
    )

    def options(self) -> dict[str, object]:
        """Its firings' options that the table gives."""
        given = {"queue": self.queue, "expires": self.expires, "priority": self.priority}
        return {name: value for name, value in given.items() if value is not None}


@final
@attrs.frozen
class SourceTable:
    """``[[source]]``: what a source feeds, how often and how much, then the
    keys of the built-in kinds, then ``settings`` (a "module:Class" source's)."""

    name: str = checked(_STRING)  # its letters: checked by source_spec
    kind: str = checked(_STRING)  # a built-in kind or "module:Class": checked by source_spec
    task: str | None = checked(_STRING, default=None)  # one of the app's tasks: source_spec
    actor: str | None = checked(_STRING, default=None)  # resolved by cluster_sources
    handler: str | None = checked(_STRING, default=None)
    node: str | None = checked(_STRING, default=None)  # one of the file's nodes: cluster_sources
    poll: float | None = checked(_SECONDS, _seconds, default=None)
    batch: int | None = checked(_WHOLE, _whole, default=None)
    window: int | None = checked(_WHOLE, _whole, default=None)
    # the built-in kinds' keys, each typed and checked as its kind's record
    # (sources/_kind_tables.py) has it; which go with which kind is the
    # kind's reader's to say (read_kind), and a key both http and sqlite
    # read (key) is a string whose syntax the kind's record checks
    path: str | None = kind_key("directory", "path")
    pattern: str | None = kind_key("directory", "pattern")
    url: str | None = kind_key("http", "url")
    key: str | None = checked(_STRING, default=None)
    timeout: float | None = kind_key("http", "timeout")
    database: str | None = kind_key("sqlite", "database")
    table: str | None = kind_key("sqlite", "table")
    columns: str | None = kind_key("sqlite", "columns")
    settings: Mapping[str, Any] | None = checked("a table", default=None)

    def kind_settings(self, kind_keys: frozenset[str]) -> dict[str, object]:
        """``settings``, then the built-in kinds' keys the table gives."""
        found: dict[str, object] = dict(self.settings or {})
        for name, value in attrs.asdict(self, recurse=False).items():
            if name in kind_keys and value is not None:
                found[name] = value
        return found


@final
@attrs.frozen
class TableRate:
    """A rate a ``[[task]]`` table sets over its task's decorator's: ``limit``,
    or None (``"0/s"``, ``0``, ``""``): the task is not limited."""

    limit: RateLimit | None


def _rate(value: object) -> TableRate:
    """A rate in Celery's syntax (``rate_limit_of``) as the table sets it."""
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ValueError(value)  # rate_limit_of would take a RateLimit: TOML has none
    return TableRate(rate_limit_of(value, what="rate"))


_RATE: Final = (
    'a rate limit like "10/s", "100/m" or "5/h" (tasks per second, minute or hour, '
    "as in Celery; a bare number is per second; 0: none)"
)


@final
@attrs.frozen
class TaskTable:
    """``[[task]]``: a task's limits over its decorator's, followed live."""

    name: str  # one of the app's tasks: checked by file_limits
    rate_limit: TableRate | None = checked(_RATE, read=_rate, default=None)
    global_rate_limit: TableRate | None = checked(_RATE, read=_rate, default=None)
