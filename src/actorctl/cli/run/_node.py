"""``actorctl node run``: one node, hosting the actors a module names.

The runtime is imported inside the command, when it runs: ``node run --help``
and a usage error need none of it.
"""

from __future__ import annotations

import errno
import functools
import gc
import os
import re
import signal
import sys
import traceback
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Final

import asyncclick as click

from ..._errors import ConfigError
from ..output._errors import INTERRUPTED, fail, leaf
from ..output._logging import log_to
from ..reach._options import Security, etcd_option, etcd_settings, security_options

if TYPE_CHECKING:
    import trio

    from ...cluster import Node

__all__ = ["node"]


@click.group()
def node() -> None:
    """Run a node."""


@node.command("run")
@click.argument("target", metavar="[MODULE:OBJECT]", required=False)
@click.option(
    "--route",
    "routes",
    multiple=True,
    metavar="NAME=ADDRESS[,ADDRESS...]",
    help="Host a router NAME that forwards to these actor instances.",
)
@click.option("--listen", default="127.0.0.1:5672", show_default=True, metavar="HOST:PORT")
@click.option("--name", default=None, help="Node name (default: the object's name).")
@click.option(
    "--instances",
    default=1,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="Host this many instances of each actor: NAME, NAME-2, NAME-3, ...",
)
@click.option(
    "--grace",
    default=None,
    type=click.FloatRange(0, 86_400),
    metavar="SECONDS",
    help="Seconds running handlers get to finish at a stop (default: the node's "
    "shutdown_grace in --cluster, else 20).",
)
@click.option(
    "--log", "log_path", default="-", show_default=True, help="Log file ('-' for stdout)."
)
@click.option(
    "--cluster",
    "cluster_path",
    default=None,
    metavar="CLUSTER.TOML",
    help="The cluster this node (--name) is part of: an actors factory that "
    "MODULE:OBJECT names (a task app) makes the node's actors from it.",
)
@click.option(
    "--metrics",
    default=None,
    metavar="HOST:PORT",
    help="Serve Prometheus metrics on http://HOST:PORT/metrics (port 0: any free port; "
    "default: the node's [node.metrics] listen in --cluster, else nowhere).",
)
@etcd_option
@security_options
async def node_run(
    target: str | None,
    cluster_path: str | None,
    etcd: tuple[str, ...],
    metrics: str | None,
    routes: tuple[str, ...],
    instances: int,
    listen: str,
    name: str | None,
    grace: float | None,
    log_path: str,
    security: Security,
) -> None:
    """Run a node hosting the actors that MODULE:OBJECT names.

    OBJECT may be an Actor subclass or instance, a list of them, or a mapping of
    name to actor. The node stops warm on SIGINT or SIGTERM: it takes no new
    message, gives back what its actors hold and have not begun, and lets
    running handlers finish within --grace seconds; a second SIGINT or SIGTERM
    (or SIGQUIT) stops it cold at once (what runs is cancelled and given back)
    and exits 130. With --etcd (and --cluster), it registers in etcd once it listens, its
    pools' routers follow who else is registered, and it leaves etcd first
    when it stops.
    """
    import attrs
    import eliot
    import trio

    from ...cluster import DEV_PUBLIC_WARNING, NodeConfig, check_dev_listen, hosted_pools
    from ...cluster.config._config import CONTROLLER_KEY
    from ...ops import build_node, node_actors
    from ..reach._reach import read_cluster
    from ._host import LEAVE_TIMEOUT, membership

    try:
        log_to(log_path, sys.stdout)
    except OSError as exc:
        fail(
            f"--log {log_path}: cannot open it: {exc.strerror or exc} (give a file in a "
            "directory that exists, or - for stdout)"
        )
    try:
        host, port = _parse_listen(listen)
        node_name = name or f"node-{port}"
        if not _NODE_NAME.fullmatch(node_name):
            raise ConfigError(
                f"--name {node_name!r}: expected letters, digits, '.' and '-' (as a "
                "node's name in cluster.toml), e.g. --name worker-1"
            )
        node_config = NodeConfig(node_name, host, port, target, instances)
        config = None
        settings = None
        if cluster_path is not None:
            config = read_cluster(cluster_path)
            if config.dev and not config.dev_public:
                check_dev_listen(cluster_path, [("--listen", host, port)])
            if config.dev_public:
                click.echo(DEV_PUBLIC_WARNING, err=True)
            # What this node runs with: etcd with --etcd (`host up`) only; under
            # `cluster up` the file's [etcd] is not this node's (one host, and
            # the Controller grants the scheduler lease).
            settings = etcd_settings(config, etcd) if etcd else None
            config = attrs.evolve(config, etcd=settings)
            node_config = attrs.evolve(config.node(node_name), actors=target, instances=instances)
        parsed = []
        for route in routes:
            logical, sep, addresses = route.partition("=")
            if not sep or not logical or not addresses:
                raise ConfigError(f"--route {route!r}: expected NAME=ADDRESS[,ADDRESS...]")
            parsed.append((logical, addresses.split(",")))
        hosted = node_actors(node_config, config, routes=parsed)
        if etcd:
            if config is None:
                raise ConfigError("--etcd needs --cluster FILE: the cluster it registers in")
            pools = hosted_pools(target, node=node_config, cluster=config)
        # Its durable store is under its cluster's data/; without one, in memory.
        server = build_node(
            # It listens where --listen says (0.0.0.0, say, where the file
            # names the address others dial); the file's table says the rest.
            attrs.evolve(node_config, host=host, port=port),
            config,
            hosted,
            # In a cluster, its Controller's key acts for operators (as the
            # Foreman's in-process nodes have it: ClusterConfig.security).
            security=security.node_security(
                node_name,
                config.member_names if config else (),
                (CONTROLLER_KEY,) if config else (),
            ),
            metrics=metrics,
        )
    except ConfigError as exc:
        fail(str(exc))
    if grace is None:
        grace = node_config.shutdown_grace
    cold = False
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGQUIT) as signals:
        async with trio.open_nursery() as nursery:
            try:
                await nursery.start(_serve, server, nursery.cancel_scope)
            except* OSError as group:
                fail(_listen_error(listen, node_name, leaf(group)))
            except* Exception as group:  # an actor that cannot start, say
                # the whole story in the node's log; the one line on stderr
                first = leaf(group)
                eliot.log_message(
                    message_type="actorctl:node:start-failed",
                    node=node_name,
                    error=f"{type(first).__name__}: {first}",
                    traceback="".join(traceback.format_exception(group)),
                )
                fail(f"node {node_name} could not start: {type(first).__name__}: {first}")
            _tune_collector()
            left = trio.Event()
            member = trio.CancelScope()
            if settings is not None and config is not None:
                run = functools.partial(
                    membership, server, config, node_config, settings, pools, left
                )
                await nursery.start(_scoped, member, run)
            # Until the node has stopped (_serve ends the nursery): the first
            # signal stops it warm, the second cold; SIGQUIT cold at once (as
            # Celery's worker has them; two signals close together may reach
            # a process as one, SIGQUIT cannot be taken for the first).
            async for signum in signals:
                cold = server.stopping or signum == signal.SIGQUIT
                eliot.log_message(
                    message_type="actorctl:node:signal",
                    signal=signal.Signals(signum).name,
                    stop="cold" if cold else "warm",
                    grace=0.0 if cold else grace,
                )
                if cold:
                    server.stop(0)
                    continue
                if settings is not None:  # it leaves etcd first: routers stop sending
                    member.cancel(reason="the node stops")
                    with trio.move_on_after(LEAVE_TIMEOUT):
                        await left.wait()
                server.stop(grace)
    if cold:
        raise SystemExit(INTERRUPTED)


