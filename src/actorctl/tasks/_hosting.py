"""Where a task app lives in a cluster: its directory, and the actors each node
hosts for it.

A node hosts an app's actors by naming the app as its actors
(``actors = "tests.apps.task_app:app"`` in cluster.toml): the app is an actors
factory, and the cluster layer hosts what it makes as any other actors. The
node's own settings say what: ``pools = [...]`` (the workers of those pools,
``instances`` of each, and the node's ``_tasks`` control actor) or
``services = true`` (a router per pool, the scheduler, the beat, the event hub
and the chord barrier). docs/protocol.md §14.1 says where everything lives.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, Final, final

import attrs

from .._errors import ConfigError
from ..actors import Actor
from ..cluster import REPLICA, ClusterConfig, NodeConfig, ReplicaKeeper, breakers_of
from ..etcd import EtcdRoleLease
from ..ops import CONTROLLER
from ..supervision import HEALTH_AGENT, BoxedSpec, HealthMonitor
from ._cluster_tables import PeriodicTable, SourceTable, TaskTable
from .app._registry import TaskRegistry
from .client._client import Directory
from .client._services_role import SERVICES_ROLE_NAME, ServicesRole
from .limits._pacing import HELD, PoolRouter
from .limits._tuning import file_limits
from .protocol._protocol import (
    BEAT_NAME,
    CHORD_BARRIER_NAME,
    CHORDS,
    CONTROL,
    EVENT_HUB_NAME,
    EVENTS,
    RELAY,
    RESERVED_NAMES,
    SCHEDULER,
    SCHEDULER_NAME,
    SCHEDULER_ROLE,
)
from .protocol._state import CHORDS_TABLE, DELAYED
from .services._beat import Beat
from .services._chords import ChordBarrier
from .services._events import EventHub
from .services._periodic import PeriodicTask, cluster_periodics
from .services._scheduler import Scheduler
from .sources._source import SourceActor, SourceSpec
from .sources._source_config import cluster_sources, source_actor
from .worker._control import TaskControl, WorkerState
from .worker._relay import ReplyRelay
from .worker._worker import SETTLING, TaskWorker

__all__ = [
    "TASK_SETTINGS",
    "PoolRouter",
    "TaskNodeSettings",
    "cluster_directory",
    "node_pools",
    "task_actors",
]

TASK_ATTEMPT_TIMEOUT: Final = 24 * 3600.0
#: The keys of a node's table a task app reads (its ``settings_keys``).
TASK_SETTINGS: Final = frozenset({"pools", "services"})
#: Seconds past one and a half etcd ttl that a send to a services node that
#: cannot be reached waits for another to take the services role over (the
#: role moves within the ttl and a third, then its watchers are told).
FAILOVER_SLACK: Final = 5.0


@final
@attrs.frozen
class TaskNodeSettings:
    """What a node's settings say it hosts of a task app."""

    pools: tuple[str, ...] = ()
    services: bool = False

    @classmethod
    def of(cls, config: ClusterConfig | None, node: NodeConfig) -> TaskNodeSettings:
        """Read ``pools`` and ``services`` from the node's table.

        Raises:
            ConfigError: naming the file, the node and what was expected.
        """
        where = f"{config.path}: " if config is not None else ""
        pools = node.settings.get("pools", [])
        if not isinstance(pools, list) or not all(isinstance(p, str) and p for p in pools):
            raise ConfigError(
                f"{where}node {node.name!r}: key 'pools': expected a list of pool names "
                f'like ["celery"], got {pools!r}'
            )
        for pool in pools:
            if pool in RESERVED_NAMES:
                raise ConfigError(
                    f"{where}node {node.name!r}: key 'pools': expected pool names other "
                    f"than {sorted(RESERVED_NAMES)}, got {pool!r}"
                )
        services = node.settings.get("services", False)
        if not isinstance(services, bool):
            raise ConfigError(
                f"{where}node {node.name!r}: key 'services': expected true or false, "
                f"got {services!r}"
            )
        if services and pools:
            raise ConfigError(
                f"{where}node {node.name!r} has services = true and pools: the services "
                "node hosts the pools' routers under the pools' names, so put the workers "
                "on other nodes"
            )
        return cls(tuple(pools), services)


