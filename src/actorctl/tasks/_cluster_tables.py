"""The schemas of the task layer's tables of cluster.toml, registered with
the runtime through ``AppTable.of`` (``_cluster_app.py``): each table is read
as its record, its keys checked (a misspelt one named with the nearest known
key) and each value whose type is known without the app (a name, a number,
a boolean, a string, a list, a table) checked, in the runtime's words, when
the file is read. The task layer reads the records
(``ClusterConfig.records``), never the tables' dicts.

A value that needs what only the task layer knows (the app's tasks, a
schedule's syntax, a rate's syntax, which keys go with a source's ``kind``)
is checked by its reader with its own words: ``[[periodic]]`` in
``services/_periodic.py``, ``[[source]]`` in ``sources/_source_config.py``,
``[[task]]``'s rates in ``limits/_tuning.py``. Such a field is of type
``Any`` here, or a string whose syntax its reader checks.
"""

from __future__ import annotations

from typing import Any, Final, final

import attrs

from .._schema import key as checked  # a field named key: SourceTable's

__all__ = ["PeriodicTable", "SourceTable", "TaskTable"]

_STRING: Final = "a non-empty string"
_SECONDS: Final = "seconds > 0"
_WHOLE: Final = "a whole number >= 1"
_NAME_MAX: Final = 200


def _seconds(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


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
    every: Any = checked(_SECONDS, _seconds, default=None)
    tz: str | None = checked(f"{_STRING} (an IANA timezone)", default=None)  # zone_of names it
    args: Any = checked("a list", lambda v: isinstance(v, list), default=None)
    kwargs: Any = checked(
        "a table of keyword arguments", lambda v: isinstance(v, dict), default=None
    )
    catch_up: bool = checked("true or false", default=True)
    # its firings' options (services/_periodic.py PERIODIC_OPTIONS)
    queue: str | None = checked(_STRING, default=None)
    expires: Any = checked(_SECONDS, _seconds, default=None)
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
    poll: Any = checked(_SECONDS, _seconds, default=None)
    batch: int | None = checked(_WHOLE, _whole, default=None)
    window: int | None = checked(_WHOLE, _whole, default=None)
    # the built-in kinds' keys (sources/_source_kinds.py): which go with which
    # kind, and what each value is, is the kind's reader's to say
    path: Any = None
    pattern: Any = None
    url: Any = None
    key: Any = None
    timeout: Any = None
    database: Any = None
    table: Any = None
    columns: Any = None
    settings: Any = checked("a table", lambda v: isinstance(v, dict), default=None)

    def kind_settings(self, kind_keys: frozenset[str]) -> dict[str, object]:
        """``settings``, then the built-in kinds' keys the table gives."""
        found: dict[str, object] = dict(self.settings or {})
        for name, value in attrs.asdict(self, recurse=False).items():
            if name in kind_keys and value is not None:
                found[name] = value
        return found


@final
@attrs.frozen
class TaskTable:
    """``[[task]]``: a task's limits over its decorator's, followed live."""

    name: str  # one of the app's tasks: checked by file_limits
    # a rate ("10/s"), or a number of tasks a second: checked by rate_limit_of
    rate_limit: Any = None
    global_rate_limit: Any = None
