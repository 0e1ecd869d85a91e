"""``actorctl cluster up FILE``: a whole cluster from one file, in the foreground."""

from __future__ import annotations

import functools
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncclick as click
import eliot
import trio

from .._errors import ActorctlError, AskTimeout, ConfigError
from ..cluster import (
    CLI_NAME,
    CONTROLLER,
    ClusterConfig,
    NodeDied,
    NodeState,
    ensure_dev_secrets,
    load_cluster,
    open_node,
    run_cluster,
)
from ..supervision import ChildFailedToStart, SupervisorGaveUp
from ._tree import render_tree

__all__ = ["cluster"]


@click.group()
def cluster() -> None:
    """Run a cluster described by a cluster.toml."""


@cluster.command("up")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--in-process", is_flag=True, help="Run every node in this one process (development)."
)
async def cluster_up(file: Path, in_process: bool) -> None:
    """Start every node FILE describes, supervised: a node that dies is restarted.

    Shows progress, then a table of the live cluster. Ctrl-C (or SIGTERM, or
    `actorctl cluster down FILE`) stops the nodes in reverse order. Logs go to
    logs/ beside FILE.
    """
    config = _prepare(file)
    click.echo(f"starting cluster {config.name!r}: {len(config.nodes)} nodes")
    stop = trio.Event()
    try:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                states = await nursery.start(
                    functools.partial(
                        run_cluster, config, _progress, stop=stop, in_process=in_process
                    )
                )
                click.echo(_table(_rows(config, states)))
                click.echo(f"cluster {config.name!r} ready")
                listening = trio.CancelScope()
                nursery.start_soon(_stop_on_signal, signals, stop, listening)
                await stop.wait()
                listening.cancel()
                click.echo("stopping: nodes in reverse order")
                # run_cluster sees `stop` too: it stops the nodes, then the
                # Controller's node gracefully (so `cluster down` gets its answer)
    except* (SupervisorGaveUp, NodeDied, ChildFailedToStart) as group:
        click.echo(f"error: {_first(group)}", err=True)
        raise SystemExit(1) from None
    click.echo(f"cluster {config.name!r} stopped")


async def _stop_on_signal(
    signals: AsyncIterator[int], stop: trio.Event, scope: trio.CancelScope
) -> None:
    with scope:
        async for _ in signals:
            stop.set()
            return


@cluster.command("status")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--timeout", default=10.0, show_default=True, help="Seconds to wait.")
async def cluster_status(file: Path, timeout: float) -> None:
    """Print the live cluster FILE names as its Controller sees it: one
    supervision tree, Controller -> nodes -> supervisors -> actors (and boxed
    processes), each with its state, restarts and (actors) mailbox depth."""
    click.echo(render_tree(await ask_controller(file, "tree", timeout)))


@cluster.command("down")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--timeout", default=10.0, show_default=True, help="Seconds to wait.")
async def cluster_down(file: Path, timeout: float) -> None:
    """Stop the cluster FILE names (from another terminal than `cluster up`)."""
    click.echo(await ask_controller(file, "down", timeout))


async def ask_controller(file: Path, handler: str, timeout: float, *args: Any) -> Any:
    try:
        config = load_cluster(file)
        options = config.security(CLI_NAME)
    except ConfigError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
    host, port = config.controller
    address = f"{config.scheme}://{host}:{port}/{CONTROLLER}"
    try:
        async with open_node(CLI_NAME, host=None, grace=0.5, **options) as client:
            return await client.ref(address).with_options(timeout=timeout).ask(handler, *args)
    except* AskTimeout:
        click.echo(
            f"error: no answer from the controller at {address} within {timeout:g} s "
            "(is the cluster up?)",
            err=True,
        )
        raise SystemExit(1) from None
    except* ActorctlError as group:
        click.echo(f"error: {_first(group)}", err=True)
        raise SystemExit(1) from None


def _rows(config: ClusterConfig, states: dict[str, NodeState]) -> list[dict[str, Any]]:
    return [
        {
            "node": node.name,
            "pid": states[node.name].pid,
            "address": states[node.name].address,
            "actors": states[node.name].actors,
            "state": states[node.name].state,
            "restarts": states[node.name].restarts,
        }
        for node in config.nodes
    ]


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


def _table(rows: list[dict[str, Any]]) -> str:
    header = ("NODE", "PID", "ADDRESS", "ACTORS", "STATE", "RESTARTS", "MAILBOXES")
    lines = [header]
    for row in rows:
        mailboxes = row.get("mailboxes") or {}
        depth = ",".join(
            f"{name}:{stats['depth']}/{stats['capacity']}"
            for name, stats in mailboxes.items()
            if isinstance(stats, dict)
        )
        lines.append(
            (
                str(row["node"]),
                str(row["pid"] or "-"),
                str(row["address"] or "-"),
                ",".join(a for a in row["actors"] if a != "_node") or "-",
                str(row["state"]),
                str(row["restarts"]),
                depth or ("-" if "error" not in mailboxes else "no answer"),
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error