def cluster_directory(config: ClusterConfig) -> Directory:
    """Where the cluster's pools and services are: a pool is reached through
    its router on the services node, or (with no services node) at its one
    worker.

    Raises:
        ConfigError: a node's task settings are wrong, two nodes have services,
            or a pool has several workers and no services node to route.
    """
    settings = {node.name: TaskNodeSettings.of(config, node) for node in config.nodes}
    services_nodes = [n for n in config.nodes if settings[n.name].services]
    if len(services_nodes) > 1 and config.etcd is None:
        raise ConfigError(
            f"{config.path}: only one node may have services = true on one host "
            f"({', '.join(n.name for n in services_nodes)} have): several take turns across "
            "hosts, with [etcd] in the file and `actorctl host up FILE --host NAME` on each"
        )
    services = services_nodes[0] if services_nodes else None
    nodes: dict[str, list[str]] = {}
    for node in config.nodes:
        for pool in settings[node.name].pools:
            nodes.setdefault(pool, []).append(config.url(node))
    addresses: dict[str, str] = {}
    for pool in nodes:
        workers = _workers(config, settings, pool)
        if services is not None:
            addresses[pool] = f"{config.url(services)}/{pool}"
        elif len(workers) == 1:
            addresses[pool] = workers[0]
        else:
            raise ConfigError(
                f"{config.path}: pool {pool!r} has {len(workers)} workers and no node has "
                "services = true to route between them"
            )
    for name, route_node in ((n, r) for r in config.nodes for n, _ in r.routes):
        addresses.setdefault(name, f"{config.url(route_node)}/{name}")
    if services is not None:
        url = config.url(services)
        addresses[EVENTS] = f"{url}/{EVENT_HUB_NAME}"
        addresses[SCHEDULER] = f"{url}/{SCHEDULER_NAME}"
        addresses[CHORDS] = f"{url}/{CHORD_BARRIER_NAME}"
    # A pool's router, the event hub and the scheduler settle what they are
    # sent once their node holds it: a caller's sends to them are confirmed.
    accepting = frozenset([*nodes, EVENTS, SCHEDULER]) if services is not None else frozenset()
    return Directory(
        addresses,
        {pool: tuple(where) for pool, where in nodes.items()},
        accepting,
        services={node.name: config.url(node) for node in services_nodes},
        failover=1.5 * config.etcd.ttl + FAILOVER_SLACK if config.etcd is not None else 0.0,
        names={config.url(node): node.name for node in config.nodes},
    )


def _workers(config: ClusterConfig, settings: dict[str, TaskNodeSettings], pool: str) -> list[str]:
    """The addresses of every worker of ``pool`` in the cluster."""
    return [
        f"{config.url(node)}/{_instance(pool, copy)}"
        for node in config.nodes
        if pool in settings[node.name].pools
        for copy in range(1, node.instances + 1)
    ]


def _instance(name: str, copy: int) -> str:
    return name if copy == 1 else f"{name}-{copy}"


