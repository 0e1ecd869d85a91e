"""A client in "another language" calls an actor, knowing only docs/protocol.md.

The client below is written with plain python-qpid-proton (its threaded
``Container`` and ``MessagingHandler``) and imports nothing from actorctl: it
stands for a client written in any language from the wire specification alone.
Only the tests at the bottom of this module use actorctl, to host the actor it
calls. Each client runs in a worker thread with its own proton Container, and
every wait is bounded by a Container timer that gives up (and closes the
connection) after a few seconds.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import trio
from proton import Delivery, Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

# =============================================================================
# The foreign client.
#
# It uses ONLY python-qpid-proton and what docs/protocol.md specifies: no
# actorctl import, no actorctl helper, no knowledge of actorctl's internals.
# =============================================================================

CLIENT_TIMEOUT = 10.0  # seconds before the client gives up on a call
CLOSE_TIMEOUT = 2.0  # seconds the node gets to answer our close before we stop anyway

_OUTCOMES = {
    Delivery.ACCEPTED: "accepted",
    Delivery.REJECTED: "rejected",
    Delivery.RELEASED: "released",
    Delivery.MODIFIED: "modified",
}


@dataclass
class Reply:
    """A reply document as the client received it."""

    body: Any  # the decoded JSON body
    application_properties: dict[str, Any]
    correlation_id: Any
    subject: str | None
    content_type: str | None
    presettled: bool


@dataclass
class CallResult:
    """What one call produced on the wire."""

    message_id: str
    reply_address: str | None = None  # the $reply/... address the node assigned
    outcome: str | None = None  # accepted | rejected | released | modified
    condition: str | None = None  # the rejected outcome's error condition
    description: str | None = None
    reply: Reply | None = None
    link_refused: bool = False  # the node detached a link with an error (condition)
    failure: str | None = None  # why the client gave up, if it did
    events: list[str] = field(default_factory=list)


class ForeignCall(MessagingHandler):
    """Call one handler of one actor and collect the outcome and the reply.

    protocol.md: connect with SASL ANONYMOUS; attach a receiver with a dynamic
    source and read the address the node assigned; attach a sender whose target
    is the actor's name; send one command (unsettled, at-least-once) whose
    reply-to is that address; the delivery's outcome says whether the actor took
    it, and the reply document arrives, pre-settled, on the receiver.
    """

    def __init__(
        self,
        url: str,
        target: str,
        message: Message,
        *,
        timeout: float = CLIENT_TIMEOUT,
    ) -> None:
        # prefetch: credit for the reply receiver; auto_accept is irrelevant for
        # pre-settled replies; auto_settle settles our sends once they have an outcome.
        super().__init__(prefetch=10, auto_accept=True, auto_settle=True)
        self.url = url
        self.target = target
        self.message = message
        self.timeout = timeout
        self.result = CallResult(message_id=str(message.id))
        self._connection: Any = None
        self._receiver: Any = None
        self._sender: Any = None
        self._container: Any = None
        self._timer: Any = None
        self._sent = False
        self._finished = False

    # -- setting up ---------------------------------------------------------------

    def on_start(self, event: Any) -> None:
        container = self._container = event.container
        self._timer = container.schedule(self.timeout, self)
        self._connection = container.connect(
            self.url, allowed_mechs="ANONYMOUS", sasl_enabled=True, reconnect=False
        )
        # A dynamic source: the node answers with the address it made for us.
        self._receiver = container.create_receiver(self._connection, None, dynamic=True)

    def on_link_opened(self, event: Any) -> None:
        if event.receiver is not None and event.receiver == self._receiver:
            address = event.receiver.remote_source.address
            self.result.events.append(f"reply link attached: {address}")
            if not address:
                self._finish("the node assigned no reply address")
                return
            self.result.reply_address = address
            # The sender link's target address names the actor.
            self._sender = event.container.create_sender(self._connection, self.target)

    # -- sending --------------------------------------------------------------------

    def on_sendable(self, event: Any) -> None:
        # Sending only when the link has credit is what protocol.md requires.
        if self._sent or event.sender != self._sender or event.sender.credit <= 0:
            return
        self.message.reply_to = self.result.reply_address
        event.sender.send(self.message)
        self._sent = True
        self.result.events.append("sent")

    def on_accepted(self, event: Any) -> None:
        self._outcome(event)

    def on_rejected(self, event: Any) -> None:
        self._outcome(event)

    def on_released(self, event: Any) -> None:  # released and modified both land here
        self._outcome(event)

    def _outcome(self, event: Any) -> None:
        delivery = event.delivery
        self.result.outcome = _OUTCOMES.get(delivery.remote_state, str(delivery.remote_state))
        condition = delivery.remote.condition
        if condition is not None:
            self.result.condition = condition.name
            self.result.description = condition.description
        self.result.events.append(f"outcome {self.result.outcome}")
        self._maybe_done()

    # -- receiving the reply ---------------------------------------------------------

    def on_message(self, event: Any) -> None:
        msg = event.message
        body = msg.body
        if isinstance(body, memoryview | bytes):  # a data section of UTF-8 JSON
            body = json.loads(bytes(body).decode("utf-8"))
        self.result.reply = Reply(
            body=body,
            application_properties=dict(msg.properties or {}),
            correlation_id=msg.correlation_id,
            subject=msg.subject,
            content_type=msg.content_type,
            presettled=event.delivery.settled,
        )
        self.result.events.append("reply")
        self._maybe_done()

    def _maybe_done(self) -> None:
        outcome = self.result.outcome
        if outcome is None:
            return
        # A reply comes only for a call the actor accepted; any other outcome is final.
        if outcome != "accepted" or self.result.reply is not None:
            self._finish(None)

    # -- failures and the time limit ------------------------------------------------

    def on_timer_task(self, event: Any) -> None:
        self._timer = None
        self._finish(f"gave up after {self.timeout} s; events so far: {self.result.events}")

    def on_link_error(self, event: Any) -> None:
        # The node refuses a link by attaching it and detaching it with an error.
        condition = event.link.remote_condition
        self.result.link_refused = True
        self.result.condition = condition.name if condition else None
        self.result.description = condition.description if condition else None
        self.result.events.append(f"link refused: {condition}")
        self._finish(None)

    def on_connection_error(self, event: Any) -> None:
        self._finish(f"the node closed the connection: {event.connection.remote_condition}")

    def on_transport_error(self, event: Any) -> None:
        self._finish(f"transport error: {event.transport.condition}")

    def on_disconnected(self, event: Any) -> None:
        self._finish("disconnected")

    def _finish(self, failure: str | None) -> None:
        if self._finished:
            return
        self._finished = True
        self.result.failure = failure
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._connection is not None:
            self._connection.close()
        # If the node never answers the close, stop the Container anyway.
        self._container.schedule(CLOSE_TIMEOUT, _StopContainer())

    def on_connection_closed(self, event: Any) -> None:
        # Both ends closed: nothing else to wait for (not even the cancelled timer).
        event.container.stop()


class _StopContainer:
    """A timer handler that ends the Container's run whatever state it is in."""

    def on_timer_task(self, event: Any) -> None:
        event.container.stop()


