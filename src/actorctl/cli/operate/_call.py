"""``actorctl send`` and ``actorctl call``: one message to one actor, from a
node of our own that lives as long as the command.

The runtime is imported inside the commands, when they run: their ``--help``,
and a usage error, need none of it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

import asyncclick as click

from ..._errors import ActorctlError, ConfigError, DeliveryError, RemoteError
from ..output._errors import fail, leaf
from ..output._logging import log_options
from ..reach._options import Security, security_options

if TYPE_CHECKING:
    from ...actors import Address
    from ...cluster import Node

__all__ = ["call", "send"]

CONNECT_TIMEOUT = 5.0  # seconds, at most: then a node that cannot be reached is an error

_ARGS = click.argument("args", nargs=-1, metavar="[ARGS]...")
_KW = click.option("--kw", "kwargs", multiple=True, metavar="KEY=VALUE", help="A keyword argument.")
_TIMEOUT = click.option("--timeout", default=10.0, show_default=True, help="Seconds to wait.")


@click.command()
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


@click.command()
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
    from ...tasks import call as call_by_name

    values, keywords = _values(args), _keywords(kwargs)

    async def go(client: Node, target: Address) -> None:
        result = await call_by_name(client.outbox, target, handler, values, keywords, timeout)
        click.echo(json.dumps(result))

    await _one_shot(address, timeout, go, security)


async def _one_shot(
    address: str,
    timeout: float,
    go: Callable[[Node, Address], Awaitable[None]],
    security: Security,
) -> None:
    import trio

    from ...actors import Address
    from ...cluster import open_node

    if not timeout > 0:
        fail(f"--timeout {timeout:g}: expected a number of seconds above 0, e.g. --timeout 10")
    try:
        target = Address.parse(address)
        own = security.node_security("cli")
        if target.scheme == "amqps" and own.tls is None:
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
            "cli", host=None, grace=0.5, connect_timeout=connect, security=own
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
