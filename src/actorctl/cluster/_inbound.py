"""The incoming side: what a node does with a connection a peer opened.

A peer attaches a sender link whose target is an actor's name; the node answers
with credit from that actor's mailbox. A peer attaches a receiver link (dynamic,
or with a ``$reply/...`` source) to get replies. Every delivery is decoded,
queued in the actor's mailbox, and settled when the actor has finished with it.
"""

from __future__ import annotations

import functools
import uuid
from typing import TYPE_CHECKING, Final, final

import trio
from proton import Condition, Delivery, Endpoint, Link, symbol

from .._errors import WireFormatError
from .._log import log
from ..actors import ActorCell
from ..mailbox import Outcome, decode
from ._engine import Engine, EngineHandler

if TYPE_CHECKING:
    from ._node import Node

__all__ = ["InboundHandler", "actor_name"]

NOT_FOUND: Final = "amqp:not-found"
DECODE_ERROR: Final = "actorctl:decode-error"
OVER_CREDIT: Final = "amqp:link:transfer-limit-exceeded"
STOPPING: Final = "actorctl:actor-stopping"
REPLY_PREFIX: Final = "$reply/"


def actor_name(target: str | None) -> str:
    """The actor name in a link target: ``name``, ``/name`` or ``amqp://h:p/name``."""
    if not target:
        return ""
    if "://" in target:
        target = target.split("://", 1)[1].partition("/")[2]
    return target.lstrip("/")


@final
class _Credit:
    """A receiver link seen as a mailbox's credit link: flowing wakes the writer."""

    __slots__ = ("engine", "receiver")

    def __init__(self, engine: Engine, receiver: Link) -> None:
        self.engine = engine
        self.receiver = receiver

    @property
    def credit(self) -> int:
        return 0 if self.engine.closed else int(self.receiver.credit)

    def flow(self, n: int) -> None:
        if not self.engine.closed:
            self.receiver.flow(n)
            self.engine.wake()

    def reclaim(self) -> None:
        receiver = self.receiver
        if not self.engine.closed and not receiver.drain_mode:
            receiver.drain(0)
            self.engine.wake()