def run_foreign_call(port: int, target: str, message: Message) -> CallResult:
    """Run one call in this thread's own proton Container; returns when it ends."""
    call = ForeignCall(f"amqp://127.0.0.1:{port}", target, message)
    Container(call).run()
    return call.result


def json_command(handler: str, args: list[Any], kwargs: dict[str, Any], *, to: str) -> Message:
    """A command as protocol.md lays it out, with a JSON body in a data section."""
    now = time.time()
    return Message(
        id=f"foreign-{uuid.uuid4()}",
        address=to,
        subject=handler,
        content_type="application/json",
        creation_time=now,
        expiry_time=now + 30.0,
        properties={"kind": "command", "lang": "proton-python"},
        body=json.dumps([args, kwargs]).encode("utf-8"),
        inferred=True,  # bytes as a data section, not an amqp-value holding binary
    )


# =============================================================================
# The tests: they host the actor with actorctl and run the foreign client.
# =============================================================================

from actorctl import Actor, handler, open_node  # noqa: E402


class Calculator(Actor):
    @handler
    async def add(self, a: int, b: int) -> int:
        return a + b


async def _call(port: int, target: str, message: Message) -> CallResult:
    # The client's own timers end its run first; this is the last resort.
    with trio.fail_after(CLIENT_TIMEOUT + CLOSE_TIMEOUT + 5):
        return await trio.to_thread.run_sync(
            run_foreign_call,
            port,
            target,
            message,
            abandon_on_cancel=True,
        )


