"""``actorctl cluster up FILE``: a whole cluster from one file, in the foreground."""

from __future__ import annotations

import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncclick as click
import attrs
import trio

from ..._errors import ConfigError, WireFormatError
from ...cluster import DEV_PUBLIC_WARNING, ClusterConfig
from ...ops import (
    DRAIN_TIMEOUT,
    NodeDied,
    NodeState,
    check_references,
    ensure_dev_secrets,
    hosts_tree,
    run_cluster,
    taken_ports,
)
from ...ops._reloader import ReloadReport
from ...supervision import ChildFailedToStart, SupervisorGaveUp
from ...supervision._status import ABSENT, TreeRow
from .._lazy import Lazy, LazyGroup
from ..output._errors import INTERRUPTED, fail
from ..output._logging import log_options, log_to
from ..output._table import render_tree
from ..reach._options import etcd_given, etcd_settings, etcd_to_reach
from ..reach._reach import (
    across_hosts,
    ask_cluster,
    ask_controller,
    controller_answers,
    down_across,
    first_error,
    load,
    reach_options,
    read_cluster,
    reload_across,
    request_controller,
)
from ._node_rows import node_rows, node_table

__all__ = ["cluster"]


@click.group(
    cls=LazyGroup,
    lazy={
        # Its module is imported only when it is used.
        "controller": Lazy(
            ".run._cluster_controller",
            "cluster_controller",
            "Run the Controller of the cluster FILE describes without starting its nodes.",
        ),
    },
)
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
    `actorctl cluster down FILE`) stops the nodes in reverse order, warm: each
    takes no new task, gives back those it holds and has not begun, and lets
    those running finish within its shutdown_grace. A second Ctrl-C (or
    SIGTERM) stops them cold at once (what runs is cancelled, and runs again
    at the next start) and exits 130. SIGHUP applies FILE again, changed (as
    `actorctl cluster reload FILE` does). Logs go to logs/ beside FILE.
    """
    config = await _prepare(file)
    click.echo(f"starting cluster {config.name!r}: {len(config.nodes)} nodes")
    pages: list[str] = []
    stop, cold = trio.Event(), trio.Event()
    starting, watching = trio.CancelScope(), trio.CancelScope()

    async def watch(signals: AsyncIterator[int], nursery: trio.Nursery) -> None:
        with watching:
            async for signum in signals:
                if signum == signal.SIGHUP:  # reload the file, as `cluster reload` does
                    if not stop.is_set():
                        nursery.start_soon(_hangup, config)
                    continue
                if stop.is_set():  # the second: a cold stop, now
                    if not cold.is_set():
                        click.echo(_COLD, err=True)
                        cold.set()
                    continue
                stop.set()
                starting.cancel()  # Ctrl-C while it starts: stop what started

    async def run(task_status: trio.TaskStatus[dict[str, NodeState]]) -> None:
        try:
            await run_cluster(
                config,
                _progress,
                stop=stop,
                cold=cold,
                in_process=in_process,
                # on by default here: loopback, free ports (docs/operations.md)
                metrics="127.0.0.1:0",
                web=("127.0.0.1", 0),
                on_web=pages.append,
                task_status=task_status,
            )
        finally:
            watching.cancel()  # stopped: a signal from now on is no one's

    try:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch, signals, nursery)
                with starting:
                    states = await nursery.start(run)
                if not starting.cancelled_caught:
                    click.echo(node_table(node_rows(config, states)))
                    for page in pages:
                        click.echo(f"web page: {page} (metrics of every node: {page}metrics)")
                    click.echo(f"cluster {config.name!r} ready")
                    await stop.wait()
                    click.echo(_WARM)
                    # run_cluster sees `stop` too: it stops the nodes, then the
                    # Controller's node gracefully (so `cluster down` gets its answer)
    except* (SupervisorGaveUp, NodeDied, ChildFailedToStart) as group:
        fail(f"{first_error(group)}", 1)
    except* OSError as group:  # the Controller's port, taken since it was checked
        host, port = config.controller
        fail(
            f"{config.path}: the controller cannot listen on {host}:{port} "
            f"(key cluster.controller): {first_error(group)}: stop what holds it, or choose "
            "another port",
            1,
        )
    if starting.cancelled_caught:
        click.echo(
            f"interrupted: cluster {config.name!r} was starting; what had started is stopped",
            err=True,
        )
        raise SystemExit(INTERRUPTED)
    if cold.is_set():
        click.echo(f"interrupted: cluster {config.name!r} stopped cold", err=True)
        raise SystemExit(INTERRUPTED)
    click.echo(f"cluster {config.name!r} stopped")


#: What `cluster up` and `host up` say when a stop begins, and at a second Ctrl-C.
_WARM = (
    "stopping: nodes in reverse order, each within its shutdown_grace "
    "(Ctrl-C again to stop them now)"
)
_COLD = (
    "stopping now (cold): running tasks are cancelled, and run again at the next start "
    "or on another node"
)


@cluster.command("status")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--pid",
    "only_pid",
    is_flag=True,
    help="Print only the process id of the Controller (`cluster up`): kill -HUP reloads FILE.",
)
@reach_options
@log_options
async def cluster_status(file: Path, only_pid: bool, timeout: float) -> None:
    """Print the live cluster FILE names as its Controller sees it: one
    supervision tree, Controller -> nodes -> supervisors -> actors (and boxed
    processes), each with its state, restarts and (actors) mailbox depth.

    A cluster that spans hosts (its nodes say host = ..., and [etcd] or --etcd
    says where etcd is) and that no Controller runs (`host up` on each host)
    is shown as etcd and its nodes say it is: each host, its nodes (registered
    or not, each asked for its own tree), and who holds the scheduler role."""
    said: TreeRow | dict[str, Any] = await ask_cluster(file, timeout, ("tree",), hosts_tree)
    try:  # the Controller's answer comes over the wire
        tree = said if isinstance(said, TreeRow) else TreeRow.from_wire(said, "its answer")
    except WireFormatError as exc:
        fail(f"{file}: the Controller's tree: {exc}", 1)
    if not only_pid:
        click.echo(render_tree(tree))
    elif isinstance(tree.pid, int) and tree.pid:
        click.echo(tree.pid)
    else:  # across hosts: etcd answered, no Controller runs the cluster
        cluster = tree.cluster if tree.cluster is not ABSENT else None
        fail(
            f"{file}: no Controller runs cluster {cluster!r} (its nodes run under "
            "`host up` on each host): there is no one process to signal",
            1,
        )


@cluster.command("down")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@reach_options
@log_options
async def cluster_down(file: Path, timeout: float) -> None:
    """Stop the cluster FILE names (from another terminal than `cluster up`).

    A cluster that spans hosts that no Controller runs (`host up` on each
    host) is asked through etcd: every `host up` stops its nodes, and this
    waits until none is registered."""
    config = load(file, member=False)  # across hosts, down asks etcd only
    if await across_hosts(config):
        click.echo(await down_across(config, timeout))
    else:
        click.echo(await ask_controller(file, "down", timeout))


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
@click.option(
    "--receipt-timeout",
    type=float,
    default=None,
    help="Across hosts: seconds to wait for a host to say it received the request "
    "before it is not waited for [default: --timeout].",
)
@etcd_to_reach
@log_options
async def cluster_reload(
    file: Path, dry_run: bool, drain_timeout: float, timeout: float, receipt_timeout: float | None
) -> None:
    """Apply FILE, changed, to its running cluster without losing work.

    FILE is checked first as `cluster up` checks it (a wrong file is refused,
    and the cluster runs on unchanged), then the changes are printed and
    applied: nodes added are started; nodes removed, and nodes whose table
    changed, are drained (they finish what they hold, while routers send
    their work elsewhere) and then stopped or restarted; routers, pools,
    periodic schedules and [[task]] limits follow in place. Keys and
    certificates rotated on disk are read again. SIGHUP to `cluster up` does
    the same.

    A cluster that spans hosts (`host up` on each, etcd, no Controller) is
    asked through etcd, from any host: the file is sent signed with the CLI's
    key, which must be an operator's; every `host up` checks the signature,
    then checks and applies the file to its own nodes, and writes it over its
    copy. This waits (--timeout) for every host that has a node registered in
    etcd (with --receipt-timeout, no longer for one whose `host up` has not
    said it received the request by then: stopped, say), prints a table
    (changed, unchanged, refused and why, did not answer), and exits 1 unless
    every host of the file answered and none refused.
    """
    try:
        # Checked here, in a fresh process, as `cluster up` checks it: the
        # controller (or each host) need not start one to check it again.
        config = read_cluster(file)
        if etcd_given():
            config = attrs.evolve(config, etcd=etcd_settings(config, etcd_given()))
        across = await across_hosts(config)
        preflight(config, one_host=not across)
    except ConfigError as exc:
        fail(f"reload refused, the cluster runs on unchanged: {exc}", 2)
    if across:
        await reload_across(
            config,
            dry_run=dry_run,
            drain_timeout=drain_timeout,
            timeout=timeout,
            receipt_timeout=receipt_timeout,
        )
        return
    path = str(config.path)
    said = await ask_controller(file, "reload", timeout, path, dry_run, drain_timeout, True)
    try:
        report = ReloadReport.from_wire(said, "the Controller's answer to 'reload'")
    except WireFormatError as exc:
        fail(f"{exc}", 1)
    click.echo("\n".join(_report(report, dry_run)))
    if report.warnings:
        raise SystemExit(1)


@cluster.command("check")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
async def cluster_check(file: Path) -> None:
    """Check FILE and everything it names (modules, apps, pools, routers'
    instances, schedules, sources) as `cluster up` would (or `host up`, for a
    file whose nodes name their hosts, with [etcd]), starting nothing."""
    try:
        config = read_cluster(file)
        preflight(config)
    except ConfigError as exc:
        fail(f"{exc}", 2)
    click.echo(f"{config.path}: cluster {config.name!r} is well formed ({len(config.nodes)} nodes)")


def _report(report: ReloadReport, dry_run: bool) -> list[str]:
    lines = [f"{'would change' if dry_run else 'changes'} ({report.file}):"]
    lines += [f"  {line}" for line in report.plan]
    if not dry_run:
        lines += ["applied:", *(f"  {line}" for line in report.applied or ["nothing"])]
        lines += [f"warning: {line}" for line in report.warnings or ()]
    return lines


async def _hangup(config: ClusterConfig) -> None:
    """SIGHUP to `cluster up`: reload its file, and say what changed (or why not)."""
    click.echo(f"SIGHUP: reloading {config.path}")
    try:
        said = await request_controller(config, "reload", 600.0, str(config.path))
        report = ReloadReport.from_wire(said, "the Controller's answer to 'reload'")
    except Exception as exc:  # refused or failed: said, and the cluster runs on
        click.echo(f"reload: {first_error(exc) if isinstance(exc, BaseExceptionGroup) else exc}")
        return
    click.echo("\n".join(_report(report, dry_run=False)))
    sys.stdout.flush()


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
        config = read_cluster(file)
        preflight(config, one_host=True)
        made = ensure_dev_secrets(config)
    except ConfigError as exc:
        fail(f"{exc}", 2)
    for line in made:
        click.echo(f"made {line}")
    if config.dev_public:
        click.echo(DEV_PUBLIC_WARNING, err=True)
    try:
        taken = taken_ports(config)
    except ConfigError as exc:
        fail(str(exc), 2)
    if taken:
        who, host, port = taken[0]
        running = who == "the controller" and await controller_answers(config)
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
