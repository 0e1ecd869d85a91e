"""The ``actorctl`` command: the composition root of every actorctl process.

Only this layer prints to a terminal; it also chooses where eliot writes (JSON
lines on stdout by default for a node, stderr for one-shot commands).
"""

from __future__ import annotations

import errno
import functools
import json
import re
import signal
import sys
import traceback
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import asyncclick as click
import attrs
import eliot
import trio

from .._errors import ActorctlError, ConfigError, DeliveryError, RemoteError
from ..actors import Address
from ..cluster import Node, NodeConfig, hosted_pools, open_node
from ..ops import build_node, node_actors
from ..tasks import call as call_by_name
from ._cluster import cluster
from ._cluster_controller import cluster_controller
from ._control import control
from ._deadletters import deadletters
from ._errors import exit_code, fail, leaf
from ._files import read_cluster
from ._host import LEAVE_TIMEOUT, etcd_option, etcd_settings, host, membership
from ._inspect import inspect
from ._keys import certs, keys
from ._logging import log_options, log_to
from ._logs import logs
from ._options import Security, security_options
from ._schedule import schedule

__all__ = ["main"]

CONNECT_TIMEOUT = 5.0  # seconds, at most: then a node that cannot be reached is an error


def main() -> None:
    """Entry point of the ``actorctl`` console script.

    An expected failure (an ``ActorctlError`` that no command turned into its
    own message) is one ``error:`` line and exit code 1; Ctrl-C is
    "interrupted" and 130. ``actorctl --debug ...`` shows the traceback too.
    """
    debug = "--debug" in sys.argv[1:]
    try:
        cli(_anyio_backend="trio")
    except BaseException as exc:
        code = exit_code(exc, debug=debug)
        if code is None:
            raise
        raise SystemExit(code) from None


@click.group()
@click.version_option(package_name="actorctl")
@click.option("--debug", is_flag=True, help="Show the traceback of a failure, too.")
def cli(debug: bool) -> None:
    """actorctl: supervised actors reachable over AMQP 1.0 peer links."""


cli.add_command(keys)
cli.add_command(certs)
cli.add_command(cluster)
cli.add_command(host)
cluster.add_command(cluster_controller)
cli.add_command(deadletters)
cli.add_command(control)
cli.add_command(inspect)
cli.add_command(logs)
cli.add_command(schedule)


@cli.group()
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
    "--grace", default=5.0, show_default=True, help="Seconds in-flight handlers get at stop."
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
    grace: float,
    log_path: str,
    security: Security,
) -> None:
    """Run a node hosting the actors that MODULE:OBJECT names.

    OBJECT may be an Actor subclass or instance, a list of them, or a mapping of
    name to actor. The node stops gracefully on SIGINT or SIGTERM. With --etcd
    (and --cluster), it registers in etcd once it listens, its pools' routers
    follow who else is registered, and it leaves etcd when it stops.
    """
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
            node_config,
            config,
            hosted,
            security=security.node_options(node_name, config.member_names if config else ()),
            metrics=metrics,
        )
    except ConfigError as exc:
        fail(str(exc))
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            try:
                await nursery.start(server.serve)
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
            left = trio.Event()
            member = trio.CancelScope()
            if settings is not None and config is not None:
                run = functools.partial(
                    membership, server, config, node_config, settings, pools, left
                )
                await nursery.start(_scoped, member, run)
            async for signum in signals:
                eliot.log_message(
                    message_type="actorctl:node:signal", signal=signal.Signals(signum).name
                )
                if settings is not None:  # it leaves etcd first: routers stop sending
                    member.cancel(reason="the node stops")
                    with trio.move_on_after(LEAVE_TIMEOUT):
                        await left.wait()
                server.stop(grace)
                break


