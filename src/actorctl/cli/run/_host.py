"""``actorctl host up FILE --host NAME``: one host's nodes of a cluster that spans hosts.

Each host of such a cluster runs this (in a terminal, or under systemd with
``Type=notify``): it supervises the nodes whose ``host`` key names it, each
registered in etcd (the ``[etcd]`` table, or ``--etcd URL``), and stops them
on Ctrl-C or SIGTERM. A node run with ``--etcd`` registers itself once it
listens and follows the cluster's membership (:func:`membership`).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

import asyncclick as click
import attrs
import trio

from ..._errors import ConfigError
from ...cluster import (
    ClusterConfig,
    EtcdSettings,
    Node,
    NodeConfig,
    node_record,
    serve_membership,
)
from ...etcd import EtcdError, MembershipRefused
from ...ops import (
    NodeDied,
    NodeState,
    check_etcd,
    check_references,
    ensure_dev_secrets,
    host_nodes,
    run_host,
    write_host_bundle,
)
from ...supervision import ChildFailedToStart, SupervisorGaveUp
from ..output._errors import INTERRUPTED, fail, leaf
from ..output._logging import log_to
from ..reach._options import etcd_option, etcd_settings
from ..reach._reach import read_cluster
from ._cluster import _COLD, _WARM, _progress
from ._node_rows import node_rows, node_table

__all__ = ["etcd_option", "etcd_settings", "host", "membership"]

#: Seconds a node gives its deregistration at a stop before it stops anyway.
LEAVE_TIMEOUT = 5.0


@click.group()
def host() -> None:
    """Run one host's nodes of a cluster that spans hosts (etcd)."""


@host.command("up")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--host", "name", required=True, help="Which host this is (key host of [[node]]).")
@etcd_option
async def host_up(file: Path, name: str, etcd: tuple[str, ...]) -> None:
    """Start the nodes of FILE whose host is NAME, supervised, each registered
    in etcd: a node that dies is restarted, and leaves etcd's directory when its
    lease runs out; Ctrl-C (or SIGTERM) stops them, and they leave at once:
    warm, as `cluster up` stops its nodes (each within its shutdown_grace); a
    second Ctrl-C stops them cold at once, and exits 130.

    Logs go to logs/ beside FILE (this process's own to logs/host-NAME.log).
    """
    try:
        config = read_cluster(file)
        nodes = host_nodes(config, name)
        settings = etcd_settings(config, etcd)
        check_references(config)
        for node in nodes:  # secrets are made once and copied to each host
            config.security(node.name)
    except ConfigError as exc:
        fail(f"{exc}", 2)
    for warning in _more_than_its_own(config, nodes):
        click.echo(f"warning: {warning}", err=True)
    (config.root / "logs").mkdir(exist_ok=True)
    log_to(str(config.root / "logs" / f"host-{name}.log"), sys.stderr, journal=True)
    try:
        await check_etcd(config, settings, nodes)
    except ConfigError as exc:
        fail(f"{exc}", 1)
    click.echo(
        f"starting host {name!r} of cluster {config.name!r}: {len(nodes)} nodes, "
        f"etcd at {', '.join(settings.endpoints)}"
    )
    sys.stdout.flush()
    stop, cold = trio.Event(), trio.Event()
    watching = trio.CancelScope()

    async def run(task_status: trio.TaskStatus[dict[str, NodeState]]) -> None:
        try:
            await run_host(
                config, name, settings, _progress, stop=stop, cold=cold, task_status=task_status
            )
        finally:
            watching.cancel()  # stopped: a signal from now on is no one's

    try:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_watch, signals, stop, cold, watching)
                states = await nursery.start(run)
                mine = attrs.evolve(
                    config, nodes=tuple(n for n in config.nodes if n.name in states)
                )
                click.echo(node_table(node_rows(mine, states)))
                click.echo(f"host {name!r} ready")
                sys.stdout.flush()
                await stop.wait()
                click.echo(_WARM)
                sys.stdout.flush()
                # run_host sees `stop` too: it stops its nodes, warm, and returns
    except* (SupervisorGaveUp, NodeDied, ChildFailedToStart) as group:
        fail(f"{leaf(group)}", 1)
    if cold.is_set():
        click.echo(f"interrupted: host {name!r} stopped cold", err=True)
        raise SystemExit(INTERRUPTED)
    click.echo(f"host {name!r} stopped")


