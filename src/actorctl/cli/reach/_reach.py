"""How a command reaches a running cluster: through its Controller, or, for a
cluster that spans hosts and that no Controller runs (``host up`` on each
host), through etcd and each registered node directly (``cluster reload``:
a request signed with the CLI's operator key, written in etcd, and each live
host's outcome as a table: ``ops/_reload_request.py``, ``ops/_host_reload.py``).

Every command that asks a running cluster something goes through here, so
that each says the same thing when the cluster is not there: no Controller
answering, etcd not answering (naming its endpoints), a wrong file.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, TypeVar

import asyncclick as click
import attrs

from ..._errors import ActorctlError, AskTimeout, ConfigError, PeerUnavailable
from ...actors import ActorRef
from ...cluster import ClusterConfig, Node, load_cluster, open_node
from ...etcd import EtcdClient, EtcdError, EtcdUnavailable
from ...ops import (
    CLI_NAME,
    CONTROLLER,
    Answers,
    HostOutcome,
    Outcome,
    answer_within,
    ask_down,
    ask_reload,
    ask_stop_node,
    hosts_broadcast,
    sign_request,
)
from ..output._errors import fail
from ._options import etcd_given, etcd_settings, etcd_to_reach

__all__ = [
    "Refs",
    "across_hosts",
    "ask_cluster",
    "ask_controller",
    "ask_hosts",
    "broadcast",
    "cli_node",
    "controller_answers",
    "first_error",
    "load",
    "reach_options",
    "read_cluster",
    "reload_across",
    "request_controller",
    "stop_across",
]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
#: How a command addresses the nodes (as the ``cli`` member).
Refs = Callable[[str], ActorRef]
#: What a command asks across hosts: given the file, an etcd client and Refs.
AcrossHosts = Callable[[ClusterConfig, EtcdClient, Refs], Awaitable[T]]
#: What a command asks through the Controller: given its ref and Refs.
ThroughController = Callable[[ActorRef, Refs], Awaitable[T]]

#: What controller_answers found, by cluster file: a command that asks twice asks once.
_ANSWERED: dict[Path, bool] = {}


def reach_options(command: F) -> F:
    """``--timeout`` and ``--etcd``: the options of a command that asks a
    running cluster (its ``timeout`` argument; ``load`` reads ``--etcd``)."""
    timeout = click.option("--timeout", default=10.0, show_default=True, help="Seconds to wait.")
    return timeout(etcd_to_reach(command))


def read_cluster(path: Path | str) -> ClusterConfig:
    """Read and check the cluster file ``path`` as every command reads one: with
    the tables the task layer declares (its ``[[periodic]]``, ``[[source]]``
    and ``[[task]]`` tables, roles and checks: tasks/_cluster_app.py), which
    the runtime's ``load_cluster`` alone does not know. The task layer is
    imported when a file is first read, not when the command starts.

    Raises:
        ConfigError: naming the file, the key and what was expected.
    """
    from ...tasks import cluster_app

    return load_cluster(path, cluster_app())


def load(file: Path, *, member: bool = True) -> ClusterConfig:
    """The cluster file a command asks about, with the etcd ``--etcd`` gives
    (over its [etcd] table); a wrong file, a wrong endpoint, or (``member``:
    it asks as the ``cli`` member) the ``cli`` member's certificate or key
    missing, end the command (exit 2), named."""
    try:
        config = read_cluster(file)
        if member:
            config.security(CLI_NAME)
        endpoints = etcd_given()
        if endpoints:
            config = attrs.evolve(config, etcd=etcd_settings(config, endpoints))
    except ConfigError as exc:
        fail(f"{exc}", 2)
    return config


def cli_node(
    config: ClusterConfig, *, connect_timeout: float, grace: float = 0.5
) -> AbstractAsyncContextManager[Node]:
    """A node of the ``cli`` member that listens nowhere, to ask the cluster."""
    return open_node(
        CLI_NAME,
        host=None,
        grace=grace,
        connect_timeout=connect_timeout,
        security=config.security(CLI_NAME),
    )


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
    async with cli_node(config, connect_timeout=min(1.0, timeout)) as client:
        return await client.ref(address).with_options(timeout=timeout).ask(handler, *args)


async def ask_controller(file: Path, handler: str, timeout: float, *args: Any) -> Any:
    """``handler`` (with ``args``) asked of the Controller of the cluster ``file``
    names; a wrong file, no answer, or its error end the command, named."""
    config = load(file)
    return await _from_controller(config, handler, timeout, *args)


async def _from_controller(config: ClusterConfig, handler: str, timeout: float, *args: Any) -> Any:
    async def ask(controller: ActorRef, _: Refs) -> Any:
        return await controller.ask(handler, *args)

    return await _through_controller(config, timeout, ask)


async def _through_controller(
    config: ClusterConfig, timeout: float, call: ThroughController[T]
) -> T:
    """``call`` given the Controller of ``config`` (as the ``cli`` member) and a
    way to reach the cluster's actors; no answer, no cluster or its error end
    the command, named."""
    host, port = config.controller
    address = f"{config.scheme}://{host}:{port}/{CONTROLLER}"
    try:
        # The Controller is local and answers at once when it runs: a refused
        # or failed connection is an error within a second, not at the timeout.
        async with cli_node(config, connect_timeout=min(1.0, timeout)) as client:
            controller = client.ref(address).with_options(timeout=timeout)
            within = answer_within(timeout)
            return await call(controller, lambda to: client.ref(to).with_options(timeout=within))
    except* AskTimeout:
        fail(
            f"no answer from the controller at {address} within {timeout:g} s (is the cluster up?)",
            1,
        )
    except* PeerUnavailable as group:
        fail(
            f"cluster {config.name!r} is not running, or not at {address}: "
            f"{first_error(group)} (`actorctl cluster up {config.path}` starts it)",
            1,
        )
    except* ActorctlError as group:
        fail(f"{first_error(group)}", 1)


async def controller_answers(config: ClusterConfig) -> bool:
    """Whether a Controller of this cluster answers at its address."""
    if config.path in _ANSWERED:
        return _ANSWERED[config.path]
    host, port = config.controller
    try:
        async with cli_node(config, connect_timeout=1.0, grace=0.1) as client:
            address = f"{config.scheme}://{host}:{port}/{CONTROLLER}"
            await client.ref(address).with_options(timeout=2.0).ask("status")
    except* ActorctlError:
        answered = False
    else:
        answered = True
    _ANSWERED[config.path] = answered
    return answered


async def across_hosts(config: ClusterConfig) -> bool:
    """Whether ``config``'s cluster is one that spans hosts (its nodes name
    their hosts, and it has an [etcd] table) that no Controller runs."""
    return bool(config.hosts) and config.etcd is not None and not await controller_answers(config)


async def ask_hosts(
    config: ClusterConfig, timeout: float, ask: AcrossHosts[T], *, nodes: bool = True
) -> T:
    """What ``ask`` finds across the hosts of ``config``'s cluster, asking the
    nodes as the ``cli`` member (``nodes``; else etcd only, and its ``Refs``
    must not be used); etcd not answering or refusing, a wrong etcd table, or
    an error of the cluster's end the command, named."""
    assert config.etcd is not None  # across_hosts said so
    try:
        client = config.etcd.client(timeout)
        if not nodes:
            return await ask(config, client, _no_refs)
        async with cli_node(config, connect_timeout=min(2.0, timeout)) as node:
            return await ask(config, client, node.ref)
    except* EtcdUnavailable as group:
        fail(f"cluster {config.name!r}: etcd does not answer: {first_error(group)}", 1)
    except* EtcdError as group:
        fail(f"cluster {config.name!r}: {first_error(group)}", 1)
    except* ConfigError as group:
        fail(f"{first_error(group)}", 2)
    except* ActorctlError as group:
        fail(f"{first_error(group)}", 1)


