"""``actorctl cluster up FILE``: a whole cluster from one file, in the foreground."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import asyncclick as click
import eliot
import trio

from .._errors import ConfigError
from ..cluster import (
    ClusterConfig,
    Foreman,
    NodeDied,
    NodeState,
    ensure_dev_secrets,
    load_cluster,
)
from ..supervision import ChildFailedToStart, ChildSpec, Strategy, Supervisor, SupervisorGaveUp

__all__ = ["cluster"]


@click.group()
def cluster() -> None:
    """Run a cluster described by a cluster.toml."""


@cluster.command("up")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
async def cluster_up(file: Path) -> None:
    """Start every node FILE describes, supervised: a node that dies is restarted.

    Shows progress, then a table of the live cluster. Ctrl-C (or SIGTERM) stops
    the nodes in reverse order. Logs go to logs/ beside FILE.
    """
    config = _prepare(file)
    states = {node.name: NodeState(node.name) for node in config.nodes}
    supervisor = Supervisor(
        config.name,
        [
            ChildSpec(node.name, Foreman(config, node, states[node.name], _progress).run)
            for node in config.nodes
        ],
        strategy=Strategy.ONE_FOR_ONE,
        max_restarts=10,
        within=60.0,
    )
    click.echo(f"starting cluster {config.name!r}: {len(config.nodes)} nodes")
    try:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                await nursery.start(supervisor.run)
                click.echo(_table(config, states))
                click.echo(f"cluster {config.name!r} ready")
                async for _ in signals:
                    click.echo("stopping: nodes in reverse order")
                    nursery.cancel_scope.cancel()
                    break
    except* (SupervisorGaveUp, NodeDied, ChildFailedToStart) as group:
        click.echo(f"error: {_first(group)}", err=True)
        raise SystemExit(1) from None
    click.echo(f"cluster {config.name!r} stopped")


def _prepare(file: Path) -> ClusterConfig:
    """Read the file, make development secrets, send logs to logs/cluster.log."""
    try:
        config = load_cluster(file)
        made = ensure_dev_secrets(config)
    except ConfigError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
    for line in made:
        click.echo(f"made {line}")
    (config.root / "logs").mkdir(exist_ok=True)
    eliot.to_file(open(config.root / "logs" / "cluster.log", "a", encoding="utf-8"))  # noqa: SIM115
    return config


def _progress(state: NodeState) -> None:
    if state.state == "running":
        again = f" (restart {state.restarts})" if state.restarts else ""
        click.echo(f"node {state.name} ready at {state.address} (pid {state.pid}){again}")
    elif state.state == "dead":
        click.echo(f"node {state.name} died: {state.reason}; restarting", err=True)
    elif state.state == "starting" and not state.restarts:
        click.echo(f"node {state.name} starting")
    sys.stdout.flush()


def _table(config: ClusterConfig, states: dict[str, NodeState]) -> str:
    rows = [("NODE", "PID", "ADDRESS", "ACTORS", "STATE", "RESTARTS")]
    for node in config.nodes:
        state = states[node.name]
        rows.append(
            (
                node.name,
                str(state.pid or "-"),
                state.address or "-",
                ",".join(state.actors) or "-",
                state.state,
                str(state.restarts),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows
    )


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error
