"""``actorctl cluster controller FILE``: the Controller of a cluster whose nodes
something else runs (systemd units, a Kubernetes StatefulSet)."""

from __future__ import annotations

import functools
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncclick as click
import attrs
import trio

from ..._errors import ConfigError
from ...cluster import DEV_PUBLIC_WARNING, ClusterConfig, check_dev_listen
from ...cluster._http import parse_listen
from ...ops import CONTROLLER, NodeState, ensure_dev_secrets, run_controller
from ..output._errors import INTERRUPTED, fail
from ..output._logging import log_to
from ..reach._reach import first_error, read_cluster
from ._node_rows import node_rows, node_table

__all__ = ["cluster_controller"]


@click.command("controller")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--listen",
    default=None,
    metavar="HOST:PORT",
    help="Where its inbox listens (default: the file's cluster.controller; in a "
    "container, 0.0.0.0 and that port, behind a Service the file's controller names).",
)
@click.option(
    "--web",
    default=None,
    metavar="HOST:PORT",
    help="Where it serves its web page and the aggregate /metrics (default: the "
    "file's cluster.web, else a free port on 127.0.0.1).",
)
@click.option(
    "--lost-after",
    default=5.0,
    show_default=True,
    type=click.FloatRange(min=0.1),
    help="Seconds a node's connection may stay down before the node counts as down.",
)
@click.option(
    "--log",
    "log_path",
    default=None,
    metavar="FILE",
    help="Its log (default: logs/cluster.log beside FILE, or the journal under "
    "systemd; '-': stderr).",
)
async def cluster_controller(
    file: Path, listen: str | None, web: str | None, lost_after: float, log_path: str | None
) -> None:
    """Run the Controller of the cluster FILE describes without starting its nodes.

    Something else runs them (systemd units, a Kubernetes StatefulSet, `actorctl
    node run --cluster FILE`): the Controller asks each node who it is, watches
    it, and asks again (with a growing backoff) once it is lost; a node that
    comes back as a new process counts a restart. Everything else it serves is
    as under `cluster up` (`cluster status`, `control`, `inspect`,
    `deadletters`, the scheduler lease, the web page). Ready (and READY=1 under
    systemd, Type=notify) once each node has been asked once. Ctrl-C or SIGTERM
    stops it; the nodes go on.
    """
    config, inbox, page = _prepare(file, listen, web, log_path)
    click.echo(
        f"controller of cluster {config.name!r}: {len(config.nodes)} nodes, run elsewhere, "
        f"inbox at {config.scheme}://{inbox[0]}:{inbox[1]}/{CONTROLLER}"
    )
    pages: list[str] = []
    stop = trio.Event()
    starting, watching = trio.CancelScope(), trio.CancelScope()

    async def on_signal(signals: AsyncIterator[int]) -> None:
        with watching:
            async for _ in signals:
                stop.set()
                starting.cancel()  # while it asks its nodes the first time
                return

    try:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(on_signal, signals)
                with starting:
                    states = await nursery.start(
                        functools.partial(
                            run_controller,
                            config,
                            _progress,
                            stop=stop,
                            listen=inbox,
                            lost_after=lost_after,
                            web=page,
                            on_web=pages.append,
                        )
                    )
                if not starting.cancelled_caught:
                    click.echo(node_table(node_rows(config, states)))
                    for url in pages:
                        click.echo(f"web page: {url} (metrics of every node: {url}metrics)")
                    click.echo(f"cluster {config.name!r} ready")
                    sys.stdout.flush()
                    await stop.wait()
                watching.cancel()
    except* OSError as group:  # its port, taken
        fail(
            f"{config.path}: the controller cannot listen on {inbox[0]}:{inbox[1]} "
            f"(--listen, else key cluster.controller): {first_error(group)}: stop what holds "
            "it, or choose another port",
            1,
        )
    if starting.cancelled_caught:
        click.echo(f"interrupted: the controller of {config.name!r} was starting", err=True)
        raise SystemExit(INTERRUPTED)
    click.echo(f"controller of cluster {config.name!r} stopped (its nodes go on)")


def _prepare(
    file: Path, listen: str | None, web: str | None, log_path: str | None
) -> tuple[ClusterConfig, tuple[str, int], tuple[str, int]]:
    """The cluster file, where the inbox and the page listen; logs set up."""
    try:
        config = read_cluster(file)
        inbox = parse_listen(listen, "--listen") if listen is not None else config.controller
        page = parse_listen(web, "--web") if web is not None else ("127.0.0.1", 0)
        if web is not None:
            config = _with_web(config, page)
        if config.dev and not config.dev_public:
            check_dev_listen(file, [("--listen", *inbox)] + ([("--web", *page)] if web else []))
        if config.dev_public:
            click.echo(DEV_PUBLIC_WARNING, err=True)
        if config.dev:  # the cluster up of development mode makes what is missing too
            for line in ensure_dev_secrets(config):
                click.echo(f"made {line}")
        config.security(CONTROLLER)  # its own certificate and key are there
    except ConfigError as exc:
        fail(f"{exc}", 2)
    if log_path is None:
        (config.root / "logs").mkdir(exist_ok=True)
        log_to(str(config.root / "logs" / "cluster.log"), sys.stderr, journal=True)
    else:
        log_to(log_path, sys.stderr)
    return config, inbox, page


def _with_web(config: ClusterConfig, page: tuple[str, int]) -> ClusterConfig:
    """``--web`` wins over the file's ``cluster.web``."""
    return attrs.evolve(config, web=page)


def _progress(state: NodeState) -> None:
    if state.state == "running":
        again = f" (restart {state.restarts})" if state.restarts else ""
        click.echo(f"node {state.name} running at {state.address} (pid {state.pid}){again}")
    elif state.state == "down":
        click.echo(f"node {state.name} down: {state.reason}", err=True)
    sys.stdout.flush()
