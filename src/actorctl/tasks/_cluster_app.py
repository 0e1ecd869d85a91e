"""The task layer's part of cluster.toml, declared through the runtime's
:class:`~actorctl.cluster.ClusterApp`: the runtime reads these tables, shows
these roles and runs these checks without knowing a word of them.

- ``[[periodic]]`` (docs/scheduling.md), fired by the beat of the services
  node: a change is followed live by the beat.
- ``[[source]]`` (docs/sources.md), each read by the actor ``source.NAME`` on
  the services node or the node its table names: a change restarts that node.
- ``[[task]]``, a task's limits over its decorator's: followed live by every
  worker.
- The ``scheduler`` role (the one beat that fires periodic tasks) and, across
  hosts, the ``services`` role (which services node is reached).
- Its sections of the Controller's web page (``_page.py``: recent, running,
  failed and retried tasks, pools, limits, schedules).

Every process that reads a cluster file for the task layer (the CLI, a
node, ``app.connect``, the testing kit) reads it with :func:`cluster_app`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import final

import attrs

from .._errors import ConfigError
from ..cluster import AppPage, AppReload, AppTable, ClusterConfig, changed_tables
from ._cluster_tables import PeriodicTable, SourceTable, TaskTable
from ._page import task_page
from .protocol._protocol import BEAT_NAME, SCHEDULER_ROLE, SERVICES_ROLE
from .sources._source_config import source_actor

__all__ = ["TaskClusterApp", "cluster_app"]


def _tables() -> tuple[AppTable, ...]:
    return (
        # read by the beat of the services node (services/_periodic.py)
        AppTable.of("periodic", PeriodicTable),
        # read by the task app of the node that hosts each (sources/_source_config.py)
        AppTable.of("source", SourceTable),
        # read by every worker (limits/_tuning.py)
        AppTable.of("task", TaskTable),
    )


def _moved() -> Mapping[str, str]:
    return {
        "cluster.app": (
            "it moved to the nodes that host the app: name the app as such a node's "
            'actors (actors = "MODULE:APP") and say what the node hosts there '
            '(pools = ["POOL", ...], or services = true on one node)'
        ),
    }


@final
@attrs.frozen
class TaskClusterApp:
    """The task layer as a :class:`~actorctl.cluster.ClusterApp`."""

    tables: tuple[AppTable, ...] = attrs.field(factory=_tables)
    roles: tuple[str, ...] = (SCHEDULER_ROLE, SERVICES_ROLE)
    moved_keys: Mapping[str, str] = attrs.field(factory=_moved)
    #: The node record's ``workers`` (a pool's workers on the node) was named
    #: with this layer's word before issue 29: written and read under both
    #: names while nodes of the release before it may run (docs/deploy.md).
    record_aliases: Mapping[str, str] = attrs.field(factory=lambda: {"pools": "workers"})
    #: Its sections of the Controller's web page (``_page.py``).
    page: AppPage = attrs.field(factory=task_page)

    def check(self, config: ClusterConfig, hosted: Mapping[str, Collection[str]]) -> None:
        """Before ``cluster up`` starts anything: a beat for the periodic
        tasks, a node that reads each source.

        Raises:
            ConfigError: naming the table and what to do.
        """
        everywhere = [names for names in hosted.values()]
        if config.records("periodic", PeriodicTable) and not any(
            BEAT_NAME in names for names in everywhere
        ):
            raise ConfigError(
                f"{config.path}: [[periodic]] tables need a node with services = true (a task "
                "app's services node), whose beat fires them: no node hosts a beat"
            )
        for index, table in enumerate(config.records("source", SourceTable)):
            if not any(source_actor(table.name) in names for names in everywhere):
                raise ConfigError(
                    f"{config.path}: source[{index}] ({table.name!r}): no node reads "
                    "it: a source is read by the task app of the services node, or of the "
                    "node its table names (node = ...), which must host that app"
                )

    def reload(
        self, old: ClusterConfig, new: ClusterConfig, hosted: Mapping[str, Collection[str]]
    ) -> AppReload:
        """Schedules and task limits are followed live; a changed source
        restarts the node that reads it."""
        live = [
            f"periodic {name} {what}"
            for name, what in changed_tables(
                old.records("periodic", PeriodicTable), new.records("periodic", PeriodicTable)
            )
        ]
        live += [
            f"task {name}: limits {what}"
            for name, what in changed_tables(
                old.records("task", TaskTable), new.records("task", TaskTable)
            )
        ]
        restart: dict[str, list[str]] = {}
        for name, what in changed_tables(
            old.records("source", SourceTable), new.records("source", SourceTable)
        ):
            reader = _source_reader(name, old, new, hosted)
            if reader is not None:
                restart.setdefault(reader, []).append(f"source {name} {what}")
        return AppReload(
            live=tuple(live), restart={node: tuple(why) for node, why in restart.items()}
        )


def _source_reader(
    name: str, old: ClusterConfig, new: ClusterConfig, hosted: Mapping[str, Collection[str]]
) -> str | None:
    """The node that reads source ``name``: its table's node, or the one that
    hosts it now, or the one that hosts the beat (the services node)."""
    for config in (new, old):
        for table in config.records("source", SourceTable):
            if table.name == name and table.node:
                return table.node
    for node, actors in hosted.items():
        if source_actor(name) in actors:
            return node
    return next((node for node, actors in hosted.items() if BEAT_NAME in actors), None)


def cluster_app() -> TaskClusterApp:
    """What the task layer declares of cluster.toml: give it to ``load_cluster``."""
    return TaskClusterApp()
