"""ActorRef: how you send to an actor wherever it lives, and the Outbox it sends through.

An actor never imports the cluster layer: it sends through an ``Outbox``, an
interface that the node implements and hands to it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol, final

import attrs

from .._errors import RemoteError
from ..mailbox import KIND_COMMAND, STATUS_ERROR, Envelope, Outcome
from ._address import Address
from ._handlers import converter

__all__ = ["ActorRef", "Outbox", "Reroute", "to_wire"]

DEFAULT_ASK_TIMEOUT = 30.0

#: Told each refusal of a durable send (or that its receiver cannot be
#: reached); returns where to send it instead, or None to keep its receiver.
Reroute = Callable[[Address, Outcome], Address | None]


class Outbox(Protocol):
    """What the node offers actors and refs for sending."""

    def new_message_id(self) -> str: ...

    def now(self) -> float:
        """Wall-clock time in seconds since the epoch."""
        ...

    async def send(
        self,
        address: Address,
        envelope: Envelope,
        *,
        presettled: bool,
        confirm: bool,
        durable: bool = False,
        reroute: Reroute | None = None,
    ) -> None:
        """Send one message; with ``confirm``, wait until it is settled and raise
        a ``DeliveryError`` unless it was accepted. With ``durable``, return once
        the node's backlog holds it (its store, when durable): it is sent from
        there, as often as it takes, until its receiver settles it, or to where
        ``reroute`` says when the receiver refuses it or cannot be reached.

        Raises:
            PeerUnavailable: (not durable) no connection to the peer within the
                node's connect timeout.
        """
        ...

    def reply_address(self, address: Address) -> str:
        """Where replies from the node at ``address`` come back to this node."""
        ...

    async def request(self, address: Address, envelope: Envelope, timeout: float) -> Envelope:
        """Send a command that wants a reply and wait for the reply document."""
        ...

    def reply(self, envelope: Envelope, *, quiet: bool = False) -> int:
        """Send a reply document to ``envelope.to`` (a reply address). Does not
        block. Returns its size in bytes as encoded; 0 (and logged) when no
        reply link leads there now."""
        ...

    def expect(
        self, correlation_id: str, take: Callable[[Envelope], None], *, peer: str | None = None
    ) -> None:
        """Have ``take`` receive the reply documents that come back to this node
        with ``correlation_id`` (only from ``peer``, ``host:port``, if given)."""
        ...

    def unexpect(self, correlation_id: str) -> None:
        """Stop taking replies for ``correlation_id``."""
        ...


_JSON_SCALARS = (str, int, float, bool, type(None))


def to_wire(value: Any) -> Any:
    """Turn attrs classes and dataclasses (at any depth) into JSON values."""
    if isinstance(value, _JSON_SCALARS):
        return value
    if isinstance(value, list | tuple):
        return [to_wire(item) for item in value]
    if isinstance(value, dict):
        return {key: to_wire(item) for key, item in value.items()}
    if attrs.has(type(value)) or dataclasses.is_dataclass(value):
        return converter.unstructure(value)
    return value


@final
class ActorRef:
    """A handle on one actor, local or remote: ``tell``, ``ask``, ``deliver``.

    Made by a node (``node.ref(address)``) or an actor (``self.ref(address)``).
    Options are set with :meth:`with_options`, which returns a new ref, so that
    keyword arguments always belong to the handler.
    """

    __slots__ = ("_outbox", "_to", "address", "at_most_once", "durable", "timeout")

    def __init__(
        self,
        address: Address,
        outbox: Outbox,
        *,
        timeout: float = DEFAULT_ASK_TIMEOUT,
        at_most_once: bool = False,
        durable: bool = False,
    ) -> None:
        if at_most_once and durable:
            raise ValueError("a ref is at_most_once or durable, not both")
        self.address = address
        self._to = str(address)
        self.timeout = timeout
        self.at_most_once = at_most_once
        self.durable = durable
        self._outbox = outbox

    def with_options(
        self,
        *,
        timeout: float | None = None,
        at_most_once: bool | None = None,
        durable: bool | None = None,
    ) -> ActorRef:
        """A copy of this ref with another ask timeout (seconds) or delivery mode.

        ``at_most_once=True`` sends pre-settled: the message is never re-sent,
        and may be lost if the receiver dies. ``durable=True`` makes ``tell``
        hand the message to the node's backlog (kept in its store) and return:
        it is sent when the peer can take it, even after a restart of this node.
        """
        return ActorRef(
            self.address,
            self._outbox,
            timeout=self.timeout if timeout is None else timeout,
            at_most_once=self.at_most_once if at_most_once is None else at_most_once,
            durable=self.durable if durable is None else durable,
        )

    def _command(
        self, handler: str, args: tuple[Any, ...], kwargs: dict[str, Any], *, ask: bool = False
    ) -> Envelope:
        outbox = self._outbox
        now = outbox.now()
        message_id = outbox.new_message_id()
        return Envelope(
            message_id=message_id,
            to=self._to,
            subject=handler,
            body=[to_wire(args), to_wire(kwargs)],
            kind=KIND_COMMAND,
            creation_time=now,
            reply_to=outbox.reply_address(self.address) if ask else None,
            correlation_id=message_id if ask else None,
            expiry_time=now + self.timeout if ask else None,
        )

    async def tell(self, handler: str, /, *args: Any, **kwargs: Any) -> None:
        """Send and forget. Waits for link credit (that is the backpressure),
        or (a durable ref) only until the node's backlog holds the message.

        Raises:
            PeerUnavailable: (not durable) the peer's node could not be reached
                within the node's connect timeout.
        """
        envelope = self._command(handler, args, kwargs)
        await self._outbox.send(
            self.address,
            envelope,
            presettled=self.at_most_once,
            confirm=False,
            durable=self.durable,
        )

    async def deliver(self, handler: str, /, *args: Any, **kwargs: Any) -> None:
        """Send and wait until the receiver has handled it (settled ``accepted``).

        Raises:
            Rejected: bad input (unknown handler, wrong arguments, ...).
            Modified: the actor could not handle it there.
            UnknownActor: no such actor on that node.
        """
        envelope = self._command(handler, args, kwargs)
        await self._outbox.send(self.address, envelope, presettled=False, confirm=True)

    async def ask(self, handler: str, /, *args: Any, **kwargs: Any) -> Any:
        """Send and wait for the handler's result.

        Raises:
            AskTimeout: no reply within this ref's timeout.
            RemoteError: the handler raised (its type name and message).
            Rejected, Modified, UnknownActor: as for :meth:`deliver`.
        """
        envelope = self._command(handler, args, kwargs, ask=True)
        reply = await self._outbox.request(self.address, envelope, self.timeout)
        if reply.headers.get("status") == STATUS_ERROR:
            body = reply.body if isinstance(reply.body, dict) else {}
            raise RemoteError(str(body.get("type", "Error")), str(body.get("message", reply.body)))
        return reply.body

    def __repr__(self) -> str:
        return f"<ActorRef {self.address}>"