async def _scoped(
    scope: trio.CancelScope,
    run: Callable[..., Awaitable[None]],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """``run(task_status=...)`` inside ``scope``: cancelled alone, when its owner says."""
    with scope:
        await run(task_status=task_status)


_ARGS = click.argument("args", nargs=-1, metavar="[ARGS]...")
_KW = click.option("--kw", "kwargs", multiple=True, metavar="KEY=VALUE", help="A keyword argument.")
_TIMEOUT = click.option("--timeout", default=10.0, show_default=True, help="Seconds to wait.")


@cli.command()
@click.argument("address")
@click.argument("handler")
@_ARGS
@_KW
@_TIMEOUT
@click.option("--at-most-once", is_flag=True, help="Send pre-settled; do not wait for the outcome.")
@security_options
@log_options
async def send(
    address: str,
    handler: str,
    args: tuple[str, ...],
    kwargs: tuple[str, ...],
    timeout: float,
    at_most_once: bool,
    security: Security,
) -> None:
    """Send a message to ADDRESS's HANDLER and wait until it is handled.

    Each of ARGS is read as JSON if it parses (1, "a", [1,2], {"k": 1}), else as
    a string. Exits non-zero, printing the error, if the message is refused.
    """
    values, keywords = _values(args), _keywords(kwargs)

    async def go(client: Node, target: Address) -> None:
        ref = client.ref(target).with_options(at_most_once=at_most_once)
        if at_most_once:
            await ref.tell(handler, *values, **keywords)
        else:
            await ref.deliver(handler, *values, **keywords)
        click.echo(f"{'sent' if at_most_once else 'accepted'}: {handler} on {target}")

    await _one_shot(address, timeout, go, security)


@cli.command()
@click.argument("address")
@click.argument("handler")
@_ARGS
@_KW
@_TIMEOUT
@security_options
@log_options
async def call(
    address: str,
    handler: str,
    args: tuple[str, ...],
    kwargs: tuple[str, ...],
    timeout: float,
    security: Security,
) -> None:
    """Call ADDRESS's HANDLER (an actor's handler, or a task of a pool or a
    worker) and print its result as JSON.

    Exits non-zero, printing the error, if the call fails or times out.
    """
    values, keywords = _values(args), _keywords(kwargs)

    async def go(client: Node, target: Address) -> None:
        result = await call_by_name(client.outbox, target, handler, values, keywords, timeout)
        click.echo(json.dumps(result))

    await _one_shot(address, timeout, go, security)


async def _one_shot(address: str, timeout: float, go: Any, security: Security) -> None:
    if not timeout > 0:
        fail(f"--timeout {timeout:g}: expected a number of seconds above 0, e.g. --timeout 10")
    try:
        target = Address.parse(address)
        options = security.node_options("cli")
        if target.scheme == "amqps" and options["tls"] is None:
            raise ConfigError(
                f"{address}: amqps:// is TLS, which needs --certs DIR and --keys DIR "
                "(or use amqp:// with --insecure, for a node run with --insecure)"
            )
    except ConfigError as exc:
        fail(str(exc))
    # What fails to connect says so (PeerUnavailable, naming why) before the
    # reply timeout would call it "no reply".
    connect = min(CONNECT_TIMEOUT, timeout * 0.6)
    try:
        async with open_node(
            "cli", host=None, grace=0.5, connect_timeout=connect, **options
        ) as client:
            with trio.fail_after(timeout + 1.0):
                await go(client, target)
    except* RemoteError as group:
        fail(f"the handler raised {leaf(group)}", code=1)
    except* DeliveryError as group:
        refused = leaf(group)
        hint = _REFUSAL_FIXES.get(getattr(refused, "condition", ""), "")
        fail(f"refused: {refused}{hint}", code=1)
    except* trio.TooSlowError:
        fail(f"no answer from {address} within {timeout:g} s (is the node running?)", code=1)
    except* ActorctlError as group:
        fail(str(leaf(group)), code=1)


_NODE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?")
#: What to do about the refusals a first call meets most (docs/protocol.md §8).
_REFUSAL_FIXES: dict[str, str] = {
    "actorctl:unknown-key": (
        ": the node does not trust our key: `actorctl keys add OUR.pub --dir ITS_KEYS` "
        "(or pass --keys DIR of a key it trusts, and --key-name)"
    ),
    "actorctl:revoked-key": ": our key was revoked there: use another (`actorctl keys gen`)",
    "actorctl:stale": ": our clock and the node's disagree: check both clocks",
}


def _values(args: Iterable[str]) -> list[Any]:
    return [_value(arg) for arg in args]


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _keywords(pairs: Iterable[str]) -> dict[str, Any]:
    result = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"--kw {pair!r}: expected KEY=VALUE, e.g. --kw limit=3")
        result[key] = _value(value)
    return result


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