async def test_a_foreign_client_calls_a_handler_and_gets_the_reply() -> None:
    async with open_node("server", [Calculator()], insecure=True) as node:
        message = json_command("add", [2, 3], {}, to=f"amqp://127.0.0.1:{node.port}/calculator")
        result = await _call(node.port, "calculator", message)

    assert result.failure is None, result.failure
    assert result.reply_address is not None
    assert result.reply_address.startswith("$reply/")
    assert result.outcome == "accepted"
    reply = result.reply
    assert reply is not None
    assert reply.body == 5
    assert reply.application_properties["kind"] == "document"
    assert reply.application_properties["status"] == "ok"
    assert reply.correlation_id == result.message_id  # the request carried none
    assert reply.subject == "add"
    assert reply.content_type == "application/json"
    assert reply.presettled


async def test_a_foreign_client_calling_an_unknown_handler_is_rejected() -> None:
    async with open_node("server", [Calculator()], insecure=True) as node:
        message = json_command("divide", [1, 2], {}, to=f"amqp://127.0.0.1:{node.port}/calculator")
        result = await _call(node.port, "calculator", message)

    assert result.failure is None, result.failure
    assert result.outcome == "rejected"
    assert result.condition == "actorctl:unknown-handler"
    assert result.description is not None
    assert "'divide'" in result.description
    assert result.reply is None  # a rejected command gets no reply document


async def test_a_foreign_client_may_send_an_amqp_value_list_body() -> None:
    async with open_node("server", [Calculator()], insecure=True) as node:
        url = f"amqp://127.0.0.1:{node.port}/calculator"
        message = Message(
            id=f"foreign-{uuid.uuid4()}",
            address=url,
            subject="add",
            correlation_id="my-own-correlation-id",
            creation_time=time.time(),
            properties={"kind": "command", "lang": "proton-python"},
            body=[[], {"a": 40, "b": 2}],  # an amqp-value section: list of list and map
        )
        # The full actor URL as the link target is accepted too.
        result = await _call(node.port, url, message)

    assert result.failure is None, result.failure
    assert result.outcome == "accepted"
    reply = result.reply
    assert reply is not None
    assert reply.body == 42
    assert reply.application_properties["status"] == "ok"
    assert reply.application_properties["kind"] == "document"
    assert reply.correlation_id == "my-own-correlation-id"  # the request's own, echoed


async def test_a_foreign_client_linking_to_an_unknown_actor_is_refused() -> None:
    async with open_node("server", [Calculator()], insecure=True) as node:
        message = json_command("add", [1, 2], {}, to=f"amqp://127.0.0.1:{node.port}/nobody")
        result = await _call(node.port, "nobody", message)

    assert result.failure is None, result.failure
    assert result.link_refused
    assert result.condition == "amqp:not-found"
    assert result.description is not None
    assert "'nobody'" in result.description
    assert result.outcome is None  # nothing was sent: the link never got credit