#: Container objects allocated (net) between two young-generation collections
#: in a node's process: Python's default (700) ran one every 60 tasks or so.
YOUNG_COLLECTION: Final = 10_000
#: Set to ``python`` in a node's environment, its process keeps Python's
#: collector as it is (no freeze, the default thresholds).
GC_VARIABLE: Final = "ACTORCTL_GC"


def _tune_collector(environ: Mapping[str, str] = os.environ) -> bool:
    """Once the node is up (its process is ours: the collector is the
    process's), collect once, then freeze what is left (what it made to
    start: modules, configuration, its actors: never scanned again) and
    collect the young generation after YOUNG_COLLECTION allocations, not
    700. A task leaves no reference cycle behind (bench/task_cost.py: no
    object freed by a collection), yet with the defaults the collector cost
    a worker node 5-10 µs per task, 35-70% of it in full collections of
    24-71 ms each (issue 30). The one collection first keeps start-up's
    garbage out of the frozen heap; an object frozen then is never freed by
    the collector should it later fall into a cycle of garbage (an actor
    replaced after a crash that referred to itself): bounded by what the
    node made to start. ``ACTORCTL_GC=python`` keeps Python's collector as
    it is. Returns whether it tuned it."""
    if environ.get(GC_VARIABLE, "").strip().lower() == "python":
        return False
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION, middle, old)
    return True


async def _serve(
    server: Node, owner: trio.CancelScope, *, task_status: trio.TaskStatus[Node]
) -> None:
    """Run the node; once it has stopped, end ``owner`` (what waits for signals)."""
    await server.serve(task_status=task_status)
    owner.cancel(reason="the node stopped")


async def _scoped(
    scope: trio.CancelScope,
    run: Callable[..., Awaitable[None]],
    *,
    task_status: trio.TaskStatus[None],
) -> None:
    """``run(task_status=...)`` inside ``scope``: cancelled alone, when its owner says."""
    with scope:
        await run(task_status=task_status)


_NODE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?")


def _parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(
            f"--listen {listen!r}: expected HOST:PORT with a port from 0 to 65535, "
            "e.g. 127.0.0.1:5672"
        )
    return host.strip("[]"), int(port)


def _listen_error(listen: str, node: str, exc: BaseException) -> str:
    why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return (
            f"node {node}: cannot listen on {listen}: port {listen.rpartition(':')[2]} is "
            "taken by another process (another node, or a cluster already running?): "
            "stop it or choose another port"
        )
    return f"node {node}: cannot listen on {listen}: {why}"
