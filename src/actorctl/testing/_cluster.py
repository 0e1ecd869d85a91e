"""An in-process cluster of real nodes for an app's tests: :func:`open_cluster`.

It writes a cluster.toml for the app (a services node, and worker nodes
hosting its pools, on free ports of 127.0.0.1), runs each node in the
caller's trio run (real sockets, real AMQP 1.0, signed messages over mutual
TLS when ``secure``), and connects the app to it for the block
(``app.aconnect``), so that ``await task.adelay()`` and ``await result.aget()``
work in the test. docs/testing.md shows it in use, and what works under trio's
autojump clock.
"""

from __future__ import annotations

import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, Final, TypeVar, final

import trio
import trio.testing

from .._errors import ConfigError
from ..cluster import ClusterConfig, Node, load_cluster, node_records, open_node
from ..ops import CONTROLLER, Controller, build_node, ensure_dev_secrets, node_actors
from ..tasks import App, PoolRouter, Scheduler, TaskClient, TaskWorker, cluster_app
from ._idle import busy_parts, wait_idle

__all__ = ["SERVICES", "TestCluster", "open_cluster", "trio_clock"]

A = TypeVar("A")

#: The name of the services node (routers, scheduler, event hub, chord barrier, beat).
SERVICES: Final = "services"
#: Seconds a node waits for a peer under the autojump clock (see docs/testing.md).
AUTOJUMP_CONNECT_TIMEOUT: Final = 3600.0


def trio_clock() -> Callable[[], float]:
    """A wall clock (seconds since the epoch) that moves with trio's clock:
    now, plus the trio time since this call. Nodes given it as ``clock=``
    stamp and check message times (countdowns, expiry, the scheduler's timer)
    in step with the autojump clock. Call it inside the trio run."""
    start_wall, start_trio = time.time(), trio.current_time()
    return lambda: start_wall + (trio.current_time() - start_trio)


@final
class TestCluster:
    """A running in-process cluster (made by :func:`open_cluster`).

    Attributes:
        config: its cluster.toml, read back.
        nodes: each node by name (``services``, ``w1``, ...).
        actors: the actors each node hosts, by node and actor name.
        client: the client the app sends through in the block (None with
            ``connect=False``).
    """

    __test__ = False  # a helper, not a pytest test class

    def __init__(
        self,
        config: ClusterConfig,
        nodes: Mapping[str, Node],
        actors: Mapping[str, Mapping[str, Any]],
    ) -> None:
        self.config = config
        self.nodes = dict(nodes)
        self.actors = {name: dict(hosted) for name, hosted in actors.items()}
        self.client: TaskClient | None = None

    @property
    def path(self) -> Path:
        """Its cluster.toml (``app.connect(cluster.path)`` from a thread works too)."""
        return self.config.path

    @property
    def services(self) -> Node:
        return self.nodes[SERVICES]

    def router(self, pool: str) -> PoolRouter:
        """The router of ``pool`` on the services node."""
        return _of(PoolRouter, self.actors[SERVICES].get(pool), f"router {pool!r}")

    def worker(self, node: str, pool: str) -> TaskWorker:
        """The worker of ``pool`` on ``node`` (its first instance)."""
        return _of(TaskWorker, self.actors.get(node, {}).get(pool), f"worker {pool!r} on {node!r}")

    def workers(self, pool: str) -> list[TaskWorker]:
        """Every worker of ``pool``, on every node, every instance."""
        return [
            actor
            for hosted in self.actors.values()
            for name, actor in hosted.items()
            if isinstance(actor, TaskWorker) and name.partition("-")[0] == pool
        ]

    @property
    def scheduler(self) -> Scheduler:
        found = [a for a in self.actors[SERVICES].values() if isinstance(a, Scheduler)]
        return _of(Scheduler, found[0] if found else None, "scheduler")

    def busy(self) -> list[str]:
        """What holds a task now (empty: idle), e.g. ``"w1/orders: 2 unsettled"``."""
        return [what for what, _ in busy_parts(self.nodes.values(), self.client)]

    async def wait_idle(self, timeout: float | None = 30.0) -> None:
        """Wait until nothing holds a task: every worker idle, every backlog
        empty, nothing held by a router or the scheduler, every result the
        client waits for in (``_idle.py``). Event-driven: nothing polls.

        Raises:
            ActorctlError: not idle within ``timeout`` seconds of trio's
                clock, naming what is still busy.
        """
        await wait_idle(self.nodes.values, self.client, timeout)


def _of(cls: type[A], actor: object, what: str) -> A:
    if not isinstance(actor, cls):
        raise ConfigError(f"the cluster has no {what}")
    return actor