def task_actors(
    app: TaskRegistry, config: ClusterConfig | None, node: NodeConfig
) -> dict[str, Actor | BoxedSpec]:
    """The actors ``node`` hosts for ``app``: a ``TaskWorker`` per pool in its
    settings (``POOL``, ``POOL-2``, ... for more instances) and the ``_tasks``
    control actor; on the services node, ``_tasks`` (for the results its
    scheduler and chord barrier keep), a router per pool of the cluster, the
    scheduler, the event hub and the chord barrier. ``_tasks`` comes first: it
    reloads the node's revokes before any worker takes a task. A pool with a
    boxed worker (its ``boxed=True`` tasks, or a ``[[boxed]]`` table that
    serves it) is a BoxedSpec with its worker in front (docs/boxed.md).

    Raises:
        ConfigError: no cluster file, a pool the app does not define, or wrong
            task settings.
    """
    if config is None:
        raise ConfigError(
            f"node {node.name!r} hosts task app {app.name!r}: it needs its cluster.toml "
            "(`actorctl node run ... --cluster FILE`, or `actorctl cluster up FILE`)"
        )
    app.configure()  # Celery's on_after_configure: where projects add periodic tasks
    directory = cluster_directory(config)
    if config.records("periodic", PeriodicTable) and SCHEDULER not in directory.addresses:
        raise ConfigError(
            f"{config.path}: [[periodic]] tables need a node with services = true, whose "
            "beat fires them"
        )
    mine = TaskNodeSettings.of(config, node)
    state = WorkerState()
    limits_of = functools.partial(_file_limits, app)
    state.tuning.defaults = limits_of(config)  # checks the [[task]] tables
    actors: dict[str, Actor | BoxedSpec] = {}
    scheduler = Scheduler(directory) if mine.services else None
    beat = None
    if mine.services:
        beat = _beat(app, config, directory)
    elif mine.pools and config.etcd is not None:
        # Across hosts, every node of the app's pools is a candidate for the
        # scheduler role too: the periodic tasks go on firing when the
        # services node's host is lost (its firings wait in the backlog of the
        # node that fired them until a pool's router takes them).
        beat = _beat(app, config, directory)
        beat = beat if beat.periodics else None
    if mine.pools or mine.services:
        actors[CONTROL] = TaskControl(
            state,
            app.tasks,
            aliases=app.aliases,
            limits=limits_of,
            pools=(lambda c: cluster_directory(c).nodes.keys()) if mine.services else None,
            delayed=scheduler.scheduled if scheduler is not None else None,
            periodic=beat.rows if beat is not None else None,
        )
    for pool in mine.pools:
        boxed = _boxed_spec(app, config, node, pool)
        worker_class = _worker_class(app, pool, boxed)
        if boxed is not None:
            front = functools.partial(worker_class, app, pool, directory, state)
            actors[pool] = attrs.evolve(boxed, name=pool, front=front)
            continue
        for copy in range(1, node.instances + 1):
            actors[_instance(pool, copy)] = worker_class(app, pool, directory, state)
    # The app's checks run on each worker node; its breakers are shown there too.
    if mine.pools and (app.health_checks or breakers_of(actors)):
        actors[HEALTH_AGENT] = HealthMonitor(
            node.name, list(app.health_checks), lambda: breakers_of(actors)
        )
    if mine.services:
        settings = {n.name: TaskNodeSettings.of(config, n) for n in config.nodes}
        for pool in sorted(directory.nodes):
            workers = _workers(config, settings, pool)
            actors[pool] = PoolRouter(
                workers,
                attempt_timeout=TASK_ATTEMPT_TIMEOUT,
                app=app,
                state=state,
                workers=functools.partial(_pool_workers, pool),
                pool=pool,
            )
        if scheduler is not None:  # (made above: the node's _tasks shows what they hold)
            actors[SCHEDULER_NAME] = scheduler
        if beat is not None:
            actors[BEAT_NAME] = beat
        actors[EVENT_HUB_NAME] = EventHub([app], directory)
        actors[CHORD_BARRIER_NAME] = ChordBarrier(directory)
        actors[RELAY] = ReplyRelay()
    elif beat is not None:  # a worker node across hosts, candidate for the scheduler role
        actors[BEAT_NAME] = beat
    if directory.elected and config.etcd is not None:
        keeper = None
        adopters: dict[str, Callable[[list[str]], int]] = {}
        if scheduler is not None:
            adopters[DELAYED] = scheduler.adopt
        routers = [a for a in actors.values() if isinstance(a, PoolRouter)]
        if routers:  # each takes the held tasks keyed by its own name
            adopters[HELD] = lambda keys: sum(router.adopt(keys) for router in routers)
        if CHORD_BARRIER_NAME in actors:
            barrier = actors[CHORD_BARRIER_NAME]
            assert isinstance(barrier, ChordBarrier)
            adopters[CHORDS_TABLE] = barrier.adopt
        if mine.services:  # a standby's copies of the holder's store (and its own, replicated)
            replicas = config.root / "data" / node.name / "replicas" if node.durable else None
            keeper = actors[REPLICA] = ReplicaKeeper(replicas)
            if CHORD_BARRIER_NAME in actors:
                barrier = actors[CHORD_BARRIER_NAME]
                assert isinstance(barrier, ChordBarrier)
                barrier.defer_while_copied(keeper.holds)
        actors[SERVICES_ROLE_NAME] = ServicesRole(
            directory,
            config.etcd.client(),
            config.name,
            config.etcd.ttl,
            candidate=node.name if mine.services else None,
            replica=keeper,
            adopters=adopters,
        )
    # A source no table gives a node is read on the file's first services node
    # (across hosts too: it does not move with the services role).
    first = next(iter(directory.services), None)
    for spec in _sources(app, config, directory):
        if spec.node == node.name or (spec.node is None and node.name == first):
            actors[source_actor(spec.name)] = SourceActor(spec, directory)
    return actors


def node_pools(config: ClusterConfig | None, node: NodeConfig) -> dict[str, list[str]]:
    """The pools ``node`` serves, each with its workers' names there (what its
    record in etcd says: ``NodeRecord.workers``): ``POOL``, ``POOL-2``, ... for
    more instances; one, ``POOL``, for a pool a boxed worker serves.

    Raises:
        ConfigError: wrong task settings.
    """
    pools = TaskNodeSettings.of(config, node).pools
    boxed = {spec.pool for spec in config.boxed_specs(node, pools=True)} if config else set()
    return {
        pool: [pool]
        if pool in boxed
        else [_instance(pool, copy) for copy in range(1, node.instances + 1)]
        for pool in pools
    }


def _pool_workers(pool: str, config: ClusterConfig) -> list[str]:
    """The workers of ``pool`` that ``config`` names (a reloaded file)."""
    settings = {n.name: TaskNodeSettings.of(config, n) for n in config.nodes}
    return _workers(config, settings, pool)


def _file_limits(app: TaskRegistry, config: ClusterConfig) -> dict[str, dict[str, Any]]:
    return file_limits(config.records("task", TaskTable), app.tasks.keys(), config.path)


