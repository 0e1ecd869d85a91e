"""The transport of a client in "another language": one call to an actor over AMQP 1.0.

This is the proton plumbing that tests/test_foreign_client.py and
tests/test_foreign_signed.py share. Like them, it stands for a client written
in any language from docs/protocol.md alone, so it uses ONLY python-qpid-proton
(its threaded ``Container`` and ``MessagingHandler``, with ``SSLDomain`` for
mutual TLS), trio (to run the client in a worker thread) and the standard
library: no actorctl import, no actorctl helper, no knowledge of actorctl's
internals. What goes in the message (a JSON command, a signature) is each test
module's own business; this module only carries it (§2 transport, §4 inbox
links, §8 replies, §9 outcomes).

Each call runs in a worker thread with its own proton Container, and every wait
is bounded by a Container timer that gives up (and closes the connection) after
a few seconds, and, around it, by ``trio.fail_after``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio
from proton import Delivery, Message, SSLDomain
from proton.handlers import MessagingHandler
from proton.reactor import Container

CLIENT_TIMEOUT = 10.0  # seconds before the client gives up on a call
CLOSE_TIMEOUT = 2.0  # seconds the node gets to answer our close before we stop anyway

MakeMessage = Callable[[str, str], Message]
"""Makes the message to send, given the reply address the node assigned (§8) and
the node's container id, from its open frame (§3: what a signature names, §11.2)."""

_OUTCOMES = {
    Delivery.ACCEPTED: "accepted",
    Delivery.REJECTED: "rejected",
    Delivery.RELEASED: "released",
    Delivery.MODIFIED: "modified",
}


@dataclass(frozen=True)
class ClientTls:
    """The client's TLS files: the cluster CA, its certificate chain and its key."""

    ca: str
    cert: str
    key: str

    def domain(self) -> SSLDomain:
        domain = SSLDomain(SSLDomain.MODE_CLIENT)
        domain.set_credentials(self.cert, self.key, None)
        domain.set_trusted_ca_db(self.ca)
        # We dial an IP address: check the node's certificate against the CA only.
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER)
        return domain


@dataclass
class Reply:
    """A reply document as the client received it."""

    body: Any  # the decoded JSON body
    application_properties: dict[str, Any]
    correlation_id: Any
    subject: str | None
    content_type: str | None
    presettled: bool
    message: Message | None = None  # as received: what a client that verifies reads (§8.1)


@dataclass
class CallResult:
    """What one call produced on the wire."""

    message_id: str | None = None  # the id of the message sent, once sent
    node: str | None = None  # the node's container id, from its open frame
    reply_address: str | None = None  # the $reply/... address the node assigned
    outcome: str | None = None  # accepted | rejected | released | modified
    condition: str | None = None  # the rejected outcome's (or refused link's) condition
    description: str | None = None
    reply: Reply | None = None
    link_refused: bool = False  # the node detached a link with an error (condition)
    failure: str | None = None  # why the client gave up, if it did
    events: list[str] = field(default_factory=list)


def replying_to(message: Message) -> MakeMessage:
    """Send ``message`` as it is, with its reply-to set to the assigned address."""

    def make(reply_to: str, node: str) -> Message:
        message.reply_to = reply_to
        return message

    return make


class ForeignCall(MessagingHandler):
    """Call one handler of one actor and collect the outcome and the reply.

    protocol.md: connect (over mutual TLS with a client certificate from the
    cluster CA, if ``tls`` is given) with SASL ANONYMOUS; attach a receiver with a
    dynamic source and read the address the node assigned (§8); attach a sender
    whose target is the actor (§4); make the message only once that address is
    known (a signature covers the reply-to, and the node's container id, which
    its open frame gave before that); send it unsettled (at-least-once)
    within credit; the delivery's outcome says whether the actor took it (§9),
    and the reply document arrives, pre-settled, on the receiver.
    """

    def __init__(
        self,
        port: int,
        target: str,
        make_message: MakeMessage,
        *,
        tls: ClientTls | None = None,
        timeout: float = CLIENT_TIMEOUT,
    ) -> None:
        # prefetch: credit for the reply receiver; auto_accept is irrelevant for
        # pre-settled replies; auto_settle settles our sends once they have an outcome.
        super().__init__(prefetch=10, auto_accept=True, auto_settle=True)
        self.url = f"{'amqps' if tls else 'amqp'}://127.0.0.1:{port}"
        self.target = target
        self.make_message = make_message
        self.tls = tls
        self.timeout = timeout
        self.result = CallResult()
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
            self.url,
            ssl_domain=self.tls.domain() if self.tls else None,
            allowed_mechs="ANONYMOUS",
            sasl_enabled=True,
            reconnect=False,
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
        assert self.result.reply_address is not None
        # The node's open frame came before its answer to our attach.
        node = self.result.node = self._connection.remote_container
        message = self.make_message(self.result.reply_address, node or "")
        self.result.message_id = str(message.id)
        event.sender.send(message)
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
        self.result.events.append(f"outcome {self.result.outcome} {self.result.condition}")
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
            message=msg,
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


def run_foreign_call(
    port: int, target: str, make_message: MakeMessage, *, tls: ClientTls | None = None
) -> CallResult:
    """Run one call in this thread's own proton Container; returns when it ends."""
    call = ForeignCall(port, target, make_message, tls=tls)
    Container(call).run()
    return call.result


async def foreign_call(
    port: int, target: str, make_message: MakeMessage, *, tls: ClientTls | None = None
) -> CallResult:
    """Run one call in a worker thread, bounded whatever the client does."""
    # The client's own timers end its run first; this is the last resort.
    with trio.fail_after(CLIENT_TIMEOUT + CLOSE_TIMEOUT + 5):
        return await trio.to_thread.run_sync(
            functools.partial(run_foreign_call, port, target, make_message, tls=tls),
            abandon_on_cancel=True,
        )
