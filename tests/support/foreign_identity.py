"""A client that cannot see the node's ``open`` frame: it reads the node's
container id from the ``$identity`` address (docs/protocol.md §4, §11.2).

Like tests/support/foreign.py, it stands for a client written from the protocol page
alone, in any language, with python-qpid-proton and the standard library only.
It never reads ``connection.remote_container`` (what uAMQP and the Azure SDKs
built on it do not show): it attaches receiver links whose source is the
``$identity`` address, grants each credit, and keeps the messages that arrive
on each. Its wait is bounded by a Container timer, and around it by
``trio.fail_after``.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

import trio
from proton.handlers import MessagingHandler
from proton.reactor import Container

from tests.support.foreign import CLIENT_TIMEOUT, CLOSE_TIMEOUT, ClientTls


@dataclass
class IdentityRead:
    """What the client read: the messages on each link, in the order attached."""

    messages: list[list[dict[str, Any]]] = field(default_factory=list)
    condition: str | None = None  # a refused link's condition
    description: str | None = None
    failure: str | None = None

    @property
    def node(self) -> str | None:
        """The container id the first link's message says (§11.2 field 0)."""
        first = self.messages[0] if self.messages else []
        return str(first[0]["body"]["node"]) if first else None


class ReadIdentity(MessagingHandler):
    """Attach ``links`` receivers whose source is ``source``, one after the
    other (the next once the last one's message came), each granted ``credit``;
    then close."""

    def __init__(
        self, port: int, source: str, *, tls: ClientTls | None, links: int, credit: int
    ) -> None:
        super().__init__(prefetch=0, auto_accept=False)
        self.url = f"{'amqps' if tls else 'amqp'}://127.0.0.1:{port}"
        self.source = source
        self.tls = tls
        self.links = links
        self.credit = credit
        self.result = IdentityRead()
        self._receivers: list[Any] = []
        self._connection: Any = None
        self._container: Any = None
        self._timer: Any = None
        self._finished = False

    def on_start(self, event: Any) -> None:
        self._container = event.container
        self._timer = event.container.schedule(CLIENT_TIMEOUT, self)
        self._connection = event.container.connect(
            self.url,
            ssl_domain=self.tls.domain() if self.tls else None,
            allowed_mechs="ANONYMOUS",
            sasl_enabled=True,
            reconnect=False,
        )
        self._attach(event.container)

    def _attach(self, container: Any) -> None:
        # A link name unique on the connection (§4): proton's default repeats.
        name = f"identity-{len(self._receivers) + 1}"
        receiver = container.create_receiver(self._connection, self.source, name=name)
        receiver.flow(self.credit)
        self._receivers.append(receiver)
        self.result.messages.append([])

    def on_message(self, event: Any) -> None:
        message = event.message
        body = message.body
        if isinstance(body, memoryview | bytes):  # a data section of UTF-8 JSON
            body = json.loads(bytes(body).decode("utf-8"))
        index = self._receivers.index(event.receiver)
        self.result.messages[index].append(
            {
                "body": body,
                "subject": message.subject,
                "content_type": message.content_type,
                "properties": dict(message.properties or {}),
                "presettled": event.delivery.settled,
            }
        )
        if index == len(self._receivers) - 1:
            if len(self._receivers) < self.links:
                self._attach(event.container)
            else:
                self._finish(None)

    def on_link_error(self, event: Any) -> None:
        condition = event.link.remote_condition
        self.result.condition = condition.name if condition else None
        self.result.description = condition.description if condition else None
        self._finish(None)

    def on_timer_task(self, event: Any) -> None:
        self._timer = None
        self._finish(f"gave up after {CLIENT_TIMEOUT} s: read {self.result.messages}")

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
        self._container.schedule(CLOSE_TIMEOUT, _Stop())

    def on_connection_closed(self, event: Any) -> None:
        event.container.stop()


class _Stop:
    def on_timer_task(self, event: Any) -> None:
        event.container.stop()


def run_read_identity(
    port: int, source: str, tls: ClientTls | None, links: int, credit: int
) -> IdentityRead:
    reader = ReadIdentity(port, source, tls=tls, links=links, credit=credit)
    Container(reader).run()
    return reader.result


async def read_identity(
    port: int,
    *,
    source: str = "$identity",
    tls: ClientTls | None = None,
    links: int = 1,
    credit: int = 1,
) -> IdentityRead:
    """Read the node's identity in a worker thread, bounded whatever happens."""
    with trio.fail_after(CLIENT_TIMEOUT + CLOSE_TIMEOUT + 5):
        return await trio.to_thread.run_sync(
            functools.partial(run_read_identity, port, source, tls, links, credit),
            abandon_on_cancel=True,
        )