def _sources(app: TaskRegistry, config: ClusterConfig, directory: Directory) -> list[SourceSpec]:
    """The app's sources and the file's ``[[source]]`` tables, checked (on every
    node, so that ``cluster up``'s preflight refuses a wrong one by name).

    Raises:
        ConfigError: a wrong source, or one with no node to read it.
    """
    tasks = {task.name: task.pool for task in app.tasks.values()}
    nodes = [n.name for n in config.nodes]
    found = cluster_sources(
        app.sources, tasks, config.records("source", SourceTable), config.path, directory, nodes
    )
    for spec in found:
        if spec.node is None and SCHEDULER not in directory.addresses:
            raise ConfigError(
                f"{config.path}: source {spec.name!r} is read on the services node, and no "
                "node has services = true: add one, or name its node (node = ...)"
            )
    return found


def _beat(app: TaskRegistry, config: ClusterConfig, directory: Directory) -> Beat:
    """A beat: the app's periodic tasks and the file's ``[[periodic]]`` tables,
    fired under the Controller's scheduler lease; or, when the node runs with
    etcd (``config.etcd``: a cluster that spans hosts), under the scheduler
    role's lease in etcd, with the etcd ttl.

    Raises:
        ConfigError: a wrong ``[[periodic]]`` table, or a name used twice.
    """

    def periodics_of(config: ClusterConfig) -> list[PeriodicTask]:
        tasks = {task.name: task.pool for task in app.tasks.values()}
        tasks.update({alias: tasks[name] for alias, name in app.aliases.items()})
        return cluster_periodics(
            app.periodics, tasks, config.records("periodic", PeriodicTable), config.path
        )

    if config.etcd is not None:
        client = config.etcd.client()
        return Beat(
            periodics_of(config),
            directory,
            lease=EtcdRoleLease(client, config.name, SCHEDULER_ROLE),
            lease_ttl=config.etcd.ttl,
            periodics_of=periodics_of,
        )
    host, port = config.controller
    return Beat(
        periodics_of(config),
        directory,
        lease=f"{config.scheme}://{host}:{port}/{CONTROLLER}",
        periodics_of=periodics_of,
    )


def _boxed_spec(
    app: TaskRegistry, config: ClusterConfig, node: NodeConfig, pool: str
) -> BoxedSpec | None:
    """The boxed worker of ``pool`` on ``node``: the ``[[boxed]]`` table that
    serves it, or the Python reference worker for its ``boxed=True`` tasks.

    Raises:
        ConfigError: both, or more instances of the node than one.
    """
    declared = [spec for spec in config.boxed_specs(node, pools=True) if spec.pool == pool]
    modules = sorted(
        {
            task.fn.__module__
            for task in app.tasks.values()
            if task.pool == pool and task.boxed is True and task.fn.__module__ != "__main__"
        }
    )
    if not declared and not modules:
        return None
    where = f"{config.path}: node {node.name!r}, pool {pool!r}"
    if declared and modules:
        raise ConfigError(
            f"{where}: a [[boxed]] worker serves it and app {app.name!r} has boxed=True "
            "tasks in it: put those in another pool"
        )
    if node.instances > 1:
        raise ConfigError(
            f"{where}: a pool served by a boxed worker has one worker actor per node: set "
            "instances in its [[boxed]] table (processes), not the node's"
        )
    if declared:
        return declared[0]
    runs = app.pools.get(pool, {}).get("concurrency", 4)
    return BoxedSpec(
        pool,
        (sys.executable, "-m", "actorctl.tasks.worker._boxed", *modules),
        env={"ACTORCTL_BOXED_CONCURRENCY": str(runs)},
        concurrency=runs,
        pool=pool,
    )


def _worker_class(app: TaskRegistry, pool: str, boxed: BoxedSpec | None = None) -> type[TaskWorker]:
    """A TaskWorker class with the pool's settings (concurrency, mailbox, threads);
    a pool only a boxed worker serves needs none of the app's: it runs as many
    tasks at once as the worker's processes take.

    Raises:
        ConfigError: the app defines no such pool.
    """
    settings: dict[str, Any] | None = app.pools.get(pool)
    if settings is None and boxed is not None:
        settings = {"concurrency": boxed.instances * (boxed.concurrency or 16)}
    if settings is None:
        raise ConfigError(
            f"app {app.name!r} defines no pool named {pool!r} (pools: {sorted(app.pools)})"
        )
    budget = settings.get("budget")
    most = settings.get("concurrency", 4)
    return type(
        "TaskWorker",
        (TaskWorker,),
        {
            "runs": budget.min if budget is not None else most,
            "concurrency": most + SETTLING,
            "budget_spec": budget,
            "mailbox_capacity": settings.get("mailbox_capacity", 100),
            "threads": bool(settings.get("threads", True)),
            "__module__": TaskWorker.__module__,
        },
    )
