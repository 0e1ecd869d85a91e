"""A node's resource bounds: what one peer may hold of it, and for how long.

Every bound has a default (a field of :class:`Limits`, the record a ``Node``
takes as ``limits``; a flat keyword of ``open_node``; and a key of a
``[node.limits]`` table in cluster.toml) and a clear refusal:

- connections: at most ``max_handshakes`` connections may be in their TLS and
  AMQP handshake at once, and at most ``max_connections_per_address`` may come
  from one remote address. A connection beyond the per-address cap is told
  why: the node finishes its handshake and closes it at once with
  ``amqp:resource-limit-exceeded`` naming the cap, so the caller's error names
  it too; at most ``SPOKEN_REFUSALS`` such refusals per address are under way
  at once, and they count as handshakes. A connection beyond that, or beyond
  ``max_handshakes``, is closed at once without a word (no AMQP connection
  exists yet to carry a condition). Each refusal is logged. A connection that
  has not finished TLS and AMQP ``open`` within ``handshake_timeout`` s is
  closed (``_engine.py``).
- links: a connection may hold ``max_links_per_connection`` links; one more is
  refused (attached, then detached with ``amqp:resource-limit-exceeded``), and a
  peer that goes on attaching past twice the cap has its connection closed
  with that condition.
- messages: an inbox link announces ``max_message_size`` on attach; a transfer
  larger than that is settled ``rejected`` with ``amqp:link:message-size-exceeded``
  as soon as that many bytes have arrived, not once it is whole (proton drops
  the rest of a delivery that is already settled).
- replies: a reply link whose caller grants no credit holds at most
  ``max_queued_replies`` replies, and its connection's session at most
  ``max_queued_reply_bytes`` bytes of replies waiting to go out; more are
  dropped and logged (``actorctl:reply:dropped``, naming the bound).
- outgoing: what a node has sent to one peer at least once and the peer has
  not settled yet (its bodies kept for a resend) is at most
  ``max_unsettled_bytes``; a send past it waits until the peer settles some
  (backpressure, as for link credit: logged once as
  ``actorctl:peer:unsettled-full``), except a message alone, which goes
  whatever its size.
- memory: the replies the node's dedup windows keep for duplicates are bounded
  in bytes, per actor (``max_kept_reply_bytes_per_actor``) and for the node
  (``max_kept_reply_bytes``): the oldest are forgotten first
  (``actors/_dedup.py``); the replay cache holds at most ``max_replay_bytes``
  (``mailbox/_replay.py``), and its journal in the node's store at most
  ``max_replay_journal_bytes`` (``cluster/_replays.py``). Reaching a bound is
  logged.

Under any of these the node goes on serving its other peers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, final

import attrs
import trio
from proton import Condition, Endpoint, Link

from ..._errors import ConfigError
from ..._log import log
from ...actors import DEFAULT_ACTOR_BYTES, DEFAULT_NODE_BYTES
from ...mailbox import DEFAULT_REPLAY_BYTES
from ._engine import Engine, EngineHandler
from ._raw import REJECTED, lib, set_condition

__all__ = [
    "LIMIT_NAMES",
    "MESSAGE_SIZE_EXCEEDED",
    "RESOURCE_LIMIT",
    "SPOKEN_REFUSALS",
    "ConnectionLimits",
    "Gate",
    "Limits",
    "reply_queue_full",
]

RESOURCE_LIMIT: Final = "amqp:resource-limit-exceeded"
MESSAGE_SIZE_EXCEEDED: Final = "amqp:link:message-size-exceeded"

#: Refusals per remote address told in words at once (see the module docstring):
#: enough for a caller to learn the cap, too few for one address to take the
#: handshakes of others.
SPOKEN_REFUSALS: Final = 4

_outgoing_bytes = lib.pn_session_outgoing_bytes
_link_session = lib.pn_link_session


def _count(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"node limit {attribute.name}: expected a whole number above 0, got {value!r}"
        )


def _seconds(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"node limit {attribute.name}: expected seconds above 0, got {value!r}")


@final
@attrs.frozen
class Limits:
    """A node's resource bounds (see the module docstring and ``Node``).

    Attributes:
        max_message_size: bytes one message may have (1 MiB).
        max_links_per_connection: links one connection may hold (1,000).
        max_connections_per_address: connections from one remote address (100).
        max_handshakes: connections in their TLS and AMQP handshake at once (200).
        handshake_timeout: seconds a connection gets to finish TLS and AMQP open (10).
        credit_deadline: seconds within which credit a link holds unused, while
            another link of the same actor waits, is drained and, if the drain is
            ignored, taken back (1).
        peer_idle_timeout: seconds an outgoing connection may go unused before it
            is closed (120).
        max_queued_replies: replies held for one reply link that has no credit (1,000).
        max_queued_reply_bytes: bytes of replies held for one caller's connection
            whose reply link has no credit (16 MiB).
        max_unsettled_bytes: bytes of messages sent to one peer and not yet
            settled by it; a send past it waits (64 MiB).
        max_kept_reply_bytes: bytes of replies the node's dedup windows keep for
            duplicates, all actors together (64 MiB).
        max_kept_reply_bytes_per_actor: the same for one actor's window (16 MiB).
        max_replay_bytes: bytes the replay cache (ids of accepted messages) may
            hold, counted as their ids' lengths plus a fixed cost each (32 MiB).
        max_replay_journal_bytes: bytes the replay cache's rows in the node's
            durable store may hold, counted as each row's key and value plus a
            fixed cost; past it the oldest rows are deleted (64 MiB).
        resend_window: seconds a plain tell that its receiver gave back unrun
            (``released``, or ``modified`` with ``actorctl:actor-stopping``) is
            sent again for, with backoff, before the node gives up on it (30;
            ``peer/_given_back.py``).
    """

    max_message_size: int = attrs.field(validator=_count, default=1 << 20)
    max_links_per_connection: int = attrs.field(validator=_count, default=1000)
    max_connections_per_address: int = attrs.field(validator=_count, default=100)
    max_handshakes: int = attrs.field(validator=_count, default=200)
    handshake_timeout: float = attrs.field(validator=_seconds, default=10.0)
    credit_deadline: float = attrs.field(validator=_seconds, default=1.0)
    peer_idle_timeout: float = attrs.field(validator=_seconds, default=120.0)
    max_queued_replies: int = attrs.field(validator=_count, default=1000)
    max_queued_reply_bytes: int = attrs.field(validator=_count, default=16 << 20)
    max_unsettled_bytes: int = attrs.field(validator=_count, default=64 << 20)
    max_kept_reply_bytes: int = attrs.field(validator=_count, default=DEFAULT_NODE_BYTES)
    max_kept_reply_bytes_per_actor: int = attrs.field(validator=_count, default=DEFAULT_ACTOR_BYTES)
    max_replay_bytes: int = attrs.field(validator=_count, default=DEFAULT_REPLAY_BYTES)
    max_replay_journal_bytes: int = attrs.field(validator=_count, default=64 << 20)
    resend_window: float = attrs.field(validator=_seconds, default=30.0)


#: The names of the bounds: fields of ``Limits`` (flat keywords of ``open_node``),
#: and keys of ``[node.limits]``.
LIMIT_NAMES: Final = tuple(field.name for field in attrs.fields(Limits))


@final
class Gate:
    """Admits the connections a node accepts, within its connection bounds."""

    __slots__ = ("_by_address", "_handshaking", "_limits", "_node", "_refusing")

    def __init__(self, node: str, limits: Limits) -> None:
        self._node = node
        self._limits = limits
        self._by_address: dict[str, int] = {}
        self._refusing: dict[str, int] = {}  # refusals in words under way, per address
        self._handshaking = 0

    async def serve(
        self,
        stream: trio.SocketStream,
        address: str,
        peer: str,
        make: Callable[[EngineHandler | None], Engine],
    ) -> None:
        """Run the connection that ``make`` makes of ``stream`` (``make(None)``:
        with the node's own handler), if the bounds allow one more from
        ``address``; otherwise refuse it: in words (``make`` given a handler that
        closes it with the condition) or by closing ``stream`` at once."""
        reason, in_words = self._refusal(address)
        if reason is not None:
            log("actorctl:connection:refused", node=self._node, peer=peer, reason=reason)
            if in_words:
                await self._refuse(address, make(_Refuser(self._node, reason)))
            else:
                await trio.aclose_forcefully(stream)
            return
        self._by_address[address] = self._by_address.get(address, 0) + 1
        try:
            await self._run(make(None))
        finally:
            left = self._by_address[address] - 1
            if left:
                self._by_address[address] = left
            else:
                del self._by_address[address]

    async def _refuse(self, address: str, engine: Engine) -> None:
        """Run a connection that is closed with a condition once it is open."""
        self._refusing[address] = self._refusing.get(address, 0) + 1
        try:
            await self._run(engine)
        finally:
            left = self._refusing[address] - 1
            if left:
                self._refusing[address] = left
            else:
                del self._refusing[address]

    async def _run(self, engine: Engine) -> None:
        """Run ``engine``, counted as in its handshake until its AMQP open."""
        self._handshaking += 1
        handshaking = True
        try:
            async with trio.open_nursery() as nursery:

                async def opened() -> None:
                    nonlocal handshaking
                    await engine.remote_opened.wait()
                    handshaking = False
                    self._handshaking -= 1

                nursery.start_soon(opened)
                await engine.run()
                nursery.cancel_scope.cancel()
        finally:
            if handshaking:
                self._handshaking -= 1

    def _refusal(self, address: str) -> tuple[str | None, bool]:
        """Why a connection from ``address`` is refused (None: it is not), and
        whether the refusal is told in words (the per-address cap, while fewer
        than ``SPOKEN_REFUSALS`` are under way for it)."""
        limits = self._limits
        if self._handshaking >= limits.max_handshakes:
            return (
                f"{self._handshaking} connections are in their handshake already "
                f"(max_handshakes = {limits.max_handshakes})"
            ), False
        held = self._by_address.get(address, 0)
        if held >= limits.max_connections_per_address:
            return (
                f"{held} connections from {address} already "
                f"(max_connections_per_address = {limits.max_connections_per_address})"
            ), self._refusing.get(address, 0) < SPOKEN_REFUSALS
        return None, False

    @property
    def handshaking(self) -> int:
        """Connections accepted that have not finished their handshake."""
        return self._handshaking

    def connections(self, address: str) -> int:
        return self._by_address.get(address, 0)


@final
class _Refuser(EngineHandler):
    """A connection beyond the per-address cap: opened, then closed at once with
    ``amqp:resource-limit-exceeded`` naming the cap; nothing it attaches is
    answered."""

    __slots__ = ("_node", "_reason")

    def __init__(self, node: str, reason: str) -> None:
        self._node = node
        self._reason = reason

    def on_remote_open(self, engine: Engine) -> None:
        connection = engine.connection
        connection.condition = Condition(
            RESOURCE_LIMIT,
            f"node {self._node!r} takes no more connections from this address: "
            f"{self._reason}; close connections you no longer use, or ask the node's "
            "operator for a larger max_connections_per_address",
        )
        connection.close()
        engine.wake()

    def on_link_remote_open(self, engine: Engine, link: Link) -> None:
        """Links of a refused connection stay unanswered: it is closing."""


@final
class ConnectionLimits:
    """The bounds on what one incoming connection holds: links and message size."""

    __slots__ = ("_links", "_node", "max_links", "max_message_size")

    def __init__(self, node: str, limits: Limits) -> None:
        self._node = node
        self.max_message_size = limits.max_message_size
        self.max_links = limits.max_links_per_connection
        self._links = 0

    def refuse_link(self, engine: Engine, link: Link) -> bool:
        """Count a link the peer attached; refuse it (True) if it is one too many.

        Every link counts until the peer detaches it, refused ones too: a peer
        that goes on attaching past twice the cap loses its connection.
        """
        self._links += 1
        if self._links <= self.max_links:
            if link.is_receiver:
                link.max_message_size = self.max_message_size
            return False
        description = (
            f"node {self._node!r} takes at most {self.max_links} links per connection "
            "(max_links_per_connection): detach links you no longer use"
        )
        if self._links > 2 * self.max_links:
            connection = engine.connection
            if not connection.state & Endpoint.LOCAL_CLOSED:
                connection.condition = Condition(RESOURCE_LIMIT, description)
                connection.close()
                log(
                    "actorctl:connection:closed",
                    node=self._node,
                    peer=engine.peer,
                    condition=RESOURCE_LIMIT,
                    reason=f"{self._links} links attached, refused ones included",
                )
            return True
        link.open()
        link.condition = Condition(RESOURCE_LIMIT, description)
        link.close()
        log(
            "actorctl:link:refused",
            node=self._node,
            peer=engine.peer,
            target=link.remote_target.address or link.remote_source.address,
            condition=RESOURCE_LIMIT,
            reason=f"link {self._links} of at most {self.max_links}",
        )
        return True

    def link_closed(self) -> None:
        """The peer detached a link: it no longer counts."""
        self._links -= 1

    def too_large(self, engine: Engine, delivery: Any, size: int, target: str) -> None:
        """Refuse a delivery of which ``size`` bytes (more than the bound) have
        arrived, whole or not: settle it now, so the rest is never kept."""
        description = (
            f"message larger than {self.max_message_size} bytes (max-message-size of "
            f"this link; {size} bytes arrived so far): send it in parts, or ask the "
            "node's operator for a larger max_message_size"
        )
        presettled = bool(lib.pn_delivery_settled(delivery))
        if not presettled:
            set_condition(delivery, MESSAGE_SIZE_EXCEEDED, description)
            lib.pn_delivery_update(delivery, REJECTED)
        lib.pn_delivery_settle(delivery)
        engine.wake()
        log(
            "actorctl:delivery:rejected",
            node=self._node,
            peer=engine.peer,
            actor=target,
            condition=MESSAGE_SIZE_EXCEEDED,
            description=description,
            received=size,
            presettled=presettled,
        )


def reply_queue_full(link: Any, bound: int, max_bytes: int, queued: int) -> str | None:
    """Why a reply link (a raw ``pn_link_t``) takes no more replies, if it does
    not: it holds ``bound`` replies that wait for credit already (its caller
    grants none, or too little), or its session holds ``max_bytes`` bytes of
    them. ``queued``: its replies waiting, as ``pn_link_queued`` gave them (the
    caller read them already: one C call per reply). (Its session's bytes are
    looked at only while replies wait.)"""
    if not queued:
        return None
    if queued >= bound:
        return (
            f"the caller's reply link holds {queued} replies that wait for credit "
            f"already (max_queued_replies = {bound})"
        )
    held = _outgoing_bytes(_link_session(link))
    if held >= max_bytes:
        return (
            f"the caller's connection holds {held} bytes of replies that wait to go "
            f"out already (max_queued_reply_bytes = {max_bytes})"
        )
    return None
