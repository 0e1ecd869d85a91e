"""A raw AMQP 1.0 peer for hostile and careless clients: proton's engine over
mutual TLS, driven by trio, doing only what the test tells it.

It answers nothing on its own: it never answers a drain, grants no credit it
is not told to, and sends whatever bytes it is given, credit or not. The
connection runs on actorctl's ``Engine`` (proton's sans-IO engine on a trio
stream, which is also how any trio program would drive proton); everything it
says on the wire is decided here.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio
from proton import Delivery, Link, Session, SSLDomain

from actorctl import Envelope, TlsFiles
from actorctl.cluster.link._engine import Engine, EngineHandler
from actorctl.cluster.link._raw import lib, recv, remote_condition, send
from actorctl.mailbox import IdentityKey, encode, sign_ed25519


@dataclass
class LinkState:
    """What the node said about one link."""

    opened: bool = False
    closed: bool = False
    condition: str | None = None
    description: str | None = None
    drain_seen: bool = False  # the node set drain on a flow
    max_message_size: int = 0  # what the node announced on attach


@dataclass
class Outcome:
    state: str
    condition: str | None
    description: str | None


@dataclass
class RawPeer(EngineHandler):
    """The client's side of one connection (see the module docstring)."""

    engine: Engine | None = None
    session: Session | None = None
    links: dict[str, LinkState] = field(default_factory=dict)
    outcomes: dict[bytes, Outcome] = field(default_factory=dict)
    messages: list[bytes] = field(default_factory=list)
    closed_condition: str | None = None
    _changed: trio.Event = field(default_factory=trio.Event)
    _count: int = 0

    # -- what the test does -------------------------------------------------------

    def sender(self, target: str, name: str | None = None) -> Link:
        assert self.session is not None
        assert self.engine is not None
        self._count += 1
        link = self.session.sender(name or f"raw-sender-{self._count}")
        link.target.address = target
        link.snd_settle_mode = Link.SND_UNSETTLED
        link.open()
        self.links[link.name] = LinkState()
        self.engine.wake()
        return link

    def receiver(self, *, credit: int = 0) -> Link:
        """A reply receiver with a dynamic source, granted ``credit``."""
        assert self.session is not None
        assert self.engine is not None
        self._count += 1
        link = self.session.receiver(f"raw-receiver-{self._count}")
        link.source.dynamic = True
        link.open()
        if credit:
            link.flow(credit)
        self.links[link.name] = LinkState()
        self.engine.wake()
        return link

    def send(self, link: Link, tag: bytes, data: bytes, *, settled: bool = False) -> None:
        """Send ``data`` as one delivery, whatever the link's credit."""
        assert self.engine is not None
        delivery = send(link._impl, tag, data)
        if settled:
            lib.pn_delivery_settle(delivery)
        self.engine.wake()

    async def wait(self, done: Callable[[], bool], timeout: float = 10.0) -> None:
        """Wait until ``done()`` is true after some event, at most ``timeout`` s."""
        with trio.fail_after(timeout):
            while not done():
                await self._changed.wait()

    async def ask_unread(self, actor: str, count: int, *, identity: IdentityKey, node: str) -> Link:
        """Ask ``actor`` (its handler of the same name) ``count`` times, as fast as
        its credit lets, signed by ``identity`` for the node ``node``, with a
        reply link that grants no credit: the replies are never read. The asks
        are ``raw-0``, ``raw-1``... with the body ``[[i], {}]``; returns the reply
        link once the node settled each."""
        replies = self.receiver(credit=0)
        await self.wait(lambda: self.links[replies.name].opened)
        reply_to = replies.remote_source.address
        inbox = self.sender(actor)
        sign = functools.partial(sign_ed25519, identity)
        for i in range(count):
            await self.wait(lambda: inbox.credit > 0)
            request = Envelope(
                message_id=f"raw-{i}",
                to=actor,
                subject=actor,
                body=[[i], {}],
                reply_to=reply_to,
                creation_time=time.time(),
            )
            self.send(inbox, b"%d" % i, encode(request, signer=sign, actor=actor, node=node))
        await self.wait(lambda: len(self.outcomes) == count)
        return replies

    # -- events -----------------------------------------------------------------------

    def on_link_remote_open(self, engine: Engine, link: Link) -> None:
        state = self.links.setdefault(link.name, LinkState())
        state.opened = True
        state.max_message_size = int(link.remote_max_message_size or 0)

    def on_link_remote_close(self, engine: Engine, link: Link) -> None:
        state = self.links.setdefault(link.name, LinkState())
        state.closed = True
        condition = link.remote_condition
        if condition is not None:
            state.condition = condition.name
            state.description = condition.description

    def on_link_flow(self, engine: Engine, link: Any) -> None:
        if lib.pn_link_is_sender(link) and lib.pn_link_get_drain(link):
            name = Link.wrap(link).name  # type: ignore[no-untyped-call]
            self.links.setdefault(name, LinkState()).drain_seen = True

    def on_delivery(self, engine: Engine, delivery: Any) -> None:
        link = lib.pn_delivery_link(delivery)
        if lib.pn_link_is_receiver(link):
            if lib.pn_delivery_readable(delivery) and not lib.pn_delivery_partial(delivery):
                self.messages.append(recv(link, lib.pn_delivery_pending(delivery)))
                lib.pn_delivery_settle(delivery)
            return
        if not lib.pn_delivery_settled(delivery):
            return
        wrapped = Delivery.wrap(delivery)  # type: ignore[no-untyped-call]
        states = {
            Delivery.ACCEPTED: "accepted",
            Delivery.REJECTED: "rejected",
            Delivery.RELEASED: "released",
            Delivery.MODIFIED: "modified",
        }
        name, description = remote_condition(delivery)
        tag = wrapped.tag
        self.outcomes[tag if isinstance(tag, bytes) else tag.encode()] = Outcome(
            states.get(wrapped.remote_state, str(wrapped.remote_state)), name, description
        )
        lib.pn_delivery_settle(delivery)

    def after_events(self, engine: Engine) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def on_closed(self, engine: Engine) -> None:
        condition = engine.connection.remote_condition
        self.closed_condition = condition.name if condition is not None else None
        self._changed.set()