@asynccontextmanager
async def open_cluster(
    app: App,
    *,
    workers: int | Mapping[str, Sequence[str]] = 1,
    instances: int = 1,
    secure: bool = False,
    directory: Path | str | None = None,
    connect: bool = True,
    clock: Callable[[], float] | None = None,
    grace: float = 0.5,
    **node_options: Any,
) -> AsyncIterator[TestCluster]:
    """Run ``app`` on an in-process cluster of real nodes for the block.

    Args:
        app: the app (its pools are what the worker nodes host).
        workers: how many worker nodes (``w1``, ``w2``, ...) each hosting
            every pool of the app, or a mapping of node name to the pools it
            hosts (``{"w1": ["orders"], "w2": ["mail"]}``).
        instances: worker actors of each pool per node.
        secure: mutual TLS and signed messages, with a throwaway CA and keys
            made in ``directory`` (the cluster's dev mode); else plain TCP.
        directory: where cluster.toml (and the secrets) go; default a
            temporary directory removed afterwards.
        connect: connect the app for the block (``app.aconnect``).
        clock: the nodes' wall clock; default :func:`trio_clock` under a
            ``MockClock`` (the autojump clock), else ``time.time``.
        grace: seconds in-flight handlers get when the block ends.
        node_options: more ``Node`` arguments for every node (and the client).
    """
    with _directory(directory) as where:
        config = _write_config(app, where, workers, instances, secure)
        ensure_dev_secrets(config)
        options = _node_options(clock, node_options)
        nodes: dict[str, Node] = {}
        hosted: dict[str, dict[str, Any]] = {}
        done = trio.Event()
        async with trio.open_nursery() as nursery:
            if app.periodics:  # the beat fires under the Controller's scheduler lease
                await nursery.start(_lease_grantor, config, options, done)
            for spec in config.nodes:
                actors = node_actors(spec, config, actors=dict(app.actors_for(config, spec)))
                hosted[spec.name] = actors
                # Its own security and bounds, with the options given over them.
                own = {"security": config.security(spec.name), "limits": spec.bounds}
                node = build_node(spec, config, actors, **node_records({**own, **options}))
                nodes[spec.name] = await nursery.start(node.serve)
            cluster = TestCluster(config, nodes, hosted)
            try:
                async with AsyncExitStack() as stack:
                    if connect:
                        cluster.client = await stack.enter_async_context(
                            app.aconnect(config, **options)
                        )
                    yield cluster
            finally:
                for node in nodes.values():
                    node.stop(grace)
                done.set()


async def _lease_grantor(
    config: ClusterConfig,
    options: Mapping[str, Any],
    done: trio.Event,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """A Controller at the file's controller address, as ``cluster up`` runs
    one, for an app with periodic tasks, until ``done``: its services node's
    beat fires only under the Controller's scheduler lease
    (docs/scheduling.md). It starts and supervises no node here."""
    host, port = config.controller
    controller = Controller(config, {}, trio.Event())
    security = config.security(CONTROLLER)
    async with open_node(
        CONTROLLER, [controller], host=host, port=port, security=security, **options
    ):
        task_status.started()
        await done.wait()


def _node_options(clock: Callable[[], float] | None, given: Mapping[str, Any]) -> dict[str, Any]:
    """Every node's options: under the autojump clock, a wall clock that
    follows it and long connect timeouts (a jump must not time a peer out)."""
    options = dict(given)
    autojump = isinstance(trio.lowlevel.current_clock(), trio.testing.MockClock)
    if clock is None and autojump:
        clock = trio_clock()
    if clock is not None:
        options["clock"] = clock
    if autojump:
        options.setdefault("connect_timeout", AUTOJUMP_CONNECT_TIMEOUT)
    return options


@contextmanager
def _directory(given: Path | str | None) -> Iterator[Path]:
    """``given`` (made if missing), or a temporary directory removed afterwards."""
    if given is not None:
        Path(given).mkdir(parents=True, exist_ok=True)
        yield Path(given)
        return
    with tempfile.TemporaryDirectory(prefix="actorctl-testing-") as name:
        yield Path(name)


def _write_config(
    app: App,
    where: Path,
    workers: int | Mapping[str, Sequence[str]],
    instances: int,
    secure: bool,
) -> ClusterConfig:
    """Write the cluster's file for ``app`` in ``where`` and read it back.

    Raises:
        ConfigError: no worker node, or a pool the app does not define.
    """
    layout = (
        {f"w{n}": list(app.pools) for n in range(1, workers + 1)}
        if isinstance(workers, int)
        else {name: list(pools) for name, pools in workers.items()}
    )
    if not layout or not any(layout.values()):
        raise ConfigError(f"app {app.name!r}: give at least one worker node with a pool")
    unknown = sorted({p for pools in layout.values() for p in pools} - set(app.pools))
    if unknown:
        raise ConfigError(
            f"app {app.name!r} defines no pool {unknown} (pools: {sorted(app.pools)})"
        )
    target = _import_path(app)
    security = "dev = true\n" if secure else "insecure = true\n"
    text = f'[cluster]\nname = "{app.name}-test"\n{security}'
    text += f'controller = "127.0.0.1:{_free_port()}"\n'
    text += f'[[node]]\nname = "{SERVICES}"\nlisten = "127.0.0.1:{_free_port()}"\n'
    text += f'actors = "{target}"\nservices = true\ndurable = false\n'
    for name, pools in layout.items():
        listed = ", ".join(f'"{pool}"' for pool in pools)
        text += f'[[node]]\nname = "{name}"\nlisten = "127.0.0.1:{_free_port()}"\n'
        text += f'actors = "{target}"\npools = [{listed}]\ninstances = {instances}\n'
        text += "durable = false\n"
    path = where / "cluster.toml"
    path.write_text(text)
    return load_cluster(path, cluster_app())


def _import_path(app: App) -> str:
    """``MODULE:NAME`` of ``app`` (for the file: the nodes here are given the
    app itself), looked for in the modules of its tasks first."""
    modules = [sys.modules.get(t.fn.__module__) for t in app.tasks.values()]
    for module in [*modules, *list(sys.modules.values())]:
        for name, value in _attributes(module):
            if value is app:
                return f"{module.__name__}:{name}"  # type: ignore[union-attr]
    return "__main__:app"


def _attributes(module: object) -> Iterator[tuple[str, object]]:
    try:
        yield from vars(module).items()
    except TypeError:
        return


def _free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