async def ask_cluster(
    file: Path,
    timeout: float,
    controller: tuple[Any, ...] | ThroughController[T],
    across: AcrossHosts[T],
) -> T:
    """Ask the cluster ``file`` names: its Controller the handler and arguments
    of ``controller`` (or what ``controller``, a function of the Controller's
    ref and a way to reach the cluster's actors, asks), or, for a cluster
    across hosts that no Controller runs, what ``across`` asks of etcd and the
    nodes."""
    config = load(file)
    if await across_hosts(config):
        return await ask_hosts(config, timeout, across)
    if callable(controller):
        return await _through_controller(config, timeout, controller)
    handler, *args = controller
    answer: T = await _from_controller(config, handler, timeout, *args)
    return answer


async def broadcast(
    file: Path, timeout: float, actor: str, op: str, args: list[Any]
) -> dict[str, Any]:
    """``op`` (with ``args``) asked of ``actor`` on every running node that hosts
    one, through the Controller (``Controller.broadcast``); for a cluster that
    spans hosts that no Controller runs (`host up`), of every node registered
    in etcd, directly. Each node's answer, ``{"unanswered": why}`` for one that
    did not answer."""

    async def across(config: ClusterConfig, client: EtcdClient, ref: Refs) -> dict[str, Any]:
        return await hosts_broadcast(config, client, ref, actor, op, args, answer_within(timeout))

    return await ask_cluster(file, timeout, ("broadcast", actor, op, args, timeout), across)


