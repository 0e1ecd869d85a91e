"""The outgoing side: one connection per peer node, opened lazily, reused, and
reopened with backoff when the peer comes back.

Each target actor gets one sender link on that connection; a send waits for the
link's credit (the receiving mailbox's free slots), which is the backpressure.
Deliveries sent at-least-once are kept until the receiver settles them, and sent
again on the next connection if the peer goes away first.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, final

import trio
from proton import Condition, Delivery, Endpoint, Link, Session

from .._errors import ActorctlError, Modified, Rejected, UnknownActor
from .._log import log
from ..mailbox import ACCEPTED, Envelope, Outcome, decode
from ._engine import Engine, EngineHandler

if TYPE_CHECKING:
    from ._node import Node

__all__ = ["Peer", "Pending"]

_BACKOFF_FIRST: Final = 0.05
_BACKOFF_MAX: Final = 2.0
_REPLY_CREDIT: Final = 1000
_YIELD_EVERY: Final = 16
NOT_FOUND: Final = "amqp:not-found"
_STATES: Final[dict[int, str]] = {
    Delivery.ACCEPTED: "accepted",
    Delivery.REJECTED: "rejected",
    Delivery.MODIFIED: "modified",
    Delivery.RELEASED: "released",
}


@final
class Pending:
    """One outgoing delivery, kept until the receiver settles it."""

    __slots__ = ("data", "done", "message_id", "on_outcome", "outcome", "path", "presettled")

    def __init__(
        self,
        path: str,
        data: bytes,
        message_id: str,
        *,
        presettled: bool = False,
        on_outcome: Callable[[Outcome], None] | None = None,
    ) -> None:
        self.path = path
        self.data = data
        self.message_id = message_id
        self.presettled = presettled
        self.on_outcome = on_outcome
        self.outcome: Outcome | None = None
        self.done = trio.Event()

    def resolve(self, outcome: Outcome) -> None:
        if self.outcome is not None:
            return
        self.outcome = outcome
        self.done.set()
        if self.on_outcome is not None:
            self.on_outcome(outcome)
        elif outcome.state != "accepted":
            log(
                f"actorctl:send:{outcome.state}",
                target=self.path,
                message_id=self.message_id,
                condition=outcome.condition,
                description=outcome.description,
            )

    def error(self) -> ActorctlError | None:
        """The error a waiting sender should raise for this outcome, if any."""
        outcome = self.outcome
        if outcome is None or outcome.state == "accepted":
            return None
        condition = outcome.condition or f"amqp:{outcome.state}"
        description = outcome.description or f"the receiver answered {outcome.state}"
        if outcome.condition == NOT_FOUND:
            return UnknownActor(condition, description, self.message_id)
        if outcome.state == "rejected":
            return Rejected(condition, description, self.message_id)
        return Modified(condition, description, self.message_id)


@final
class _OutLink:
    """A sender link to one actor on the peer."""

    __slots__ = ("engine", "failure", "lot", "sender", "tags", "unsettled")

    def __init__(self, engine: Engine, sender: Link) -> None:
        self.engine = engine
        self.sender = sender
        self.lot = trio.lowlevel.ParkingLot()
        self.failure: Outcome | None = None
        self.tags = itertools.count()
        # Sent at-least-once and not yet settled by the peer, in sending order.
        self.unsettled: dict[Pending, None] = {}


@final
class Peer(EngineHandler):
    """The connection from this node to one other node."""

    def __init__(self, node: Node, host: str, port: int) -> None:
        self.node = node
        self.host = host
        self.port = port
        self.name = f"{host}:{port}"
        self.reply_address = f"$reply/{node.node_id}"
        self.engine: Engine | None = None
        self._ready = trio.Event()
        self._links: dict[str, _OutLink] = {}
        self._all_links: list[_OutLink] = []
        self._resend: list[Pending] = []
        self._sends = itertools.count(1)
        self._session: Session | None = None
        self._reply_receiver: Link | None = None

    async def run(self) -> None:
        """Keep a connection to the peer open, reconnecting with backoff."""
        backoff = _BACKOFF_FIRST
        failures = 0
        while not self.node.stopping:
            try:
                stream = await trio.open_tcp_stream(self.host, self.port)
            except OSError as exc:
                failures += 1
                if failures == 1 or failures % 10 == 0:
                    log(
                        "actorctl:peer:unreachable",
                        peer=self.name,
                        error=str(exc),
                        attempts=failures,
                    )
                await trio.sleep(backoff * (0.5 + random.random()))
                backoff = min(backoff * 2, _BACKOFF_MAX)
                continue
            if failures:
                log("actorctl:peer:reconnected", peer=self.name, attempts=failures)
            backoff, failures = _BACKOFF_FIRST, 0
            engine = Engine(
                stream,
                self,
                server=False,
                container_id=self.node.node_id,
                peer=self.name,
                idle_timeout=self.node.idle_timeout,
            )
            self._open(engine)
            self.node._engines.add(engine)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._send_again)
                    await engine.run()
                    nursery.cancel_scope.cancel()
            except Exception as exc:  # a broken connection must not take the node down
                log("actorctl:peer:connection-failed", peer=self.name, error=repr(exc))
            finally:
                self.node._forget(engine)

    async def wait_ready(self) -> Engine:
        while True:
            await self._ready.wait()
            engine = self.engine
            if engine is not None and not engine.closed:
                return engine

    async def transmit(self, pending: Pending) -> None:
        """Put one delivery on the wire, waiting for a connection and for credit."""
        while True:
            engine = self.engine
            if engine is None or engine.closed or not self._ready.is_set():
                engine = await self.wait_ready()
            out = self._out_link(engine, pending.path)
            sender = out.sender
            if sender.credit <= 0:
                while sender.credit <= 0 and out.failure is None and not engine.closed:
                    await out.lot.park()
            elif next(self._sends) % _YIELD_EVERY == 0:
                # A sender with credit does not yield on every message, so that
                # the writer puts several messages in one write; it yields often
                # enough that others get their turn.
                await trio.lowlevel.checkpoint()
            if out.failure is not None:
                pending.resolve(out.failure)
                return
            if engine.closed:
                continue  # the connection dropped while we waited: try the next one
            delivery = sender.delivery(str(next(out.tags)))
            sender.send(pending.data)
            sender.advance()
            if pending.presettled:
                delivery.settle()
                pending.resolve(ACCEPTED)
            else:
                delivery.actorctl_pending = pending
                out.unsettled[pending] = None
            engine.wake()
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
        receiver = session.receiver(f"{self.node.node_id}-replies")
        receiver.source.address = self.reply_address
        receiver.target.address = self.reply_address
        receiver.open()
        receiver.flow(_REPLY_CREDIT)
        self._reply_receiver = receiver
        engine.wake()

    def _out_link(self, engine: Engine, path: str) -> _OutLink:
        out = self._links.get(path)
        if out is not None and out.engine is engine:
            return out
        assert self._session is not None
        sender = self._session.sender(f"{self.node.node_id}->{path}")
        sender.target.address = path
        sender.snd_settle_mode = Link.SND_MIXED
        sender.open()
        out = _OutLink(engine, sender)
        sender.actorctl_out = out
        self._links[path] = out
        self._all_links.append(out)
        engine.wake()
        return out

    async def _send_again(self) -> None:
        """After a reconnect, send what the last connection left unsettled."""
        await self.wait_ready()
        again, self._resend = self._resend, []
        if again:
            log("actorctl:peer:resending", peer=self.name, deliveries=len(again))
        for pending in again:
            await self.transmit(pending)

    # -- events --------------------------------------------------------------------

    def on_link_remote_open(self, engine: Engine, link: Link) -> None:
        if link.state & Endpoint.LOCAL_UNINIT:
            # We accept no links from a peer we connected to: refuse politely.
            link.open()
            link.condition = Condition("amqp:not-allowed", "this connection only carries replies")
            link.close()
            engine.wake()
            return
        if link is self._reply_receiver or link.name == f"{self.node.node_id}-replies":
            self._ready.set()

    def on_link_remote_close(self, engine: Engine, link: Link) -> None:
        out: _OutLink | None = getattr(link, "actorctl_out", None)
        if out is None:
            return
        condition = link.remote_condition
        out.failure = Outcome(
            "rejected",
            condition.name if condition else NOT_FOUND,
            condition.description
            if condition
            else f"{self.name} closed the link to {link.target.address!r}",
        )
        path = out.sender.target.address or ""
        if self._links.get(path) is out:
            del self._links[path]
        out.lot.unpark_all()

    def on_link_flow(self, engine: Engine, link: Link) -> None:
        out: _OutLink | None = getattr(link, "actorctl_out", None)
        if out is not None and link.credit > 0:
            out.lot.unpark(count=link.credit)

    def on_delivery(self, engine: Engine, delivery: Delivery) -> None:
        link = delivery.link
        if link.is_receiver:
            self._on_reply(engine, link, delivery)
            return
        if not delivery.settled:
            return
        pending: Pending | None = getattr(delivery, "actorctl_pending", None)
        remote = delivery.remote
        state = _STATES.get(delivery.remote_state, "accepted")
        delivery.settle()
        if pending is None:
            return
        out: _OutLink | None = getattr(link, "actorctl_out", None)
        if out is not None:
            out.unsettled.pop(pending, None)
        if state == "accepted":
            pending.resolve(ACCEPTED)
            return
        condition = remote.condition
        if condition is None and state == "modified":
            notes: dict[Any, Any] = dict(remote.annotations or {})
            condition = Condition(
                str(notes.get("actorctl-condition") or "amqp:modified"),
                str(notes.get("actorctl-description") or "the receiver could not handle it"),
            )
        pending.resolve(
            Outcome(
                state,  # type: ignore[arg-type]
                condition.name if condition else None,
                condition.description if condition else None,
            )
        )

    def _on_reply(self, engine: Engine, link: Link, delivery: Delivery) -> None:
        if not delivery.readable or delivery.partial:
            return
        data = link.recv(delivery.pending)
        link.advance()
        if not delivery.settled:
            delivery.update(Delivery.ACCEPTED)
        delivery.settle()
        if link.credit < _REPLY_CREDIT // 2:
            link.flow(_REPLY_CREDIT - link.credit)
            engine.wake()
        try:
            envelope: Envelope = decode(data)
        except ActorctlError as exc:
            log("actorctl:reply:undecodable", peer=self.name, error=str(exc))
            return
        self.node._on_reply(envelope)

    def on_closed(self, engine: Engine) -> None:
        if self.engine is engine:
            self._ready = trio.Event()
        for path, out in list(self._links.items()):
            if out.engine is engine:
                del self._links[path]
                out.lot.unpark_all()
        # Deliveries this connection never saw settled go out again on the next one.
        for out in self._dead_links(engine):
            self._resend.extend(p for p in out.unsettled if p.outcome is None)
            out.unsettled.clear()

    def _dead_links(self, engine: Engine) -> list[_OutLink]:
        dead = [out for out in self._all_links if out.engine is engine]
        self._all_links = [out for out in self._all_links if out.engine is not engine]
        return dead
