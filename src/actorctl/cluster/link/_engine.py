"""One AMQP 1.0 connection: proton's sans-IO engine driven by a trio stream.

trio owns the socket. Bytes read from the stream are pushed into the proton
``Transport`` and collector events are handled in this connection's own
tasks (the read loop, here); what the engine has to send is written by its
output half (``_output.py``: the writer task, the write at a loop turn's end,
a busy spell's replies gathered), which anything that changes the engine
outside an event callback wakes with :meth:`Engine.wake` or :meth:`Engine.emit`.
No proton reactor, no threads, no polling loop. What the node does with the
events is its ``EngineHandler``.
"""

from __future__ import annotations

import os
from typing import Any, Final, final

import trio
from proton import SSL, Collector, Connection, Endpoint, Event, Link, SSLDomain, Transport

from ..._log import log
from ._loop_turns import loop_turns
from ._output import EngineOutput, socket_fd
from ._raw import DELIVERY, LINK_FLOW, NULL, lib
from ._reply_claims import REPLY_CAPABILITY

__all__ = ["Engine", "EngineHandler"]

_peek = lib.pn_collector_peek
_pop = lib.pn_collector_pop
_event_type = lib.pn_event_type
_event_delivery = lib.pn_event_delivery
_event_link = lib.pn_event_link

_READ_SIZE: Final = 65536
#: A read shorter than this took what a lone message left (a task's request is
#: about 500 bytes, its settlement 48): the next read waits for the socket
#: first. A longer one is a busy spell's: the next read tries the socket first,
#: as trio's ``receive_some`` does, where data is likely waiting already.
_LONE_READ: Final = 4096
_CLOSE_GRACE: Final = 2.0  # seconds the other direction may linger once one is done
_LOCAL_UNINIT: Final = Endpoint.LOCAL_UNINIT
_LOCAL_CLOSED: Final = Endpoint.LOCAL_CLOSED
_IO_ERRORS: Final = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class EngineHandler:
    """What the node does with one connection's events. Every method runs in the
    connection's own task, inside event processing: it must not block."""

    def on_remote_open(self, engine: Engine) -> None:
        """The peer opened the connection."""

    def on_link_remote_open(self, engine: Engine, link: Link) -> None:
        """The peer attached a link, or answered our attach. For a link the peer
        began, open it (or open then close it with a condition, to refuse it)."""
        if link.state & _LOCAL_UNINIT:
            link.open()

    def on_link_remote_close(self, engine: Engine, link: Link) -> None:
        """The peer detached a link (it is closed locally right after)."""

    def on_link_flow(self, engine: Engine, link: Any) -> None:
        """Credit changed on a link (``link`` is a raw ``pn_link_t`` pointer)."""

    def on_delivery(self, engine: Engine, delivery: Any) -> None:
        """A delivery arrived (receiver) or its remote state changed (sender).
        ``delivery`` is a raw ``pn_delivery_t`` pointer: see ``_raw``."""

    def after_events(self, engine: Engine) -> None:
        """The events that arrived together have all been handled."""

    def on_closed(self, engine: Engine) -> None:
        """The connection is gone; nothing more will happen on it."""


