"""One process of a boxed worker, from its start to its end (docs/boxed.md).

A :class:`BoxedRun` starts the process, waits for its ``hello``, then runs four
tasks until the process ends or must be killed: the reader (stdout, one JSON
record a line), the feeder (requests from the shared queue, as many at once as
its concurrency), the watchdog (heartbeats) and the stderr pump (each line a
log line with the worker's name and pid). Whatever ends it, the process is
gone when ``run`` returns or raises, and its requests in flight are back in the
queue (or failed, per ``Boxed.give_back``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import resource
import signal
import subprocess
from collections.abc import Callable
from typing import Any, Final, Protocol, final

import trio

from .._errors import ActorctlError
from .._log import log
from ._boxed_call import Call
from ._boxed_spec import PROTOCOL_VERSION, BoxedSpec

__all__ = ["BoxedFailed", "BoxedRun"]

#: Exit code by which a worker says it ran out of memory (docs/boxed.md).
OUT_OF_MEMORY: Final = 3
_STDERR_LINE: Final = 4096


class Requests(Protocol):
    """What a process needs of its boxed worker (``Boxed``): the requests."""

    @property
    def spec(self) -> BoxedSpec: ...

    async def next_call(self) -> Call: ...

    def queued(self) -> int: ...

    def take(self) -> Call: ...

    def give_back(self, calls: list[Call], why: str, *, counts: bool) -> None: ...

    def said_hello(self, handlers: frozenset[str]) -> None: ...


class BoxedFailed(ActorctlError):
    """A boxed process ended, or was killed, while it should have been serving."""


@final
class BoxedRun:
    """One start of one process of ``boxed`` (its ``slot``: 1, 2, ...)."""

    def __init__(self, boxed: Requests, slot: int) -> None:
        self.boxed = boxed
        self.spec = boxed.spec
        self.slot = slot
        self.pid: int | None = None
        self.in_flight: dict[str, Call] = {}
        self._process: trio.Process | None = None
        self._why: str | None = None  # why it must die (None: not yet)
        self._innocent = False  # killed for one request: the others are not to blame
        self._cancelled: list[str] = []  # requests given up on: told before the kill
        self._scope = trio.CancelScope()
        self._write_lock = trio.Lock()
        self._last_seen = 0.0
        self._last_stderr = ""

    @property
    def name(self) -> str:
        return f"{self.spec.name}/{self.slot}"

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the process, serve until it ends.

        Raises:
            BoxedFailed: it ended by itself or had to be killed (why, in the message).
        """
        spec = self.spec
        env = None if spec.env is None else {**os.environ, **spec.env}
        limit = spec.memory_bytes
        try:
            process = await trio.lowlevel.open_process(
                list(spec.command),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=spec.cwd,
                env=env,
                preexec_fn=None if limit is None else _address_space(limit),
            )
        except OSError as exc:
            where = f" in {spec.cwd}" if spec.cwd else ""
            raise BoxedFailed(
                f"boxed worker {self.name}: cannot run {list(spec.command)}{where}: "
                f"{exc.strerror or exc}"
            ) from None
        self._process, self.pid = process, process.pid
        log("actorctl:boxed:started", boxed=self.name, pid=process.pid, command=spec.command)
        stopped = False
        try:
            with self._scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump_stderr, process)
                    lines = _Lines(process, spec.max_record)
                    if await self._hello(lines):
                        task_status.started()
                        nursery.start_soon(self._feed)
                        if spec.heartbeat > 0:
                            nursery.start_soon(self._watch)
                        await self._read(lines)
                    nursery.cancel_scope.cancel(reason=self._why or "its stdout ended")
        except BaseException:  # Cancelled (perhaps in a group): its supervisor stops it
            stopped = self._why is None
            raise
        finally:
            with trio.CancelScope(shield=True):
                why = await self._end(process, stopped)
        if why is None:
            return
        raise BoxedFailed(f"boxed process {self.name} (pid {process.pid}) {why}")

    # -- the start --------------------------------------------------------------------

    async def _hello(self, lines: _Lines) -> bool:
        spec = self.spec
        with trio.move_on_after(spec.start_timeout):
            line = await self._next(lines)
            record = self._decode(line) if line is not None else None
            if line is None or record is None:
                self._fail(self._why or "ended before it said hello")
                return False
            handlers = record.get("handlers")
            if (
                record.get("type") != "hello"
                or not isinstance(handlers, list)
                or not all(isinstance(h, str) for h in handlers)
            ):
                self._fail(f"said {line[:120]!r} first: expected a hello record with its handlers")
                return False
            concurrency = record.get("concurrency", 1)
            if type(concurrency) is not int or concurrency < 1:
                concurrency = 1
            if spec.concurrency is not None:
                concurrency = min(concurrency, spec.concurrency)
            self._slots = trio.Semaphore(concurrency)
            self.boxed.said_hello(frozenset(handlers))
            self._last_seen = trio.current_time()
            log(
                "actorctl:boxed:hello",
                boxed=self.name,
                pid=self.pid,
                handlers=handlers,
                concurrency=concurrency,
                protocol=record.get("protocol"),
                runtime_protocol=PROTOCOL_VERSION,
            )
            return True
        self._fail(f"said no hello within {spec.start_timeout:g} s")
        return False

    # -- its tasks ----------------------------------------------------------------------

    async def _read(self, lines: _Lines) -> None:
        while True:
            line = await self._next(lines)
            if line is None:
                return  # EOF (or an oversize record: _why says which)
            record = self._decode(line)
            if record is None:
                return
            self._last_seen = trio.current_time()
            kind = record.get("type")
            if kind == "reply":
                self._reply(record)
            elif kind != "heartbeat":
                log("actorctl:boxed:bad-record", boxed=self.name, pid=self.pid, record=line[:200])

    async def _next(self, lines: _Lines) -> bytes | None:
        try:
            return await lines.next()
        except _Oversize:
            self._fail(f"wrote a record longer than max_record ({self.spec.max_record} bytes)")
            return None

    def _reply(self, record: dict[str, Any]) -> None:
        call = self.in_flight.pop(str(record.get("id")), None)
        if call is None:
            log("actorctl:boxed:bad-record", boxed=self.name, pid=self.pid,
                why="a reply to no request in flight", id=record.get("id"))  # fmt: skip
            return
        self._slots.release()
        error = record.get("error")
        if "value" in record and error is None:
            call.finish(record["value"])
        elif isinstance(error, dict):
            call.finish(error=(str(error.get("type") or "Error"), str(error.get("message", ""))))
        else:
            call.finish(
                error=("BoxedProtocolError", f"boxed worker {self.name} replied without a "
                       f"value or an error: {json.dumps(record)[:200]}")
            )  # fmt: skip

    async def _feed(self) -> None:
        """Send requests as slots free up: all that wait and fit in one write."""
        while True:
            await self._slots.acquire()
            batch = [await self.boxed.next_call()]
            while self.boxed.queued():
                try:
                    self._slots.acquire_nowait()
                except trio.WouldBlock:
                    break
                batch.append(self.boxed.take())
            for call in batch:
                if call.done.is_set():  # given up on while it waited
                    self._slots.release()
                    continue
                call.start(self)  # its time limit counts from here
                self.in_flight[call.id] = call
            records = [call.record() for call in batch if call.run is self]
            if records and not await self._send(*records):
                return

    async def _watch(self) -> None:
        every = self.spec.heartbeat
        pinged = -math.inf
        while True:
            now = trio.current_time()
            if now >= self._last_seen + 2 * every:
                silent = now - self._last_seen
                self._fail(f"hung: said nothing for {silent:.1f} s (heartbeat every {every:g} s)")
                return
            if now >= self._last_seen + every and pinged < self._last_seen:
                pinged = now
                await self._send({"type": "heartbeat"})
            due = self._last_seen + (every if now < self._last_seen + every else 2 * every)
            await trio.sleep_until(due)

    async def _pump_stderr(self, process: trio.Process) -> None:
        assert process.stderr is not None
        buffer = b""
        async for chunk in process.stderr:
            buffer += chunk
            *whole, buffer = buffer.split(b"\n")
            if len(buffer) > _STDERR_LINE:
                whole.append(buffer)
                buffer = b""
            for raw in whole:
                line = raw.decode(errors="replace").rstrip()[:_STDERR_LINE]
                if line:
                    self._last_stderr = line
                    log("actorctl:boxed:stderr", boxed=self.name, pid=self.pid, line=line)

    async def _send(self, *records: dict[str, Any]) -> bool:
        """Write ``records``, a line each, in one write: False if it is gone."""
        process = self._process
        assert process is not None
        assert process.stdin is not None
        data = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records).encode()
        try:
            async with self._write_lock:
                await process.stdin.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False  # it is gone: the reader sees the end
        return True

    # -- its end ------------------------------------------------------------------------

    def kill(self, why: str, call: Call | None = None) -> None:
        """Kill it (from another task): one request's limit, or a bad record."""
        if call is not None:
            self.in_flight.pop(call.id, None)
            self._cancelled.append(call.id)
            self._innocent = True
        self._fail(why)

    def _fail(self, why: str) -> None:
        if self._why is None:
            self._why = why
        self._scope.cancel(reason=why)

    def _decode(self, line: bytes) -> dict[str, Any] | None:
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            self._fail(f"wrote garbage on stdout (not a JSON record): {line[:120]!r}")
            return None
        return record

    async def _end(self, process: trio.Process, stopped: bool) -> str | None:
        """Stop the process (asked or killed) and give its requests back; why
        it failed, or None for a normal end."""
        why = self._why
        if stopped:  # its supervisor stops it: ask first, then signals
            with trio.move_on_after(self.spec.grace):
                await self._send({"type": "shutdown"})
                _close(process)
                await process.wait()
        elif why is None:  # it ended by itself: collect its code
            with trio.move_on_after(self.spec.grace):
                await process.wait()
        if process.returncode is None and self._cancelled:
            with trio.move_on_after(0.1):  # a hung worker may not read it: no matter
                for call_id in self._cancelled:
                    await self._send({"type": "cancel", "id": call_id})
        if process.returncode is None:
            level = "killed" if why is not None else "stopped"
            log(f"actorctl:boxed:{level}", boxed=self.name, pid=process.pid, reason=why or "stop")
            await _terminate(process, self.spec.grace)
        _close(process)
        with trio.move_on_after(0.5):  # what it said last, for the log and the reason
            await self._pump_stderr(process)
        code = process.returncode
        if why is None and not stopped:
            why = self._exit_reason(code)
        calls = list(self.in_flight.values())
        self.in_flight.clear()
        # Only a request alone in flight is to blame for its process's death.
        blame = not self._innocent and len(calls) == 1
        self.boxed.give_back(calls, why or "stopped", counts=blame)
        log("actorctl:boxed:exited", boxed=self.name, pid=process.pid, code=code,
            reason=why or "stopped")  # fmt: skip
        return None if stopped else why

    def _exit_reason(self, code: int | None) -> str | None:
        if code == 0 and not self.in_flight:
            return None
        if code is not None and code < 0:
            how = f"was killed by signal {signal.Signals(-code).name}"
        elif code == OUT_OF_MEMORY:  # the worker's word for it, limit or not
            how = f"exited with code {code}: out of memory"
            if self.spec.memory_limit is not None:
                how += f" (its memory limit is {self.spec.memory_limit:g} MiB)"
        else:
            how = f"exited with code {code}"
        last = f" (its last stderr line: {self._last_stderr!r})" if self._last_stderr else ""
        return how + last


class _Oversize(Exception):
    """A line longer than the limit."""


@final
class _Lines:
    """stdout, one line at a time, each at most ``limit`` bytes."""

    def __init__(self, process: trio.Process, limit: int) -> None:
        assert process.stdout is not None
        self._stream = process.stdout
        self._limit = limit
        self._buffer = bytearray()

    async def next(self) -> bytes | None:
        """The next line without its newline; None at EOF.

        Raises:
            _Oversize: the line is longer than the limit.
        """
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                if len(line) > self._limit:
                    raise _Oversize
                return line
            if len(self._buffer) > self._limit:
                raise _Oversize
            chunk = await self._stream.receive_some(65536)
            if not chunk:
                return None
            self._buffer += chunk


def _address_space(limit: int) -> Callable[[], None]:
    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return preexec


def _close(process: trio.Process) -> None:
    close = getattr(process.stdin, "close", None)
    if close is not None:
        with contextlib.suppress(OSError):  # it is gone already
            close()


async def _terminate(process: trio.Process, grace: float) -> None:
    process.terminate()
    with trio.move_on_after(grace):
        await process.wait()
        return
    process.kill()
    await process.wait()
