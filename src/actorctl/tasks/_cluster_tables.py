"""The schemas of the task layer's tables of cluster.toml, registered with
the runtime through ``AppTable.of`` (``_cluster_app.py``): each table is read
as its record, its keys checked (a misspelt one named with the nearest known
key) and its typed values checked, in the runtime's words, when the file is
read.

A key whose value needs what only the task layer knows (the app's tasks, a
schedule's syntax, which keys go with a source's ``kind``) is a field of type
``Any`` here, and its reader checks it with its own words: ``[[periodic]]``
in ``services/_periodic.py``, ``[[source]]`` in ``sources/_source_config.py``,
``[[task]]``'s rates in ``limits/_tuning.py``.
"""

from __future__ import annotations

from typing import Any, final

import attrs

__all__ = ["PeriodicTable", "SourceTable", "TaskTable"]


@final
@attrs.frozen
class PeriodicTable:
    """``[[periodic]]``: a task fired on a schedule by the services node's beat."""

    name: Any
    task: Any
    cron: Any = None
    every: Any = None
    tz: Any = None
    args: Any = None
    kwargs: Any = None
    catch_up: Any = None
    # its firings' options (services/_periodic.py PERIODIC_OPTIONS)
    queue: Any = None
    expires: Any = None
    priority: Any = None


@final
@attrs.frozen
class SourceTable:
    """``[[source]]``: what a source feeds, how often and how much, then the
    keys of the built-in kinds, then ``settings`` (a "module:Class" source's)."""

    name: Any
    kind: Any
    task: Any = None
    actor: Any = None
    handler: Any = None
    node: Any = None
    poll: Any = None
    batch: Any = None
    window: Any = None
    path: Any = None
    pattern: Any = None
    url: Any = None
    key: Any = None
    timeout: Any = None
    database: Any = None
    table: Any = None
    columns: Any = None
    settings: Any = None


@final
@attrs.frozen
class TaskTable:
    """``[[task]]``: a task's limits over its decorator's, followed live."""

    name: str
    rate_limit: Any = None
    global_rate_limit: Any = None