@asynccontextmanager
async def raw_peer(
    port: int, tls: TlsFiles, *, container: str = "raw-client"
) -> AsyncIterator[RawPeer]:
    """A connection to the node on 127.0.0.1:``port``, over mutual TLS with
    ``tls``, open (AMQP open and one session) for the block."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with raw_peer_over(
        stream,
        container=container,
        peer=f"127.0.0.1:{port}",
        ssl_domain=tls.client_domain(check_name=False),
        hostname="127.0.0.1",
    ) as peer:
        yield peer


@asynccontextmanager
async def raw_peer_over(
    stream: trio.abc.Stream,
    *,
    container: str = "raw-client",
    peer: str = "raw-peer",
    ssl_domain: SSLDomain | None = None,
    hostname: str | None = None,
) -> AsyncIterator[RawPeer]:
    """A connection over ``stream`` (plain AMQP, or TLS with ``ssl_domain``),
    open (AMQP open and one session) for the block."""
    raw = RawPeer()
    engine = Engine(
        stream,
        raw,
        server=False,
        container_id=container,
        peer=peer,
        ssl_domain=ssl_domain,
        peer_hostname=hostname,
    )
    raw.engine = engine
    connection = engine.connection
    if hostname is not None:
        connection.hostname = hostname
    connection.open()
    raw.session = connection.session()
    raw.session.open()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(engine.run)
        engine.wake()
        with trio.fail_after(10):
            await engine.remote_opened.wait()
        try:
            yield raw
        finally:
            if not engine.closed:
                connection.close()
                engine.wake()
            with trio.move_on_after(2):
                await engine.finished.wait()
            nursery.cancel_scope.cancel()