def _more_than_its_own(config: ClusterConfig, nodes: Sequence[NodeConfig]) -> list[str]:
    """Outside development mode, the secrets this host holds and needs not:
    the CA's private key, other nodes' private keys (docs/deploy.md)."""
    if config.dev or config.insecure:
        return []
    said = []
    if (config.certs / "ca.key").exists():
        said.append(
            f"{config.certs / 'ca.key'} is the cluster CA's private key: a host needs only "
            "its bundle (`actorctl host bundle`); keep the CA key off the hosts"
        )
    mine = {node.name for node in nodes}
    others = sorted(
        {path.name for path in (*config.certs.glob("*.key"), *config.keys.glob("*.key"))}
        - {f"{name}.key" for name in mine}
        - {"ca.key"}
    )
    if others:
        said.append(
            f"this host holds private keys it does not use ({', '.join(others)} in "
            f"{config.certs} or {config.keys}): a host needs only its bundle (`actorctl "
            "host bundle`)"
        )
    return said


@host.command("bundle")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--host", "name", required=True, help="Which host (key host of [[node]]).")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Where its certs/ and keys/ go (new or empty).",
)
def host_bundle(file: Path, name: str, out: Path) -> None:
    """Copy host NAME's share of FILE's certificates and keys into OUT/certs and
    OUT/keys: the CA's certificate (never its key), the certificate and private
    keys of the nodes NAME runs, and every public key (the other nodes', the
    operators', the clients'), with the keyring's members, roles and revoked
    keys. Put them where NAME's copy of FILE says (its certs and keys): that
    is all NAME needs, `cluster reload` included (its nodes are asked under
    their own keys). No operator key goes to a host: a host whose node's key
    has the operator role is refused.

    Run it where the certificates and keys were made (`actorctl certs init`,
    `actorctl keys gen`); in development mode (dev = true) what is missing is
    made first.
    """
    try:
        config = read_cluster(file)
        host_nodes(config, name)
        if config.dev:
            ensure_dev_secrets(config)
        written = write_host_bundle(config, name, out)
    except ConfigError as exc:
        fail(f"{exc}", 2)
    for path in written:
        click.echo(str(path))
    click.echo(f"host {name!r}: {len(written)} files in {out} (no CA key, no other host's key)")


async def _watch(
    signals: AsyncIterator[int], stop: trio.Event, cold: trio.Event, scope: trio.CancelScope
) -> None:
    """The first signal stops the host's nodes warm; the second, cold."""
    with scope:
        async for _ in signals:
            if not stop.is_set():
                stop.set()
            elif not cold.is_set():
                click.echo(_COLD, err=True)
                cold.set()


async def membership(
    server: Node,
    config: ClusterConfig,
    node_config: NodeConfig,
    settings: EtcdSettings,
    pools: Mapping[str, Sequence[str]],
    left: trio.Event,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """``node run --etcd``: register ``server`` and follow the membership until
    cancelled (then deregister, and set ``left``); fails the command if etcd
    does not answer at the start."""
    record = node_record(server, config, node_config, pools)
    try:
        await serve_membership(
            server,
            record,
            config.name,
            settings,
            task_status=task_status,
        )
    except* EtcdError as group:
        fail(
            f"node {server.name}: cannot register in etcd at "
            f"{', '.join(settings.endpoints)}: {leaf(group)}",
            1,
        )
    except* MembershipRefused as group:
        fail(f"{leaf(group)}", 1)
    finally:
        left.set()
