"""The incoming side: what a node does with a connection a peer opened.

A peer attaches a sender link whose target is an actor's name; the node answers
with credit from that actor's mailbox. A peer attaches a receiver link (dynamic,
or with a ``$reply/...`` source) to get replies. Every delivery is decoded,
queued in the actor's mailbox, and settled when the actor has finished with it.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, final

import trio
from proton import Condition, Delivery, Endpoint, Link, symbol

from .._errors import WireFormatError
from .._log import log
from ..actors import ActorCell
from ..mailbox import Outcome, decode
from ._engine import Engine, EngineHandler
from ._raw import ACCEPTED, REJECTED, RELEASED, lib, recv, set_condition

if TYPE_CHECKING:
    from ._node import Node

__all__ = ["InboundHandler", "actor_name"]

_delivery_link = lib.pn_delivery_link
_is_receiver = lib.pn_link_is_receiver
_readable = lib.pn_delivery_readable
_partial = lib.pn_delivery_partial
_pending = lib.pn_delivery_pending
_settled = lib.pn_delivery_settled
_update = lib.pn_delivery_update
_settle_delivery = lib.pn_delivery_settle
_link_credit = lib.pn_link_credit
_link_flow = lib.pn_link_flow

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

    __slots__ = ("engine", "link", "receiver")

    def __init__(self, engine: Engine, receiver: Link) -> None:
        self.engine = engine
        self.receiver = receiver  # the wrapper holds a reference: the pointer stays valid
        self.link = receiver._impl

    @property
    def credit(self) -> int:
        return 0 if self.engine.closed else int(_link_credit(self.link))

    def flow(self, n: int) -> None:
        if not self.engine.closed:
            _link_flow(self.link, n)
            self.engine.wake()

    def reclaim(self) -> None:
        if not self.engine.closed and not lib.pn_link_get_drain(self.link):
            lib.pn_link_drain(self.link, 0)
            self.engine.wake()


@final
class InboundHandler(EngineHandler):
    """Events of one connection that a peer opened to this node."""

    def __init__(self, node: Node) -> None:
        self.node = node
        # Inbox links by their raw pn_link_t pointer.
        self._inboxes: dict[Any, tuple[ActorCell, _Credit]] = {}
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
        self._inboxes[link._impl] = (cell, credit)
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

    def on_link_flow(self, engine: Engine, link: Any) -> None:
        # A sender's flow answers a drain: it gave back the credit it had no use for.
        inbox = self._inboxes.get(link)
        if inbox is not None and lib.pn_link_get_drain(link) and _link_credit(link) <= 0:
            lib.pn_link_set_drain(link, False)
            lib.pn_link_drained(link)
            inbox[0].mailbox.credit_changed()

    def on_link_remote_close(self, engine: Engine, link: Link) -> None:
        if link.is_receiver:
            inbox = self._inboxes.pop(link._impl, None)
            if inbox is not None:
                inbox[0].mailbox.detach(inbox[1])
        else:
            address = link.source.address or ""
            route = self.node.reply_routes.get(address)
            if route is not None and route[1] == link:
                del self.node.reply_routes[address]

    def on_delivery(self, engine: Engine, delivery: Any) -> None:
        link = _delivery_link(delivery)
        if not _is_receiver(link):
            return  # a reply we sent pre-settled: nothing to do
        if not _readable(delivery) or _partial(delivery):
            return
        data = recv(link, _pending(delivery))
        presettled = bool(_settled(delivery))
        settle = None
        if not presettled:
            lib.pn_incref(delivery)  # held until the actor settles it
            settle = functools.partial(_settle, engine, delivery)
        inbox = self._inboxes.get(link)
        if inbox is None:  # a link we refused: nothing should arrive on it
            if settle is not None:
                settle(Outcome.rejected(NOT_FOUND, "the link to this address was refused"))
            return
        self._take(engine, inbox[0], data, settle)

    def _take(
        self,
        engine: Engine,
        cell: ActorCell,
        data: bytes,
        settle: Callable[[Outcome], None] | None,
    ) -> None:
        try:
            envelope = decode(data)
        except WireFormatError as exc:
            log(
                "actorctl:delivery:rejected",
                peer=engine.peer,
                actor=cell.name,
                condition=DECODE_ERROR,
                description=str(exc),
            )
            if settle is not None:
                settle(Outcome.rejected(DECODE_ERROR, str(exc)))
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
        for cell, credit in self._inboxes.values():
            cell.mailbox.detach(credit)
        self._inboxes.clear()
        routes = self.node.reply_routes
        for address in self._reply_addresses:
            route = routes.get(address)
            if route is not None and route[0] is engine:
                del routes[address]
        self._reply_addresses.clear()


def _refuse(link: Link, condition: str, description: str) -> None:
    link.condition = Condition(condition, description)
    link.close()


def _settle(engine: Engine, delivery: Any, outcome: Outcome) -> None:
    """Answer the sender: runs when the actor is done with the message."""
    try:
        if engine.closed:
            return  # the sender is gone; it will send the message again
        state = outcome.state
        if state == "accepted":
            _update(delivery, ACCEPTED)
        elif state == "rejected":
            set_condition(delivery, outcome.condition or "amqp:internal-error", outcome.description)
            _update(delivery, REJECTED)
        elif state == "modified":
            wrapped = Delivery.wrap(delivery)  # type: ignore[no-untyped-call]
            local = wrapped.local
            local.failed = True
            local.undeliverable = True
            local.annotations = {
                symbol("actorctl-condition"): outcome.condition or "",
                symbol("actorctl-description"): outcome.description or "",
            }
            wrapped.update(Delivery.MODIFIED)
        else:
            _update(delivery, RELEASED)
        _settle_delivery(delivery)
        engine.wake()
    finally:
        lib.pn_decref(delivery)
