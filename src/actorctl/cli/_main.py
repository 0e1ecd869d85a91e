"""The ``actorctl`` command: the composition root of every actorctl process.

Only this layer prints to a terminal; it also chooses where eliot writes (JSON
lines on stdout by default for a node, stderr for one-shot commands).
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Iterable
from typing import IO, Any

import asyncclick as click
import eliot
import trio

from .._errors import ActorctlError, ConfigError, DeliveryError, RemoteError
from ..actors import Actor, Address
from ..cluster import Node, NodeConfig, Router, hosted_actors, load_cluster, open_node
from ..supervision import BoxedSpec, SupervisorSpec
from ..tasks import call as call_by_name
from ._cluster import cluster
from ._deadletters import deadletters
from ._keys import certs, keys
from ._options import Security, security_options

__all__ = ["main"]


def main() -> None:
    """Entry point of the ``actorctl`` console script."""
    cli(_anyio_backend="trio")


@click.group()
@click.version_option(package_name="actorctl")
def cli() -> None:
    """actorctl: supervised actors reachable over AMQP 1.0 peer links."""


cli.add_command(keys)
cli.add_command(certs)
cli.add_command(cluster)
cli.add_command(deadletters)


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
@security_options
async def node_run(
    target: str | None,
    cluster_path: str | None,
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
    name to actor. The node stops gracefully on SIGINT or SIGTERM.
    """
    _log_to(log_path, sys.stdout)
    try:
        host, port = _parse_listen(listen)
        node_name = name or f"node-{port}"
        node_config = NodeConfig(node_name, host, port, target, instances)
        config = None
        if cluster_path is not None:
            config = load_cluster(cluster_path)
            node_config = config.node(node_name)
        actors = hosted_actors(target, instances, node=node_config, cluster=config)
        hosted: dict[str, Actor | type[Actor] | SupervisorSpec | BoxedSpec] = dict(actors)
        for route in routes:
            logical, sep, addresses = route.partition("=")
            if not sep or not logical or not addresses:
                raise ConfigError(f"--route {route!r}: expected NAME=ADDRESS[,ADDRESS...]")
            hosted[logical] = Router([Address.parse(a) for a in addresses.split(",")])
        trees = config.supervisor_specs(node_config) if config is not None else []
        for tree in trees:
            if tree.name in hosted:
                raise ConfigError(
                    f"supervisor {tree.name!r}: node {node_name!r} has an actor of that name"
                )
            hosted[tree.name] = tree
        for boxed in config.boxed_specs(node_config) if config is not None else []:
            if boxed.name in hosted:
                raise ConfigError(
                    f"boxed worker {boxed.name!r}: node {node_name!r} has an actor of that name"
                )
            hosted[boxed.name] = boxed
        # Its durable store is under its cluster's data/; without one, in memory.
        store = config.store(node_config) if config is not None else None
        server = Node(
            node_name,
            hosted,
            host=host,
            port=port,
            store=store,
            **node_config.limits,
            **security.node_options(node_name, config.member_names if config else ()),
        )
    except ConfigError as exc:
        _fail(str(exc))
    try:
        await _serve(server, listen, grace)
    except* ActorctlError as group:  # a child that failed to start (a boxed worker's command)
        _fail(f"node {node_name} failed to start: {_innermost(group)}", 1)


async def _serve(server: Node, listen: str, grace: float) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            try:
                await nursery.start(server.serve)
            except OSError as exc:
                _fail(f"cannot listen on {listen}: {exc.strerror or exc}")
            async for signum in signals:
                eliot.log_message(
                    message_type="actorctl:node:signal", signal=signal.Signals(signum).name
                )
                server.stop(grace)
                break


def _innermost(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


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
    _log_to("-", sys.stderr)

    async def go(client: Node, target: Address) -> None:
        ref = client.ref(target).with_options(at_most_once=at_most_once)
        if at_most_once:
            await ref.tell(handler, *_values(args), **_keywords(kwargs))
        else:
            await ref.deliver(handler, *_values(args), **_keywords(kwargs))
        click.echo(f"{'sent' if at_most_once else 'accepted'}: {handler} on {target}")

    await _one_shot(address, timeout, go, security)


@cli.command()
@click.argument("address")
@click.argument("handler")
@_ARGS
@_KW
@_TIMEOUT
@security_options
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
    _log_to("-", sys.stderr)

    async def go(client: Node, target: Address) -> None:
        values, keywords = _values(args), _keywords(kwargs)
        result = await call_by_name(client.outbox, target, handler, values, keywords, timeout)
        click.echo(json.dumps(result))

    await _one_shot(address, timeout, go, security)


async def _one_shot(address: str, timeout: float, go: Any, security: Security) -> None:
    try:
        target = Address.parse(address)
        options = security.node_options("cli")
    except ConfigError as exc:
        _fail(str(exc))
    try:
        async with open_node("cli", host=None, grace=0.5, **options) as client:
            with trio.fail_after(timeout + 1.0):
                await go(client, target)
    except* RemoteError as group:
        _fail(f"the handler raised {_first(group)}", code=1)
    except* DeliveryError as group:
        _fail(f"refused: {_first(group)}", code=1)
    except* trio.TooSlowError:
        _fail(f"no answer from {address} within {timeout:g} s (is the node running?)", code=1)
    except* ActorctlError as group:
        _fail(str(_first(group)), code=1)


def _first(group: BaseExceptionGroup[Any]) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


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
            _fail(f"--kw {pair!r}: expected KEY=VALUE")
        result[key] = _value(value)
    return result


def _parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"--listen {listen!r}: expected HOST:PORT, e.g. 127.0.0.1:5672")
    return host.strip("[]"), int(port)


def _log_to(path: str, default: IO[str]) -> None:
    stream: IO[str] = default if path == "-" else open(path, "a", encoding="utf-8")  # noqa: SIM115
    eliot.to_file(stream)


def _fail(message: str, code: int = 2) -> Any:
    click.echo(f"error: {message}", err=True)
    raise SystemExit(code)