async def down_across(config: ClusterConfig, timeout: float) -> str:
    """``cluster down`` of a cluster across hosts: asked through etcd (every
    ``host up`` stops its nodes); what to say once none is registered. Nodes
    still registered after ``timeout`` seconds end the command, named."""

    async def down(config: ClusterConfig, client: EtcdClient, _: Refs) -> list[str]:
        return await ask_down(config, client, timeout)

    left = await ask_hosts(config, min(5.0, timeout), down, nodes=False)
    if left:
        fail(
            f"cluster {config.name!r}: down asked through etcd, and after {timeout:g} s "
            f"{', '.join(sorted(left))} still registered (their host up is not running, or "
            "cannot reach etcd: they leave when their lease ends; stop them on their host)",
            1,
        )
    return f"cluster {config.name!r} down: every host stopped its nodes"


async def stop_across(config: ClusterConfig, node: str, timeout: float) -> str:
    """``control shutdown FILE NODE`` of a cluster across hosts: asked through
    etcd (the ``host up`` that runs it stops it for good); what to say once it
    is not registered. A node the file does not name, or one still registered
    after ``timeout`` seconds, ends the command, named."""
    names = [n.name for n in config.nodes]
    if node not in names:
        fail(f"no node {node!r} in cluster {config.name!r}: its nodes are {', '.join(names)}", 1)

    async def stop(config: ClusterConfig, client: EtcdClient, _: Refs) -> bool:
        return await ask_stop_node(config, client, node, timeout)

    if not await ask_hosts(config, min(5.0, timeout), stop, nodes=False):
        fail(
            f"cluster {config.name!r}: shutdown of node {node!r} asked through etcd, and "
            f"after {timeout:g} s it is still registered (its host up is not running, or "
            "cannot reach etcd: stop it on its host)",
            1,
        )
    return f"node {node!r} stopped"


#: Seconds each etcd request of the command may take (the wait is --timeout).
_ETCD_TIMEOUT = 5.0