@final
class InboundHandler(EngineHandler):
    """Events of one connection that a peer opened to this node."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self._credits: list[tuple[ActorCell, _Credit]] = []
        self._reply_addresses: list[str] = []

    def on_link_remote_open(self, engine: Engine, link: Link) -> None:
        if not link.state & Endpoint.LOCAL_UNINIT:
            return
        if link.is_receiver:
            self._attach_inbox(engine, link)
        else:
            self._attach_replies(engine, link)
        engine.wake()

    def _attach_inbox(self, engine: Engine, link: Link) -> None:
        target = link.remote_target.address or ""
        name = actor_name(target)
        cell = self.node.cells.get(name)
        if cell is not None:
            link.target.address = target
        link.open()
        if cell is None:
            hosted = ", ".join(sorted(self.node.cells)) or "none"
            _refuse(
                link,
                NOT_FOUND,
                f"no actor named {name!r} on node {self.node.name!r} (it hosts: {hosted})",
            )
            log("actorctl:link:refused", peer=engine.peer, target=target, reason="unknown actor")
            return
        credit = _Credit(engine, link)
        link.actorctl_cell = cell
        self._credits.append((cell, credit))
        cell.mailbox.attach(credit)

    def _attach_replies(self, engine: Engine, link: Link) -> None:
        source = link.remote_source
        asked = source.address or ""
        if source.dynamic:
            address = f"{REPLY_PREFIX}{uuid.uuid4().hex}"
        elif asked.startswith(REPLY_PREFIX):
            address = asked
        else:
            link.open()
            _refuse(
                link,
                NOT_FOUND,
                f"node {self.node.name!r} offers no source {asked!r}: attach a "
                "dynamic receiver (or one whose source starts with $reply/) to get replies",
            )
            return
        link.source.address = address
        link.source.dynamic = source.dynamic
        link.snd_settle_mode = Link.SND_SETTLED  # the reply is the acknowledgement
        link.open()
        self.node.reply_routes[address] = (engine, link)
        self._reply_addresses.append(address)

    def on_link_flow(self, engine: Engine, link: Link) -> None:
        # A sender's flow answers a drain: it gave back the credit it had no use for.
        if link.is_receiver and link.drain_mode and link.credit <= 0:
            link.drain_mode = False
            link.drained()
            cell: ActorCell | None = getattr(link, "actorctl_cell", None)
            if cell is not None:
                cell.mailbox.credit_changed()

    def on_link_remote_close(self, engine: Engine, link: Link) -> None:
        if link.is_receiver:
            for cell, credit in self._credits:
                if credit.receiver == link:
                    cell.mailbox.detach(credit)
                    self._credits.remove((cell, credit))
                    return
        else:
            address = link.source.address or ""
            route = self.node.reply_routes.get(address)
            if route is not None and route[1] == link:
                del self.node.reply_routes[address]

    def on_delivery(self, engine: Engine, delivery: Delivery) -> None:
        link = delivery.link
        if not link.is_receiver:
            if delivery.remote_state and not delivery.settled:
                delivery.settle()
            return
        if not delivery.readable or delivery.partial:
            return
        data = link.recv(delivery.pending)
        link.advance()
        self._take(engine, link, delivery, data or b"")

    def _take(self, engine: Engine, link: Link, delivery: Delivery, data: bytes) -> None:
        presettled = delivery.settled
        settle = None if presettled else functools.partial(_settle, engine, delivery)
        try:
            envelope = decode(data)
        except WireFormatError as exc:
            log(
                "actorctl:delivery:rejected",
                peer=engine.peer,
                condition=DECODE_ERROR,
                description=str(exc),
            )
            if settle is not None:
                settle(Outcome.rejected(DECODE_ERROR, str(exc)))
            return
        cell: ActorCell | None = getattr(link, "actorctl_cell", None)
        if cell is None:  # a link we refused: nothing should arrive on it
            if settle is not None:
                settle(Outcome.rejected(NOT_FOUND, f"link to {link.target.address!r} is closed"))
            return
        try:
            cell.mailbox.put_nowait(envelope, settle)
        except trio.WouldBlock:
            outcome = Outcome.rejected(
                OVER_CREDIT,
                f"actor {cell.name!r} granted no credit for message {envelope.message_id}: "
                "the sender must wait for link credit",
            )
        except trio.ClosedResourceError:
            outcome = Outcome.modified(STOPPING, f"actor {cell.name!r} is stopping")
        else:
            return
        log(
            f"actorctl:delivery:{outcome.state}",
            actor=cell.name,
            message_id=envelope.message_id,
            condition=outcome.condition,
            description=outcome.description,
        )
        if settle is not None:
            settle(outcome)

    def on_closed(self, engine: Engine) -> None:
        for cell, credit in self._credits:
            cell.mailbox.detach(credit)
        self._credits.clear()
        routes = self.node.reply_routes
        for address in self._reply_addresses:
            route = routes.get(address)
            if route is not None and route[0] is engine:
                del routes[address]
        self._reply_addresses.clear()


def _refuse(link: Link, condition: str, description: str) -> None:
    link.condition = Condition(condition, description)
    link.close()


def _settle(engine: Engine, delivery: Delivery, outcome: Outcome) -> None:
    """Answer the sender: runs when the actor is done with the message."""
    if engine.closed:
        return  # the sender is gone; it will send the message again
    state = outcome.state
    if state == "accepted":
        delivery.update(Delivery.ACCEPTED)
    elif state == "rejected":
        delivery.local.condition = Condition(
            outcome.condition or "amqp:internal-error", outcome.description
        )
        delivery.update(Delivery.REJECTED)
    elif state == "modified":
        local = delivery.local
        local.failed = True
        local.undeliverable = True
        local.annotations = {
            symbol("actorctl-condition"): outcome.condition or "",
            symbol("actorctl-description"): outcome.description or "",
        }
        delivery.update(Delivery.MODIFIED)
    else:
        delivery.update(Delivery.RELEASED)
    delivery.settle()
    engine.wake()
