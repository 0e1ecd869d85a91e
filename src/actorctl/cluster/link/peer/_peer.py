"""The outgoing side: one connection per peer node, opened lazily, reused, and
reopened with backoff when the peer comes back.

Each target actor gets one sender link on that connection; a send waits for the
link's credit (the receiving mailbox's free slots): the backpressure. Deliveries
sent at-least-once are kept until settled, and sent again on the next connection.
This module is the sending side and the connection's life (dialling, set-up, the
reply link); what the connection reports back (settlements, credit, refusals, its
end) is handled in ``_peer_events.py``, the base of :class:`Peer`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Final, final

import attrs
import trio
from proton import Link, Session

from ...._log import log
from ....mailbox import (
    ACCEPTED,
    PEER_UNAVAILABLE,
    Envelope,
    Outcome,
    Signer,
    encode,
    sign_ed25519,
)
from .. import _raw as raw
from .._engine import Engine
from .._engine_set import EngineSet
from .._pending import OutLink, PeerSettings, Pending
from .._reply_auth import REPLY_CREDIT, ReplyCheck
from .._reply_claims import own_reply_address, reply_proof
from .._why import handshake_failed, refused, unreachable
from ._given_back import GivenBack
from ._peer_breaker import PeerBreaker
from ._peer_dial import Dialer
from ._peer_events import PeerEvents, drain_if_idle
from ._peer_signing import PeerSigning
from ._unsettled import UnsettledBytes

__all__ = ["Peer"]

_YIELD_EVERY: Final = 16
lib = raw.lib
_settle_delivery = lib.pn_delivery_settle
_link_credit = lib.pn_link_credit
send = raw.send
#: How a sender with credit lets others have their turn (a test hooks it).
_take_turn = trio.lowlevel.checkpoint


@final
class Peer(PeerEvents):
    """The connection from this node to one other node."""

    def __init__(
        self,
        host: str,
        port: int,
        settings: PeerSettings,
        engines: EngineSet,
        on_reply: Callable[[Envelope, str], None],
        *,
        on_state: Callable[[str, bool, str | None], None] | None = None,
        breaker: PeerBreaker | None = None,
    ) -> None:
        self.settings = settings
        self.host = host
        self.port = port
        self.name = f"{host}:{port}"
        identity = settings.identity
        # Named for this node's key, if it has one: the attach proves the key (§8).
        self.reply_address = own_reply_address(
            settings.node_id, None if identity is None else identity.key_id
        )
        self._engines = engines
        self._on_reply_document = on_reply
        self._replies = ReplyCheck(settings.keyring, self.reply_address, self.name, settings.clock)
        # Told ("host:port", True) when a connection is ready for senders, and
        # ("host:port", False) when it closes: node-loss detection for monitors.
        self._on_state = on_state
        self.engine: Engine | None = None
        self._ready = trio.Event()
        self._ready_now = False  # _ready.is_set(), kept beside it (set and made anew with it)
        self._links: dict[str, OutLink] = {}
        self._outs: dict[Any, OutLink] = {}  # by raw pn_link_t pointer
        self._resend: list[Pending] = []
        self._sends = 0  # the sends that had credit at once (each yields every 16th)
        self._session: Session | None = None
        self._reply_receiver: Link | None = None
        self._linked = trio.Event()  # the reply link of the current connection is open
        self._linked_once = False  # ... at some point during the current connection
        # The peer refused the reply link's proof (a key it does not trust yet):
        # attach it again, with a fresh proof, before the next send (§8).
        self._reattach = False
        # Why the peer refused our reply link on the current connection, if it did.
        self._reply_refusal: tuple[str, str] | None = None
        # How this node signs what it sends on the current connection.
        self._signing = PeerSigning(self.name, settings, self._replies)
        self._node = ""  # the peer's container id on this connection: what we sign for
        self.breaker = breaker or PeerBreaker(self.name, settings.peer_breaker)
        # Since when the peer is down, and the senders waiting for it (_peer_dial.py).
        self.dialer = Dialer(
            self.name,
            settings.connect_timeout,
            self.breaker,
            self._ready_engine,
            settings.reconnect_backoff,
        )
        #: The bytes sent to the peer and not settled yet (a bound in bytes).
        self.unsettled = UnsettledBytes(self.name, settings.max_unsettled_bytes)
        #: Plain tells the peer gave back unrun, waiting to be sent again.
        self.given_back = GivenBack(
            self.name, settings.resend_window, settings.clock, self.transmit, self.unsettled.free
        )

    async def run(self) -> None:
        """Keep a connection to the peer open, reconnecting with backoff; the
        tells it gives back wait for their next try meanwhile, in this task."""
        async with trio.open_nursery() as nursery:
            self.given_back.nursery = nursery
            try:
                await self._connect()
            finally:
                self.given_back.nursery = None
                nursery.cancel_scope.cancel(reason=f"peer {self.name} done")

    async def _connect(self) -> None:
        dialer = self.dialer
        first = backoff = dialer.backoff[0]
        failures = 0
        settings = self.settings
        while not settings.stopping():
            dialer.dialling()
            try:
                # Bounded: a host that never answers a SYN would hold this loop
                # for the OS's connect timeout (minutes), not the node's.
                with trio.fail_after(settings.connect_timeout):
                    stream = await trio.open_tcp_stream(self.host, self.port)
            except (OSError, trio.TooSlowError) as exc:
                if isinstance(exc, trio.TooSlowError):
                    exc = TimeoutError(f"no answer within {settings.connect_timeout:g} s")
                failures += 1
                self._failed(unreachable(self.name, exc), failures)
                backoff = await dialer.pause(backoff)
                continue
            if failures:
                log("actorctl:peer:reconnected", peer=self.name, attempts=failures)
            engine = Engine(
                stream,
                self,
                server=False,
                container_id=settings.node_id,
                peer=self.name,
                idle_timeout=settings.idle_timeout,
                ssl_domain=settings.client_domain(self.host),
                peer_hostname=self.host,
            )
            self._open(engine)
            self._engines.add(engine)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._prepare, engine)
                    await engine.run()
                    nursery.cancel_scope.cancel()
            except Exception as exc:  # a broken connection must not take the node down
                log("actorctl:peer:connection-failed", peer=self.name, error=repr(exc))
            finally:
                self._engines.discard(engine)
            if self._linked_once:
                if engine.error is not None and not settings.stopping():  # it broke
                    log("actorctl:peer:connection-lost", peer=self.name, error=engine.error)
                backoff, failures = first, 0  # it worked: the next try is quick
            else:
                # It connected but never got as far as a link (a refused handshake,
                # say): wait before dialling again, as for a refused connection.
                failures += 1
                self._failed(self._why_not_linked(engine), failures)
                backoff = await dialer.pause(backoff)
            self._linked_once = False
            self._reply_refusal = None

    def _why_not_linked(self, engine: Engine) -> str:
        """Why a connection ended before its reply link opened: the condition the
        peer refused the link or the connection with, if it gave one, else what
        the transport's error (or its silence) suggests."""
        if self._reply_refusal is not None:
            return refused(self.name, "our reply link", self._reply_refusal)
        if engine.remote_condition is not None:
            return refused(self.name, "the connection", engine.remote_condition)
        return handshake_failed(self.name, engine.error, tls=bool(engine.ssl))

    async def wait_ready(self) -> Engine:
        """The ready connection, waiting for one at most the connect timeout
        (``Dialer.wait``).

        Raises:
            PeerUnavailable: naming the peer, how long, and the last error.
        """
        return await self.dialer.wait()

    def _ready_engine(self) -> Engine | None:
        engine = self.engine
        if self._ready.is_set() and engine is not None and not engine.closed:
            return engine
        return None

    async def wait_connected(self) -> None:
        """Wait, without bound, until a connection is ready (for the backlog)."""
        while not self._ready.is_set():
            await self._ready.wait()

    @property
    def busy(self) -> bool:
        """Whether a delivery waits on this peer: unsettled, to be sent again,
        or a sender waiting for the connection or for credit (see ``_idle``)."""
        return bool(
            self._resend
            or self.given_back.waiting
            or self.unsettled.waiting
            or self.dialer.waiting
            or self._ready.statistics().tasks_waiting
            or any(out.unsettled or len(out.lot) for out in self._outs.values())
        )

    def _failed(self, why: str, failures: int) -> None:
        """A connection could not be made; deliveries a lost connection left
        unsettled wait for the next one, but only until the peer has been down
        for the connect timeout: then they fail (a durable sender's backlog
        keeps its own, and tries again later)."""
        if not self.dialer.failed(why, failures) or not self._resend:
            return
        failed, self._resend = self._resend, []
        outcome = Outcome("released", PEER_UNAVAILABLE, self.dialer.unavailable())
        for pending in failed:
            pending.resolve(outcome)

    def lost(self, why: str) -> int:
        """The peer is known to be gone (its lease in etcd ended, so it died or
        is cut off): what it held unsettled, and what waited to go to it again,
        is released at once (``PEER_UNAVAILABLE``: a router's backlog sends it
        elsewhere), its connection is dropped, and senders stop waiting for it
        until it is back (``Dialer.gone``). Returns how many deliveries were
        released."""
        released = [p for out in self._outs.values() for p in out.unsettled.values()]
        for out in self._outs.values():
            out.unsettled.clear()
        released += self._resend
        self._resend = []
        self.dialer.gone(why)
        engine = self.engine
        if engine is not None:
            engine.abort(why)
        outcome = Outcome("released", PEER_UNAVAILABLE, self.dialer.unavailable())
        for pending in released:
            if pending.outcome is None:
                pending.resolve(outcome)
        return len(released)

    async def transmit(self, pending: Pending) -> None:
        """Put one delivery on the wire, waiting for a connection and for credit."""
        while True:
            engine = self.engine
            if engine is None or engine.closed or not self._ready_now:
                engine = await self.wait_ready()
            links, path = self._links, pending.path
            # _out_link's look-up, inline (no call per message)
            out = links[path] if path in links else self._out_link(engine, path)
            if out.engine is not engine:
                out = self._out_link(engine, path)
            link = out.link
            if _link_credit(link) <= 0:
                while _link_credit(link) <= 0 and out.failure is None and not engine.closed:
                    await out.lot.park()
            else:
                self._sends = sends = self._sends + 1
                if sends % _YIELD_EVERY == 0:
                    # A sender with credit does not yield on every message, so that
                    # the writer puts several messages in one write; it yields often
                    # enough that others get their turn.
                    await _take_turn()
                    if _link_credit(link) <= 0:
                        # While it yielded, a drain took the credit back (it was
                        # not parked, so its credit looked unused): it waits for
                        # credit again. A transfer sent without credit would leave
                        # the link one below what the receiver counts, for good.
                        continue
            if out.failure is not None:
                pending.resolve(out.failure)
                return
            if engine.closed:
                continue  # the connection dropped while we waited: try the next one
            if self._reattach:
                # Before the message on the wire: the peer takes the attach first.
                self._attach_replies(engine)
            message = pending.message
            if type(message) is Envelope:  # (no subclass: a test of its type, not a call)
                message = encode(
                    message, signer=self._signing.signer, actor=pending.path, node=self._node
                )
            presettled = pending.presettled
            size = len(message)
            unsettled = self.unsettled
            held = unsettled.held
            if not presettled and held and held + size > unsettled.bound:  # full_for, inline
                # The peer holds max_unsettled_bytes of ours unsettled: wait
                # (backpressure), then look at the connection and credit again.
                await unsettled.wait_room(size)
                continue
            tag = out.tag
            out.tag = tag + 1
            delivery = send(link, b"%x" % tag, message)
            if presettled:
                _settle_delivery(delivery)
                pending.resolve(ACCEPTED)
            else:
                out.unsettled[delivery] = pending
                pending.size = size  # UnsettledBytes.add, inline
                unsettled.held = held + size
            if out.draining:  # the receiver asks for its unused credit back
                drain_if_idle(engine, out)
            engine.emit()  # from this task, when the connection is quiet
            return

    # -- connection set-up ---------------------------------------------------------

    def _open(self, engine: Engine) -> None:
        self.engine = engine
        connection = engine.connection
        connection.hostname = self.host
        connection.open()
        session = connection.session()
        session.open()
        self._session = session
        self._replies.connected(None)
        self._reply_receiver = None
        self._reattach = False
        engine.wake()

    def on_remote_open(self, engine: Engine) -> None:
        """The peer's ``open`` came: attach the reply link."""
        if engine is self.engine and self._reply_receiver is None:
            self._attach_replies(engine)

    def _attach_replies(self, engine: Engine) -> None:
        """Attach the reply link, with a proof of this node's key made for the
        peer's container id (docs/protocol.md §8)."""
        self._reattach = False
        if self._session is None:
            return
        settings = self.settings
        receiver = self._session.receiver(f"{settings.node_id}-replies")
        receiver.source.address = self.reply_address
        receiver.target.address = self.reply_address
        identity = settings.identity
        if identity is not None:
            node = engine.connection.remote_container or ""
            receiver.properties = reply_proof(identity, node, self.reply_address, settings.clock())
        receiver.open()
        receiver.flow(REPLY_CREDIT)
        self._reply_receiver = receiver
        engine.wake()

    def _out_link(self, engine: Engine, path: str) -> OutLink:
        out = self._links.get(path)
        if out is not None and out.engine is engine:
            return out
        assert self._session is not None
        sender = self._session.sender(f"{self.settings.node_id}->{path}")
        sender.target.address = path
        sender.snd_settle_mode = Link.SND_MIXED
        sender.open()
        out = OutLink(engine, sender)
        self._links[path] = out
        self._outs[out.link] = out
        engine.wake()
        return out

    async def _prepare(self, engine: Engine) -> None:
        """Once the connection is up: open a session, then let senders in, then
        send again what the last connection left unsettled, then keep the
        session renewed."""
        await self._linked.wait()
        self._node = engine.connection.remote_container or ""
        settings = self.settings
        identity = settings.identity
        await self._signing.start(engine, self._transmit_now)
        self._ready.set()
        self._ready_now = True
        self.dialer.connected()
        if self._on_state is not None:
            self._on_state(self.name, True, engine.connection.remote_container)
        again, self._resend = self._resend, []
        if again:
            log("actorctl:peer:resending", peer=self.name, deliveries=len(again))
        now = settings.clock()
        for pending in again:
            if isinstance(pending.message, Envelope) and identity is not None:
                # Signed anew (a fresh creation time): a copy of the same bytes
                # would be refused as a replay.
                pending.message = attrs.evolve(pending.message, creation_time=now)
            await self.transmit(pending)
        await self._signing.renew(engine, self._transmit_now)

    @property
    def _signer(self) -> Signer | None:
        """How the next message is signed on this connection (``PeerSigning``)."""
        return self._signing.signer

    async def _transmit_now(self, engine: Engine, pending: Pending) -> None:
        """Send on this connection before it is ready for everyone else."""
        out = self._out_link(engine, pending.path)
        while _link_credit(out.link) <= 0 and out.failure is None and not engine.closed:
            await out.lot.park()
        if out.failure is not None or engine.closed:
            pending.resolve(out.failure or Outcome("released"))
            return
        message = pending.message
        assert isinstance(message, Envelope)
        identity = self.settings.identity
        assert identity is not None
        signer = functools.partial(sign_ed25519, identity)
        data = encode(message, signer=signer, actor=pending.path, node=self._node)
        tag = out.tag
        out.tag = tag + 1
        out.unsettled[send(out.link, b"%x" % tag, data)] = pending
        engine.wake()
