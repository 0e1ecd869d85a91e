"""The output half of an ``Engine`` (``_engine.py``): what one connection
writes, and when.

Output is popped from proton's transport and written by one writer task,
which anything that changes the engine outside an event callback wakes with
:meth:`EngineOutput.wake`. Replies that keep coming loop turn after loop
turn (those of tasks run one after another) are gathered and written
together (``_gather``); everything else (transfers, settlements, credit), and
a reply after a quiet spell, goes out at once.

"At once", for what a task sends while the writer is idle (:meth:`emit`: a
settlement among them, ``_verdicts.py``; and a reply after a quiet spell of
replies, even just after a settlement),
is the end of that loop turn: before trio
waits for I/O, the loop's turn counter (``_loop_turns.py``) calls
``_flush``, which writes everything the turn produced without waiting (a
non-blocking write to the socket's file descriptor; what the socket does not
take now is left to the writer, to go first). That saves the hand-off to the
writer task (a task switch and a scheduler pass) on a lone message's path,
and keeps a turn's output in one write. It runs outside any task, so it
cannot await (trio's ``send_all`` would also yield to the scheduler, even
when the socket takes it all: the very pass it is there to save). Nothing
writes while another write is under way (the send lock).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Final

import trio

from ._loop_turns import LoopTurns
from ._raw import lib, send

if TYPE_CHECKING:
    from proton import Transport

__all__ = [
    "GATHER_BYTES",
    "GATHER_TURNS",
    "EngineOutput",
    "socket_fd",
    "take_output",
    "write_nowait",
]

#: Loop turns a busy spell's output may gather for before it is written anyway.
GATHER_TURNS: Final = 16
#: Bytes of gathered output that are written at once, however busy the spell.
GATHER_BYTES: Final = 8192

_IO_ERRORS: Final = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


class EngineOutput:
    """The output half of an ``Engine``: its writer task, the writes at a
    loop turn's end, and the gathering of a busy spell's replies.

    Args:
        stream: the connection's byte stream.
        transport: proton's transport, bound to the connection.
    """

    #: Whether the connection has ended (the engine sets it).
    closed: bool

    def __init__(self, stream: trio.abc.Stream, transport: Transport) -> None:
        self.stream = stream
        self.transport = transport
        #: Bytes written to the stream (counted per write, not per message:
        #: the node's metrics read them when scraped).
        self.sent_bytes = 0
        #: Writes to the stream (one ``send_all`` or turn's-end write each):
        #: the ledger's count.
        self.writes = 0
        self._wake_event = trio.Event()
        # Whether emit() or send_settled() set the wake event since the writer
        # armed it: then they do not set it again (no call per message in a
        # busy spell). A wake by another path leaves it False: set again, harmlessly.
        self._woken = False
        self._send_lock = trio.Lock()
        self._turns = LoopTurns()  # this run's counter, once ``run`` starts
        self._produced_at = -2  # the loop turn of the last reply left to the writer
        self._replied_at = -2  # the loop turn of the last reply (send_settled)
        self._emitted_at = -2  # the loop turn of the last emit
        #: The socket's file descriptor, for the writes at a turn's end
        #: (``_flush``); -1 for a stream that is not a socket (never then).
        self._fd = socket_fd(stream)
        self._carry = b""  # what a turn's-end write left: the writer's, first
        self._writer_idle = False  # the writer waits for a wake-up, not gathering
        self._flush_due = False  # a write at this turn's end is arranged
        self._writer_done = trio.Event()

    def _process(self) -> None:
        """Handle the events proton has (the engine's)."""
        raise NotImplementedError

    def wake(self) -> None:
        """Have the writer emit whatever the engine has to send now. (Not
        gathered: a sender waits on the credit and settlements it carries.)"""
        self._wake_event.set()

    def emit(self) -> None:
        """Have what the engine has to send now go out, as :meth:`wake` does:
        after a quiet spell (no emit in this turn or the last) and while the
        writer is idle, written at the end of this loop turn (``_flush``: no
        task switch, the lone message's latency); else by the writer, which
        in a busy spell writes a turn's sends together with what the last
        turns left (one write, and one read at the peer, for many). For what
        a task sends from outside an event callback."""
        count = self._turns.count
        quiet = count - self._emitted_at >= 2
        self._emitted_at = count
        self._write_soon(quiet)

    def _write_soon(self, quiet: bool) -> None:
        """Have what the engine has to send go out: at this turn's end when
        ``quiet`` and the writer is idle, else by the writer (``emit``)."""
        if self._flush_due:
            return
        if quiet and self._writer_idle and self._fd >= 0 and not self._send_lock.locked():
            self._flush_due = True
            self._turns.at_turn_end(self._flush)
        elif not self._woken:
            self._woken = True
            self._wake_event.set()

    def send_settled(self, link: Any, tag: bytes, data: bytes | bytearray) -> None:
        """Send one pre-settled delivery on a sender (``link``: its raw
        ``pn_link_t``), such as a reply: after a quiet spell of replies,
        written at this loop turn's end while the writer is idle, even if a
        settlement went out in the last turn (:meth:`emit` would leave it to
        the writer: a task switch on the caller's wait); in a busy spell (a
        reply in this turn or the last), left to the writer, which gathers the
        spell's replies."""
        lib.pn_delivery_settle(send(link, tag, data))
        count = self._turns.count
        quiet = count - self._replied_at >= 2
        self._replied_at = count
        if quiet:
            # A lone reply goes at this turn's end even when a settlement was
            # emitted just before it (the last task's, once its commit
            # returned): it is the caller's wait, not part of a busy spell.
            self._emitted_at = count
            self._write_soon(True)
        else:
            self._produced_at = count
            if not self._woken:
                self._woken = True
                self._wake_event.set()

    def _flush(self) -> None:
        """At a loop turn's end (before trio waits for I/O; called by the turn
        counter, outside any task): write what the engine has to send, without
        waiting, unless a write is under way; what the socket does not take now
        (or an error, which the writer's send meets again and ends the
        connection on), and anything else, is the writer's."""
        self._flush_due = False
        if self.closed or self._send_lock.locked() or self._carry or not self._writer_idle:
            self._wake_event.set()
            return
        try:
            data, open_ = take_output(self.transport)
        except Exception:  # the writer meets it again, in its task, and ends the connection
            self._wake_event.set()
            return
        if data:
            self.sent_bytes += len(data)
            self.writes += 1
            self._carry = data[write_nowait(self._fd, data) :]
        if self._carry or not open_:
            self._wake_event.set()

    async def _write_loop(self) -> None:
        transport = self.transport
        stream = self.stream
        try:
            while True:
                # Re-arm before draining, so a wake-up during send_all is not lost.
                self._wake_event = trio.Event()
                self._woken = False
                writes = self.writes
                if not await self._send_pending():
                    # Nothing more to say: half-close, so the peer's reader sees
                    # the end instead of waiting for our socket to close.
                    if isinstance(stream, trio.SocketStream):
                        await stream.send_eof()
                    return
                self._process()
                waited_from = self._turns.count
                self._writer_idle = True
                try:
                    await self._wake_event.wait()
                finally:
                    self._writer_idle = False
                if self.writes != writes and self._produced_at - waited_from <= 1:
                    # Replies came while it wrote, or just after: a busy spell.
                    await self._gather()
        except _IO_ERRORS:
            if transport.pending() >= 0:
                transport.close_head()
        finally:
            self._process()
            self._writer_done.set()

    async def _gather(self) -> None:
        """Let the replies of a busy spell gather before they are written.

        Replies of tasks that run one after another come one loop turn apart,
        and writing each as it comes costs a socket write (and often a wake-up
        of the peer) per reply. So when replies came while the writer was
        writing (or a turn after it wrote), it waits while they keep coming:
        until a whole turn adds none, GATHER_BYTES are waiting, or for
        GATHER_TURNS turns at most. A reply after a quiet spell (a lone one) is
        written at once, as is everything that is not a reply: a one-way
        sender waits on the credit and settlements it carries (gathering those
        too cost one-way tells a quarter of their throughput).
        """
        turns = self._turns
        until = turns.count + GATHER_TURNS
        while turns.count < until:
            await trio.lowlevel.checkpoint()
            if turns.count - self._produced_at >= 2:
                return  # the whole last turn added nothing
            if self.transport.pending() >= GATHER_BYTES:
                return  # enough for a write of its own: no reason to wait

    async def _send_pending(self) -> bool:
        """Write what the engine has to send now, in one write. False once its
        output is closed. (What is added while the write is under way waits for
        the next call: the writer gathers it in a busy spell.)"""
        transport = self.transport
        lock = self._send_lock
        if lock.locked():
            await lock.acquire()
        else:
            lock.acquire_nowait()  # no checkpoint: the send below has one
        try:
            carry, self._carry = self._carry, b""
            data, open_ = take_output(self.transport)
            if data:
                self.sent_bytes += len(data)
                self.writes += 1
            data = carry + data if carry else data
            if data:
                await self.stream.send_all(data)
            return open_
        except _IO_ERRORS:
            if transport.pending() >= 0:
                transport.close_head()
            self._wake_event.set()
            return True  # the writer task sees the closed head next
        finally:
            lock.release()


def socket_fd(stream: trio.abc.Stream) -> int:
    """The file descriptor of a socket stream; -1 for another kind of stream."""
    return stream.socket.fileno() if isinstance(stream, trio.SocketStream) else -1


def take_output(transport: Transport) -> tuple[bytes, bool]:
    """Pop all the engine has to send now: (the bytes, whether its output is
    still open). Frames are encoded here: proton makes output lazily."""
    chunks: list[bytes] = []
    while (size := transport.pending()) > 0:
        chunk = transport.peek(size)
        transport.pop(size)
        if chunk:
            chunks.append(chunk)
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    return data, size == 0


def write_nowait(fd: int, data: bytes) -> int:
    """Write ``data`` to the non-blocking socket ``fd`` without waiting: how
    many bytes it took (0 when it is full, or failed: then the writer's own
    send meets the error, and ends the connection)."""
    try:
        return os.write(fd, data)
    except OSError:  # BlockingIOError among them
        return 0