@final
class Engine(EngineOutput):
    """Drives one proton connection over one trio stream.

    Args:
        stream: the connected byte stream; the engine closes it at the end.
        handler: receives the connection's events.
        server: whether this side accepted the connection.
        container_id: this node's AMQP container id.
        peer: a name for the other side, for logs.
        idle_timeout: seconds of silence after which the peer is taken for dead
            (AMQP heartbeats keep a live but idle peer from reaching it).
        handshake_timeout: seconds the peer gets to finish the TLS handshake and
            its AMQP open; then the connection is closed (default: idle_timeout).
        ssl_domain: TLS settings (see ``_tls``); None for plain TCP.
        peer_hostname: the name a client expects in the server's certificate.
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        handler: EngineHandler,
        *,
        server: bool,
        container_id: str,
        peer: str,
        idle_timeout: float = 30.0,
        ssl_domain: SSLDomain | None = None,
        peer_hostname: str | None = None,
        handshake_timeout: float | None = None,
    ) -> None:
        self.stream = stream
        self.handler = handler
        self.peer = peer
        self.server = server
        self.closed = False
        #: Bytes read from and written to the stream (counted per read and
        #: write, not per message: the node's metrics read them when scraped).
        self.received_bytes = 0
        #: When the last bytes came from the peer (trio's clock): a node that
        #: cannot reach etcd asks whether other hosts still talk to it
        #: (``EngineSet.last_heard``, ``_engine_set.py``).
        self.heard_at = trio.current_time()
        #: What the transport said went wrong (a TLS or framing failure), if anything.
        self.error: str | None = None
        #: Whether the peer ended its side of the stream (end of file, or the
        #: connection reset), rather than this side closing it.
        self.peer_ended = False
        #: The condition the peer closed the connection with (name, description),
        #: if it gave one: a node at its connection bounds names the bound.
        self.remote_condition: tuple[str, str] | None = None
        self.connection = connection = Connection()
        connection.container = container_id
        if server:
            # It takes reply addresses that name a key, with a proof (§8).
            connection.offered_capabilities = [REPLY_CAPABILITY]
        self._collector = collector = Collector()
        connection.collect(collector)  # before bind, or the first events are missed
        self.transport = transport = Transport(Transport.SERVER if server else Transport.CLIENT)
        transport.idle_timeout = idle_timeout
        self._idle_timeout = idle_timeout
        #: TLS inside the transport (see _tls), or None for plain TCP: it names
        #: the certificate the other side presented, once the handshake is done.
        self.ssl: SSL | None = None
        self._handshake_timeout = idle_timeout if handshake_timeout is None else handshake_timeout
        if ssl_domain is not None:
            # TLS inside the transport, before bind: still sans-IO (see _tls).
            self.ssl = ssl = transport.ssl(ssl_domain)
            if peer_hostname is not None:
                ssl.peer_hostname = peer_hostname
        transport.sasl().allowed_mechs("ANONYMOUS")
        transport.bind(connection)
        super().__init__(stream, transport)
        #: Set once the peer's AMQP open arrived (after TLS and SASL).
        self.remote_opened = trio.Event()
        #: Set once the connection has ended (``run`` is returning).
        self.finished = trio.Event()
        self._reader_done = trio.Event()
        self._scope: trio.CancelScope | None = None  # the run's, once it runs
        self._collector_impl = collector._impl
        self._dispatch = {
            lib.PN_CONNECTION_REMOTE_OPEN: self._on_connection_remote_open,
            lib.PN_CONNECTION_REMOTE_CLOSE: self._on_connection_remote_close,
            lib.PN_SESSION_REMOTE_OPEN: self._on_session_remote_open,
            lib.PN_SESSION_REMOTE_CLOSE: self._on_session_remote_close,
            lib.PN_LINK_REMOTE_OPEN: self._on_link_remote_open,
            lib.PN_LINK_REMOTE_CLOSE: self._on_link_remote_close,
            lib.PN_TRANSPORT_ERROR: self._on_transport_error,
        }

    async def run(self) -> None:
        """Run the connection until both directions are closed, then close the stream."""
        self._turns = loop_turns()
        try:
            async with trio.open_nursery() as nursery:
                self._scope = nursery.cancel_scope
                nursery.start_soon(self._read_loop)
                nursery.start_soon(self._write_loop)
                nursery.start_soon(self._tick_loop, nursery.cancel_scope)
                await _first(self._reader_done.wait, self._writer_done.wait)
                with trio.move_on_after(_CLOSE_GRACE):
                    await self._reader_done.wait()
                    await self._writer_done.wait()
                nursery.cancel_scope.cancel(reason="connection closed")
        finally:
            self.closed = True
            if self.transport.capacity() >= 0:
                self.transport.close_tail()
            if self.transport.pending() >= 0:
                self.transport.close_head()
            self._process()
            try:
                self.handler.on_closed(self)
            finally:
                self.finished.set()
                await trio.aclose_forcefully(self.stream)

    def abort(self, why: str) -> None:
        """Drop the connection now, without a word to the peer (it is known to
        be gone: its lease in etcd ended): ``run`` ends at once and the handler's
        ``on_closed`` runs, with :attr:`error` ``why``."""
        if self.closed:
            return
        self.error = why
        if self._scope is not None:
            self._scope.cancel(reason=why)

    # -- I/O -------------------------------------------------------------------

    async def _read_loop(self) -> None:
        transport = self.transport
        stream = self.stream
        fd = self._fd
        drained = False  # the last read was a lone message's: wait before the next
        data: bytes | bytearray
        try:
            while True:
                try:
                    if drained:
                        data = await _read_when_readable(stream, fd)
                    else:
                        data = await stream.receive_some(_READ_SIZE)
                except trio.ClosedResourceError:
                    return  # this side closed it
                except _IO_ERRORS:
                    data = b""  # reset by the peer: as good as its end
                if not data:
                    self.peer_ended = True
                    return
                drained = fd >= 0 and len(data) < _LONE_READ
                self.received_bytes += len(data)
                self.heard_at = trio.current_time()
                if not self._push(data):
                    return
                self._process()
                # Answer from this task when nobody else is writing: one task
                # switch fewer per message than waking the writer. (What the
                # writer gathers goes out with it: credit and settlements are
                # never held back.)
                if self._send_lock.locked():
                    self.wake()
                elif not await self._send_pending():
                    self._wake_event.set()  # output closed: the writer ends it
        finally:
            if transport.capacity() >= 0:
                transport.close_tail()
            self._process()
            self._wake_event.set()
            self._reader_done.set()

    def _push(self, data: bytes | bytearray) -> bool:
        transport = self.transport
        view = memoryview(data)
        stalls = 0
        while view:
            room = transport.capacity()
            if room < 0:
                return False  # the engine closed its input (a protocol error, or closed)
            if room == 0:
                stalls += 1
                if stalls > 100:
                    log("actorctl:connection:stalled", peer=self.peer)
                    return False
                self._process()
                continue
            transport.push(bytes(view[:room]))
            view = view[room:]
        return True

    async def _tick_loop(self, scope: trio.CancelScope) -> None:
        # A peer that never finishes its handshake (a slow or silent client)
        # gets the handshake timeout to do so, then it is dropped.
        with trio.move_on_after(self._handshake_timeout):
            await self.remote_opened.wait()
        if not self.remote_opened.is_set():
            log("actorctl:connection:no-open", peer=self.peer, waited=self._handshake_timeout)
            scope.cancel(reason="no TLS handshake and AMQP open within the handshake timeout")
            return
        transport = self.transport
        while True:
            deadline = transport.tick(trio.current_time())
            self._wake_event.set()
            if not deadline:
                return  # neither side asked for heartbeats
            await trio.sleep_until(deadline)

    # -- events ------------------------------------------------------------------

    def _process(self) -> None:
        # Deliveries and flow, the events of every message, go to the handler as
        # raw pointers; the rare ones are wrapped in proton's classes.
        collector = self._collector_impl
        dispatch = self._dispatch
        handler = self.handler
        event = _peek(collector)
        if event == NULL:
            return
        while event != NULL:
            kind = _event_type(event)
            if kind == DELIVERY:
                handler.on_delivery(self, _event_delivery(event))
            elif kind == LINK_FLOW:
                handler.on_link_flow(self, _event_link(event))
            else:
                method = dispatch.get(kind)
                if method is not None:
                    method(Event.wrap(event))  # type: ignore[no-untyped-call]
            _pop(collector)
            event = _peek(collector)
        handler.after_events(self)

    def _on_connection_remote_open(self, event: Event) -> None:
        connection = event.connection
        assert connection is not None
        if connection.state & _LOCAL_UNINIT:
            connection.open()
        self.remote_opened.set()
        self.handler.on_remote_open(self)

    def _on_connection_remote_close(self, event: Event) -> None:
        connection = event.connection
        assert connection is not None
        condition = connection.remote_condition
        if condition is not None:
            self.remote_condition = (str(condition.name), str(condition.description or ""))
            log(
                "actorctl:connection:remote-error",
                peer=self.peer,
                condition=condition.name,
                description=condition.description,
            )
        if not connection.state & _LOCAL_CLOSED:
            connection.close()

    def _on_session_remote_open(self, event: Event) -> None:
        session = event.session
        assert session is not None
        if session.state & _LOCAL_UNINIT:
            session.open()

    def _on_session_remote_close(self, event: Event) -> None:
        session = event.session
        assert session is not None
        if not session.state & _LOCAL_CLOSED:
            session.close()

    def _on_link_remote_open(self, event: Event) -> None:
        link = event.link
        assert link is not None
        self.handler.on_link_remote_open(self, link)

    def _on_link_remote_close(self, event: Event) -> None:
        link = event.link
        assert link is not None
        self.handler.on_link_remote_close(self, link)
        if not link.state & _LOCAL_CLOSED:
            link.close()

    def _on_transport_error(self, event: Event) -> None:
        condition = self.transport.condition
        self.error = condition.description if condition else "the transport failed"
        if not self.server or self.connection.state & _LOCAL_CLOSED:
            # A client's handler says why its connection failed (or it closed
            # the connection itself: the peer's abrupt end is no news).
            return
        if self.peer_ended:
            # The peer went without closing: no AMQP close, or TLS without a
            # close_notify (uAMQP's way). proton calls it a framing error
            # ("connection aborted", "SSL Failure: ... unexpected eof while
            # reading"), but nothing it sent was wrong.
            log(
                "actorctl:connection:peer-closed",
                peer=self.peer,
                opened=self.remote_opened.is_set(),
                description=self.error,
            )
            return
        log(
            "actorctl:connection:protocol-error",
            peer=self.peer,
            condition=condition.name if condition else None,
            description=condition.description if condition else None,
        )


async def _first(*waits: object) -> None:
    """Return as soon as the first of several waits returns."""
    async with trio.open_nursery() as nursery:
        for wait in waits:

            async def one(wait: object = wait) -> None:
                await wait()  # type: ignore[operator]
                nursery.cancel_scope.cancel()

            nursery.start_soon(one)


async def _read_when_readable(stream: trio.abc.Stream, fd: int) -> bytes:
    """Read what the socket ``fd`` (``stream``'s) has once it is readable: after
    a read that took what a lone message left (``_LONE_READ``). (trio's
    ``receive_some`` tries the socket first and waits only once that fails: a
    read system call per message that finds nothing, and on the caller's side
    a hand-over of the GIL while another thread waits for it.) Its end reads
    as b"", a reset raises ``OSError``, this side closing it
    ``trio.ClosedResourceError``, as ``receive_some`` does."""
    while True:
        if socket_fd(stream) != fd:  # closed here (its number may be another's now)
            raise trio.ClosedResourceError("the connection's socket was closed")
        await trio.lowlevel.wait_readable(fd)
        try:
            return os.read(fd, _READ_SIZE)
        except BlockingIOError:
            continue  # readable for nothing after all: wait again