async def reload_across(
    config: ClusterConfig,
    *,
    dry_run: bool,
    drain_timeout: float,
    timeout: float,
    receipt_timeout: float | None = None,
) -> None:
    """Ask every host of ``config``'s cluster, through etcd, to reload the
    file, wait (at most ``timeout`` seconds) for every live host's outcome
    (at most ``receipt_timeout`` for one that has not said it received the
    request), and print them; exit 1 unless every host answered and none
    refused or warned."""
    try:
        keyring = config.security(CLI_NAME).keyring
        content = config.path.read_text()
    except (ConfigError, OSError) as exc:
        fail(f"reload refused, the cluster runs on unchanged: {exc}", 2)
    if keyring is None:
        fail(
            f"{config.path}: an insecure cluster cannot be reloaded across hosts (a request "
            "must be signed with an operator key): restart each host up with the new file",
            2,
        )
    request = sign_request(
        config, content, keyring.identity, dry_run=dry_run, drain_timeout=drain_timeout
    )

    async def ask(config: ClusterConfig, client: EtcdClient, _: Refs) -> Answers:
        return await ask_reload(config, client, request, timeout, receipt_timeout=receipt_timeout)

    answers = await ask_hosts(config, min(_ETCD_TIMEOUT, timeout), ask, nodes=False)
    click.echo(
        f"{'dry run of ' if dry_run else ''}reload {request.id} of cluster {config.name!r} "
        f"({config.path}) asked through etcd"
    )
    rows, failed = _rows(config, answers, timeout, receipt_timeout)
    click.echo(_table(rows))
    for host in config.hosts:
        details = _details(answers.outcomes.get(host), dry_run)
        if details:
            click.echo("\n".join(details))
    if failed:
        raise SystemExit(1)


def _rows(
    config: ClusterConfig, answers: Answers, timeout: float, receipt_timeout: float | None
) -> tuple[list[tuple[str, str, str]], bool]:
    """One row per host of the file: its outcome and why; whether any failed."""
    rows, failed = [], False
    for host in config.hosts:
        outcome = answers.outcomes.get(host)
        if outcome is None:
            failed = True
            rows.append((host, "did not answer", _silent(host, answers, timeout, receipt_timeout)))
            continue
        failed = failed or outcome.outcome is Outcome.REFUSED or bool(outcome.warnings)
        detail = outcome.reason or _count(outcome)
        rows.append((host, outcome.outcome.value, detail))
    return rows, failed


def _silent(host: str, answers: Answers, timeout: float, receipt_timeout: float | None) -> str:
    """Why ``host`` has no outcome: not registered, silent, or received it and slow."""
    if host not in answers.live:
        return (
            "none of its nodes is registered in etcd (its host up is not running, "
            "or is cut off): reload it there once it is back"
        )
    if receipt_timeout is not None and receipt_timeout < timeout and host not in answers.received:
        return (
            f"registered in etcd, did not say it received the request within {receipt_timeout:g} s"
        )
    return f"registered in etcd, no outcome within {timeout:g} s"


def _count(outcome: HostOutcome) -> str:
    said = f"{len(outcome.plan)} changes" if outcome.plan else "no change"
    return f"{said}, {len(outcome.warnings)} warnings" if outcome.warnings else said


def _details(outcome: HostOutcome | None, dry_run: bool) -> list[str]:
    if outcome is None or outcome.outcome is Outcome.REFUSED or not outcome.plan:
        return []
    lines = [f"host {outcome.host} {'would change' if dry_run else 'changes'}:"]
    lines += [f"  {line}" for line in outcome.plan]
    if not dry_run:
        lines += ["applied:", *(f"  {line}" for line in outcome.applied or ["nothing"])]
    lines += [f"warning: {line}" for line in outcome.warnings]
    return lines


def _table(rows: list[tuple[str, str, str]]) -> str:
    lines = [("HOST", "OUTCOME", "DETAIL"), *rows]
    widths = [max(len(line[i]) for line in lines) for i in range(2)]
    return "\n".join(
        f"{line[0].ljust(widths[0])}  {line[1].ljust(widths[1])}  {line[2]}".rstrip()
        for line in lines
    )


def _no_refs(address: str) -> ActorRef:
    raise AssertionError(f"asked {address} with etcd only")  # ask_hosts(nodes=False)


def first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first error of ``group``, however deeply nested: the one to name."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error
