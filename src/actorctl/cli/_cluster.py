"""``actorctl cluster up FILE``: a whole cluster from one file, in the foreground."""

from __future__ import annotations

import functools
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import asyncclick as click
import attrs
import trio

from .._errors import ActorctlError, AskTimeout, ConfigError, PeerUnavailable
from ..cluster import (
    CLI_NAME,
    CONTROLLER,
    DRAIN_TIMEOUT,
    ClusterConfig,
    EtcdError,
    Node,
    NodeDied,
    NodeState,
    ask_down,
    check_references,
    ensure_dev_secrets,
    hosts_broadcast,
    load_cluster,
    open_node,
    run_cluster,
    taken_ports,
)
from ..supervision import ChildFailedToStart, SupervisorGaveUp
from ._errors import INTERRUPTED, fail
from ._etcd_status import etcd_option, etcd_settings, hosts_status
from ._logging import log_options, log_to
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

    Everything the file names is checked first (modules, objects, pools,
    routers' instances, free ports): nothing starts if something is wrong.
    Shows progress, then a table of the live cluster. Ctrl-C (or SIGTERM, or
    `actorctl cluster down FILE`) stops the nodes in reverse order; SIGHUP
    applies FILE again, changed (as `actorctl cluster reload FILE` does). Logs
    go to logs/ beside FILE.
    """
    config = await _prepare(file)
    click.echo(f"starting cluster {config.name!r}: {len(config.nodes)} nodes")
    pages: list[str] = []
    stop = trio.Event()
    starting, watching = trio.CancelScope(), trio.CancelScope()

    async def watch(signals: AsyncIterator[int], nursery: trio.Nursery) -> None:
        with watching:
            async for signum in signals:
                if signum == signal.SIGHUP:  # reload the file, as `cluster reload` does
                    nursery.start_soon(_hangup, config)
                    continue
                stop.set()
                starting.cancel()  # Ctrl-C while it starts: stop what started
                return

    try:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch, signals, nursery)
                with starting:
                    states = await nursery.start(
                        functools.partial(
                            run_cluster,
                            config,
                            _progress,
                            stop=stop,
                            in_process=in_process,
                            # on by default here: loopback, free ports (docs/operations.md)
                            metrics="127.0.0.1:0",
                            web=("127.0.0.1", 0),
                            on_web=pages.append,
                        )
                    )
                if starting.cancelled_caught:
                    watching.cancel()
                else:
                    click.echo(_table(_rows(config, states)))
                    for page in pages:
                        click.echo(f"web page: {page} (metrics of every node: {page}metrics)")
                    click.echo(f"cluster {config.name!r} ready")
                    await stop.wait()
                    watching.cancel()
                    click.echo("stopping: nodes in reverse order")
                    # run_cluster sees `stop` too: it stops the nodes, then the
                    # Controller's node gracefully (so `cluster down` gets its answer)
    except* (SupervisorGaveUp, NodeDied, ChildFailedToStart) as group:
        fail(f"{_first(group)}", 1)
    except* OSError as group:  # the Controller's port, taken since it was checked
        host, port = config.controller
        fail(
            f"{config.path}: the controller cannot listen on {host}:{port} "
            f"(key cluster.controller): {_first(group)}: stop what holds it, or choose "
            "another port",
            1,
        )
    if starting.cancelled_caught:
        click.echo(
            f"interrupted: cluster {config.name!r} was starting; what had started is stopped",
            err=True,
        )
        raise SystemExit(INTERRUPTED)
    click.echo(f"cluster {config.name!r} stopped")


@cluster.command("status")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--timeout", default=10.0, show_default=True, help="Seconds to wait.")
@etcd_option
@log_options
async def cluster_status(file: Path, timeout: float, etcd: tuple[str, ...]) -> None:
    """Print the live cluster FILE names as its Controller sees it: one
    supervision tree, Controller -> nodes -> supervisors -> actors (and boxed
    processes), each with its state, restarts and (actors) mailbox depth.

    A cluster that spans hosts (its nodes say host = ..., and [etcd] or --etcd
    says where etcd is) and that no Controller runs (`host up` on each host)
    is shown as etcd and its nodes say it is: each host, its nodes (registered
    or not, each asked for its own tree), and who holds the scheduler role."""
    try:
        config = load_cluster(file)
    except ConfigError as exc:
        fail(f"{exc}", 2)
    across = config.hosts and (etcd or config.etcd is not None)
    if across and not await _answers(config):
        try:
            settings = etcd_settings(config, etcd)
            async with _cli_node(config, connect_timeout=min(2.0, timeout)) as node:
                tree = await hosts_status(config, settings, node, timeout)
            click.echo(render_tree(tree))
        except* EtcdError as group:
            fail(f"cluster {config.name!r}: etcd does not answer: {_first(group)}", 1)
        except* ConfigError as group:
            fail(f"{_first(group)}", 2)
        return
    click.echo(render_tree(await ask_controller(file, "tree", timeout)))


@cluster.command("down")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--timeout", default=10.0, show_default=True, help="Seconds to wait.")
@log_options
async def cluster_down(file: Path, timeout: float) -> None:
    """Stop the cluster FILE names (from another terminal than `cluster up`).

    A cluster that spans hosts that no Controller runs (`host up` on each
    host) is asked through etcd: every `host up` stops its nodes, and this
    waits until none is registered."""
    try:
        config = load_cluster(file)
    except ConfigError as exc:
        fail(f"{exc}", 2)
    if not (config.hosts and config.etcd is not None) or await _answers(config):
        click.echo(await ask_controller(file, "down", timeout))
        return
    left: list[str] = []
    try:
        left = await ask_down(config, config.etcd.client(min(5.0, timeout)), timeout)
    except* EtcdError as group:
        fail(f"cluster {config.name!r}: etcd does not answer: {_first(group)}", 1)
    if left:
        fail(
            f"cluster {config.name!r}: down asked through etcd, and after {timeout:g} s "
            f"{', '.join(sorted(left))} still registered (their host up is not running, or "
            "cannot reach etcd: they leave when their lease ends; stop them on their host)",
            1,
        )
    click.echo(f"cluster {config.name!r} down: every host stopped its nodes")


@cluster.command("reload")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--dry-run", is_flag=True, help="Print what would change; change nothing.")
@click.option(
    "--drain-timeout",
    default=DRAIN_TIMEOUT,
    show_default=True,
    help="Seconds a node removed or restarted gets to finish what it holds.",
)
@click.option("--timeout", default=600.0, show_default=True, help="Seconds to wait for it all.")
@log_options
async def cluster_reload(file: Path, dry_run: bool, drain_timeout: float, timeout: float) -> None:
    """Apply FILE, changed, to its running cluster without losing work.

    FILE is checked first as `cluster up` checks it (a wrong file is refused,
    and the cluster runs on unchanged), then the changes are printed and
    applied: nodes added are started; nodes removed, and nodes whose table
    changed, are drained (they finish what they hold, while routers send
    their work elsewhere) and then stopped or restarted; routers, pools,
    periodic schedules and [[task]] limits follow in place. Keys and
    certificates rotated on disk are read again. SIGHUP to `cluster up` does
    the same.
    """
    try:
        # Checked here, in a fresh process, as `cluster up` checks it: the
        # controller need not start one to check it again.
        config = load_cluster(file)
        preflight(config, one_host=True)
    except ConfigError as exc:
        fail(f"reload refused, the cluster runs on unchanged: {exc}", 2)
    path = str(config.path)
    report = await ask_controller(file, "reload", timeout, path, dry_run, drain_timeout, True)
    click.echo("\n".join(_report(report, dry_run)))
    if report.get("warnings"):
        raise SystemExit(1)


@cluster.command("check")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
async def cluster_check(file: Path) -> None:
    """Check FILE and everything it names (modules, apps, pools, routers'
    instances, schedules, sources) as `cluster up` would (or `host up`, for a
    file whose nodes name their hosts, with [etcd]), starting nothing."""
    try:
        config = load_cluster(file)
        preflight(config)
    except ConfigError as exc:
        fail(f"{exc}", 2)
    click.echo(f"{config.path}: cluster {config.name!r} is well formed ({len(config.nodes)} nodes)")


def _report(report: dict[str, Any], dry_run: bool) -> list[str]:
    lines = [f"{'would change' if dry_run else 'changes'} ({report['file']}):"]
    lines += [f"  {line}" for line in report["plan"]]
    if not dry_run:
        lines += ["applied:", *(f"  {line}" for line in report["applied"] or ["nothing"])]
        lines += [f"warning: {line}" for line in report["warnings"]]
    return lines


async def _hangup(config: ClusterConfig) -> None:
    """SIGHUP to `cluster up`: reload its file, and say what changed (or why not)."""
    click.echo(f"SIGHUP: reloading {config.path}")
    try:
        report = await request_controller(config, "reload", 600.0, str(config.path))
    except Exception as exc:  # refused or failed: said, and the cluster runs on
        click.echo(f"reload: {_first(exc) if isinstance(exc, BaseExceptionGroup) else exc}")
        return
    click.echo("\n".join(_report(report, dry_run=False)))
    sys.stdout.flush()


async def request_controller(
    config: ClusterConfig, handler: str, timeout: float, *args: Any
) -> Any:
    """Ask the Controller of ``config`` ``handler``, as the ``cli`` member.

    Raises:
        ActorctlError: no answer, or its error.
    """
    host, port = config.controller
    address = f"{config.scheme}://{host}:{port}/{CONTROLLER}"
    # The Controller is local and answers at once when it runs: a refused
    # or failed connection is an error within a second, not at the timeout.
    async with _cli_node(config, connect_timeout=min(1.0, timeout)) as client:
        return await client.ref(address).with_options(timeout=timeout).ask(handler, *args)


def _cli_node(
    config: ClusterConfig, *, connect_timeout: float, grace: float = 0.5
) -> AbstractAsyncContextManager[Node]:
    """A node of the ``cli`` member that listens nowhere, to ask the cluster."""
    return open_node(
        CLI_NAME,
        host=None,
        grace=grace,
        connect_timeout=connect_timeout,
        **config.security(CLI_NAME),
    )


async def ask_controller(file: Path, handler: str, timeout: float, *args: Any) -> Any:
    try:
        config = load_cluster(file)
        config.security(CLI_NAME)
    except ConfigError as exc:
        fail(f"{exc}", 2)
    host, port = config.controller
    address = f"{config.scheme}://{host}:{port}/{CONTROLLER}"
    try:
        return await request_controller(config, handler, timeout, *args)
    except* AskTimeout:
        fail(
            f"no answer from the controller at {address} within {timeout:g} s (is the cluster up?)",
            1,
        )
    except* PeerUnavailable as group:
        fail(
            f"cluster {config.name!r} is not running, or not at {address}: "
            f"{_first(group)} (`actorctl cluster up {file}` starts it)",
            1,
        )
    except* ActorctlError as group:
        fail(f"{_first(group)}", 1)


async def broadcast(
    file: Path, timeout: float, actor: str, op: str, args: list[Any]
) -> dict[str, Any]:
    """``op`` (with ``args``) asked of ``actor`` on every running node that hosts
    one, through the Controller (``Controller.broadcast``); for a cluster that
    spans hosts that no Controller runs (`host up`), of every node registered
    in etcd, directly. Each node's answer, ``{"unanswered": why}`` for one that
    did not answer."""
    try:
        config = load_cluster(file)
    except ConfigError as exc:
        fail(f"{exc}", 2)
    if config.hosts and config.etcd is not None and not await _answers(config):
        found: dict[str, Any] = {}
        try:
            client = config.etcd.client(timeout)
            async with _cli_node(config, connect_timeout=min(2.0, timeout)) as node:
                within = max(0.5, timeout * 0.8)
                found = await hosts_broadcast(config, client, node.ref, actor, op, args, within)
        except* EtcdError as group:
            fail(f"cluster {config.name!r}: etcd does not answer: {_first(group)}", 1)
        except* ConfigError as group:
            fail(f"{_first(group)}", 2)
        return found
    answers: dict[str, Any] = await ask_controller(
        file, "broadcast", timeout, actor, op, args, timeout
    )
    return answers


def _rows(config: ClusterConfig, states: dict[str, NodeState]) -> list[dict[str, Any]]:
    return [
        {
            "node": node.name,
            "pid": states[node.name].pid,
            "address": states[node.name].address,
            "actors": states[node.name].actors,
            "state": states[node.name].state,
            "restarts": states[node.name].restarts,
            "metrics": states[node.name].metrics,
        }
        for node in config.nodes
    ]


def preflight(config: ClusterConfig, *, one_host: bool = False) -> None:
    """Check the file and what it names as its nodes will run it: under
    `cluster up` (``one_host``, or a file whose nodes name no host or that
    has no [etcd]) on this one host without etcd, whose [etcd] is `host up`'s;
    else across hosts, with etcd (several services nodes take turns there).

    Raises:
        ConfigError: naming the file, the key, and what exists.
    """
    across = not one_host and bool(config.hosts) and config.etcd is not None
    check_references(config if across else attrs.evolve(config, etcd=None))


async def _prepare(file: Path) -> ClusterConfig:
    """Read and check the file and everything it names (nothing has started
    yet), make development secrets, send logs to logs/cluster.log."""
    try:
        config = load_cluster(file)
        preflight(config, one_host=True)
        made = ensure_dev_secrets(config)
    except ConfigError as exc:
        fail(f"{exc}", 2)
    for line in made:
        click.echo(f"made {line}")
    try:
        taken = taken_ports(config)
    except ConfigError as exc:
        fail(str(exc), 2)
    if taken:
        who, host, port = taken[0]
        running = who == "the controller" and await _answers(config)
        why = (
            f"cluster {config.name!r} is already running (its controller answers there): "
            f"`actorctl cluster status {file}` shows it, `actorctl cluster down {file}` "
            "stops it"
            if running
            else "another process holds it: stop that process, or give "
            f"{'cluster.controller' if who == 'the controller' else who} another port"
        )
        fail(f"{config.path}: port {port} of {who} ({host}:{port}) is taken: {why}", 1)
    (config.root / "logs").mkdir(exist_ok=True)
    # Under systemd (Type=notify) its own log goes to the journal; the nodes'
    # to their files (`actorctl logs --task` reads them).
    log_to(str(config.root / "logs" / "cluster.log"), sys.stderr, journal=True)
    return config


#: What _answers found, by cluster file: a command that asks twice asks once.
_ANSWERED: dict[Path, bool] = {}


async def _answers(config: ClusterConfig) -> bool:
    """Whether a Controller of this cluster answers at its address."""
    if config.path in _ANSWERED:
        return _ANSWERED[config.path]
    host, port = config.controller
    try:
        async with _cli_node(config, connect_timeout=1.0, grace=0.1) as client:
            address = f"{config.scheme}://{host}:{port}/{CONTROLLER}"
            await client.ref(address).with_options(timeout=2.0).ask("status")
    except* ActorctlError:
        answered = False
    else:
        answered = True
    _ANSWERED[config.path] = answered
    return answered


def _progress(state: NodeState) -> None:
    if state.state == "running":
        again = f" (restart {state.restarts})" if state.restarts else ""
        click.echo(f"node {state.name} ready at {state.address} (pid {state.pid}){again}")
    elif state.state == "dead" and state.pid is not None:  # it ran: a start
        # that fails ends the cluster with its own error line instead
        click.echo(f"node {state.name} stopped: {state.reason}", err=True)
    elif state.state == "starting":
        again = f" again (restart {state.restarts})" if state.restarts else ""
        click.echo(f"node {state.name} starting{again}")
    sys.stdout.flush()


def _table(rows: list[dict[str, Any]]) -> str:
    header = ("NODE", "PID", "ADDRESS", "ACTORS", "STATE", "RESTARTS", "MAILBOXES", "METRICS")
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
                str(row.get("metrics") or "-"),
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
