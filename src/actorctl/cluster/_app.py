"""The task app connected to a cluster: ``App``, its directory and its actors.

``App`` is the Celery-style app object. ``with app.connect("cluster.toml"):``
starts a small client node (in a thread of its own, for plain code; ``async with
app.aconnect(...)`` runs it in the caller's trio run) that sends tasks and
events into the cluster and hosts the ``_results`` actor their results come
back to. On the cluster's side, :func:`cluster_task_actors` is what a node
hosts for the app: the workers of its pools, and on the services node the
pools' routers, the scheduler, the event hub and the chord barrier.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Final, final

import trio

from .._errors import ActorctlError, ConfigError
from ..actors import Actor
from ..actors._results import ResultRegistry
from ..actors._tasks import CHORDS, EVENTS, SCHEDULER, Directory, TaskApp, TaskClient
from ..actors._worker import ResultsActor, task_actors
from ._config import ClusterConfig, NodeConfig, load_cluster
from ._hosting import load_target
from ._node import open_node
from ._router import Router
from ._scheduler import Scheduler

__all__ = ["App", "cluster_directory", "cluster_task_actors"]

CLIENT_NAME: Final = "cli"
CONNECT_TIMEOUT: Final = 30.0


class PoolRouter(Router):
    """A task pool's router: tasks run as long as they run (a worker settles a
    task once it has run it), so it holds many at once and re-routes one only
    when its worker refuses it or its node is gone, not after a few seconds."""

    mailbox_capacity: ClassVar[int] = 1000
    concurrency: ClassVar[int] = 1000


TASK_ATTEMPT_TIMEOUT: Final = 24 * 3600.0


def cluster_directory(config: ClusterConfig) -> Directory:
    """Where the cluster's pools and services are: a pool is reached through
    its router on the services node, or (with no services node) at its one
    worker.

    Raises:
        ConfigError: a pool with several workers and no services node to route.
    """
    services = next((n for n in config.nodes if n.services), None)
    nodes: dict[str, list[str]] = {}
    instances: dict[str, list[str]] = {}
    for node in config.nodes:
        for pool in node.pools:
            nodes.setdefault(pool, []).append(config.url(node))
            instances.setdefault(pool, []).extend(
                f"{config.url(node)}/{pool if copy == 1 else f'{pool}-{copy}'}"
                for copy in range(1, node.instances + 1)
            )
    addresses: dict[str, str] = {}
    for pool, where in instances.items():
        if services is not None:
            addresses[pool] = f"{config.url(services)}/{pool}"
        elif len(where) == 1:
            addresses[pool] = where[0]
        else:
            raise ConfigError(
                f"{config.path}: pool {pool!r} has {len(where)} workers and no node has "
                "services = true to route between them"
            )
    for name, route_node in ((n, r) for r in config.nodes for n, _ in r.routes):
        addresses.setdefault(name, f"{config.url(route_node)}/{name}")
    if services is not None:
        url = config.url(services)
        addresses.update(
            {EVENTS: f"{url}/events", SCHEDULER: f"{url}/scheduler", CHORDS: f"{url}/chords"}
        )
    return Directory(addresses, {pool: tuple(where) for pool, where in nodes.items()})


def _apps(config: ClusterConfig) -> list[TaskApp]:
    apps = []
    for target in config.apps:
        app = load_target(target)
        if not isinstance(app, TaskApp):
            raise ConfigError(
                f"{config.path}: cluster.app {target} is a {type(app).__name__}, "
                "not an actorctl.App"
            )
        apps.append(app)
    return apps


def cluster_task_actors(config: ClusterConfig, node: NodeConfig) -> dict[str, Actor]:
    """The task actors ``node`` hosts: its pools' workers; on the services node,
    a router per pool, the scheduler, the event hub and the chord barrier.

    Raises:
        ConfigError: a pool no app defines, or an app that cannot be loaded.
    """
    if not node.pools and not node.services:
        return {}
    directory = cluster_directory(config)
    apps = _apps(config)
    actors = task_actors(
        apps,
        directory,
        pools=list(node.pools),
        instances=node.instances,
        services=node.services,
    )
    if node.services:
        pools = {n.name: n.pools for n in config.nodes}
        for pool in sorted({p for ps in pools.values() for p in ps}):
            workers = [
                f"{config.url(n)}/{pool if copy == 1 else f'{pool}-{copy}'}"
                for n in config.nodes
                if pool in n.pools
                for copy in range(1, n.instances + 1)
            ]
            actors[pool] = PoolRouter(workers, attempt_timeout=TASK_ATTEMPT_TIMEOUT)
        actors[Scheduler.name or "scheduler"] = Scheduler(directory)
    return actors


class App(TaskApp):
    """A task app: ``@app.task``, ``@app.event``, and ``app.connect(...)``.

    Args:
        name: the app's name; a task's default name is ``NAME.FUNCTION``.
        default_pool: the pool tasks go to unless they name another.

    Example::

        app = App("tasks")

        @app.task
        def add(x, y):
            return x + y

        with app.connect("cluster.toml"):
            assert add.delay(1, 2).get(timeout=10) == 3
    """

    def connect(
        self,
        cluster: str | Path | ClusterConfig | Directory,
        *,
        name: str = CLIENT_NAME,
        **node_options: Any,
    ) -> Connection:
        """Connect for the duration of a ``with`` block, from plain (non-trio)
        code: a client node runs in a thread of its own.

        Args:
            cluster: a cluster.toml (its security, with the ``name`` member's
                certificate and key), or a Directory (then pass the node options:
                ``tls``/``keyring`` or ``insecure=True``).
            name: whose certificate and key to use.
            node_options: more ``Node`` arguments.
        """
        return Connection(self, cluster, name, node_options)

    @asynccontextmanager
    async def aconnect(
        self,
        cluster: str | Path | ClusterConfig | Directory,
        *,
        name: str = CLIENT_NAME,
        **node_options: Any,
    ) -> AsyncIterator[TaskClient]:
        """Connect for the duration of an ``async with`` block in trio code."""
        if isinstance(cluster, Directory):
            directory = cluster
            options = dict(node_options)
        else:
            config = cluster if isinstance(cluster, ClusterConfig) else load_cluster(cluster)
            directory = cluster_directory(config)
            options = {**config.security(name), **node_options}
        options.setdefault("host", "127.0.0.1")
        registry = ResultRegistry()
        async with open_node(name, {"_results": ResultsActor(registry)}, **options) as node:
            registry.bind(node.outbox)
            client = TaskClient(
                node.outbox,
                directory,
                results=registry,
                results_address=str(node.address_of("_results")),
            )
            previous = self.client
            self.attach(client)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(client.pump)
                    try:
                        yield client
                        with trio.move_on_after(CONNECT_TIMEOUT):
                            await client.drain()  # what plain code handed over goes out
                    finally:
                        nursery.cancel_scope.cancel()
                        registry.fail_all(f"the client node {name!r} disconnected first")
            finally:
                self.attach(previous)


@final
class Connection:
    """``app.connect(...)``: a client node in a thread of its own, for plain code."""

    def __init__(self, app: App, cluster: Any, name: str, options: dict[str, Any]) -> None:
        self._app = app
        self._cluster = cluster
        self._name = name
        self._options = options
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> TaskClient:
        self._thread = threading.Thread(target=self._main, name="actorctl-client", daemon=True)
        self._thread.start()
        if not self._ready.wait(CONNECT_TIMEOUT):
            raise ActorctlError(f"the client node did not start within {CONNECT_TIMEOUT:g} s")
        if self._error is not None:
            raise self._error
        client = self._app.client
        assert client is not None
        return client

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        alive = self._thread is not None and self._thread.is_alive()
        if alive and self._stop is not None and self._token is not None:
            with contextlib.suppress(trio.RunFinishedError):  # it ended meanwhile
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        if self._thread is not None:
            self._thread.join(CONNECT_TIMEOUT)

    def _main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:  # reported to the thread that connects
            self._error = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        async with self._app.aconnect(self._cluster, name=self._name, **self._options):
            self._stop = trio.Event()
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            await self._stop.wait()
