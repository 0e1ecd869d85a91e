"""A long-running process's log file, written in batches rather than line by line.

A node logs two eliot lines per task it runs (its ``actorctl:task`` action's
start and end: the trace ``actorctl logs --task`` and the web page read).
eliot's ``to_file`` writes and flushes each line as it comes: a write system
call per line in the node, and under ``cluster up`` a wake-up per line in the
process that copies the node's output to its file. On bench/_tasks.py that was
a third of a worker's throughput. :class:`BatchedFile` is the file eliot
writes to instead: the same lines, in the same order, written a batch at a
time while lines come faster than the delay, and at once when they come
slower (a quiet process's lines, such as a node saying it is ready, are not
held back). Its :meth:`BatchedFile.line` is the eliot destination itself (what
``to_file``'s destination does, less its steps per line: the same JSON text).

A busy process's batches cost its writer thread one wake-up each: once it has
written a batch, the thread waits out the delay by itself, so the lines of the
next batch need not wake it (only a full batch does). A batch for a UTF-8 text
file goes to the binary file under it (``raw_of``) as the bytes the lines
were encoded to, not decoded and encoded again.
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import json
import os
import threading
import time
from collections.abc import Callable
from typing import IO, Any, Final, final

from eliot.json import json_default

#: One eliot message as a JSON line, in UTF-8: what eliot's ``to_file`` writes,
#: with the encoder it uses (orjson on CPython, else the standard library's).
_encode: Callable[[dict[str, Any]], bytes]
try:
    import orjson

    _encode = functools.partial(
        orjson.dumps, default=json_default, option=orjson.OPT_APPEND_NEWLINE
    )
except ImportError:  # pragma: no cover (eliot falls back to json alike)

    def _encode(message: dict[str, Any]) -> bytes:
        return (json.dumps(message, default=json_default) + "\n").encode()


__all__ = ["BEHIND", "DELAY", "MOST", "BatchedFile", "raw_of"]

#: The longest a line waits to be written, in seconds: the most a process
#: killed outright (SIGKILL) loses of its log.
DELAY: Final = 0.1
#: The bytes (of UTF-8 text) that make a batch: once they wait, the writer
#: thread writes them at once, without waiting for the delay.
MOST: Final = 1 << 16
#: How many batches may wait while the writer thread is still writing: past
#: ``MOST * BEHIND`` bytes, the line that adds to them writes them all (a
#: process that logs faster than its output is read waits, as it did when
#: every line was written at once).
BEHIND: Final = 4


def raw_of(file: IO[str]) -> IO[bytes] | None:
    """The binary file under the text file ``file`` (its ``buffer``), if text
    written to ``file`` reaches it as its UTF-8 bytes, unchanged (a UTF-8
    file, and lines that end in "\n" on this system); else None."""
    raw = getattr(file, "buffer", None)
    encoding = getattr(file, "encoding", None)
    if raw is None or not isinstance(encoding, str) or os.linesep != "\n":
        return None
    try:
        utf8 = codecs.lookup(encoding).name == "utf-8"
    except LookupError:
        return None
    return raw if utf8 else None


@final
class BatchedFile:
    """Text written to ``file`` in batches: eliot's lines come here.

    A line written while nothing was written for ``delay`` seconds goes to
    ``file`` at once. A line that follows sooner waits, with the lines after
    it, until ``delay`` seconds have passed since the last write, or until
    ``most`` bytes wait: a thread of this object writes them then, so
    that a busy process's thread (a node's event loop) does not wait for the
    write. Only past ``most * BEHIND`` bytes (the file is read slower
    than it is written) does the line that adds to them write them all, by
    its writer's own call. :meth:`close` writes what waits and stops the
    thread: ``log_to`` calls it at exit.

    Every method may be called from any thread (eliot logs from the event
    loop's thread and from worker threads alike); the text reaches ``file``
    in the order it was written.

    ``raw``: the binary file under ``file`` (``raw_of``), that batches are
    written to as bytes (``file`` is flushed first, so that what else was
    written to it comes first).
    """

    def __init__(
        self,
        file: IO[str],
        *,
        delay: float = DELAY,
        most: int = MOST,
        clock: Callable[[], float] = time.monotonic,
        raw: IO[bytes] | None = None,
    ) -> None:
        self._file = file
        self._raw = raw
        # How text becomes the bytes a line waits as: for ``raw``, as ``file``
        # would encode it (what it cannot encode is refused at once, not
        # lost with its batch); else any text, decoded again for ``file``.
        errors = getattr(file, "errors", None) or "strict"  # (a TextIOWrapper's)
        self._errors = "surrogatepass" if raw is None else errors
        self._delay = delay
        self._most = most
        self._clock = clock
        # Lines wait as their UTF-8 bytes (eliot's encoder makes them: a line
        # costs no decode), copied into one buffer per batch: a line's own
        # bytes are freed at once, so a busy loop reuses the same memory for
        # each, where a list of a batch's lines kept hundreds of them alive
        # (fresh memory per line: a microsecond of each, measured; issue 30).
        # A batch is decoded once, by whoever writes it.
        self._waiting = bytearray()
        self._size = 0
        self._written_at = float("-inf")  # by self._clock
        self._closed = False
        # Whether the writer thread waits with no deadline: a line must wake
        # it (else it wakes by itself within the delay: it has just written).
        self._idle = True
        # _lock guards the fields above; _writing keeps writes in order (it
        # is taken first, so a line being logged never waits for a write
        # that someone else makes).
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._writing = threading.Lock()
        self._thread: threading.Thread | None = None

    def write(self, text: str) -> int:
        """Keep ``text`` (one line, as eliot writes it) to be written: at
        once, in a batch later, or with the batch it fills."""
        if not isinstance(text, str):
            # eliot's FileDestination asks with b"" whether a file takes bytes.
            raise TypeError(f"a BatchedFile takes text, not {type(text).__name__}")
        if text:
            self._keep(text.encode("utf-8", self._errors))
        return len(text)

    def line(self, message: dict[str, Any]) -> None:
        """An eliot destination: ``message`` as one JSON line, the text
        eliot's ``to_file`` would write (``log_to`` adds it)."""
        data = _encode(message)
        with self._lock:
            # Most lines of a busy process: lines wait already (the writer is
            # due to write them, or was woken by the line that filled a batch)
            # and this one joins them; any other goes through ``_keep``.
            before = self._size
            size = before + len(data)
            most = self._most
            if (
                before
                and (size < most or (most <= before and size < most * BEHIND))
                and not self._closed
            ):
                self._waiting += data
                self._size = size
                return
        self._keep(data)

    def _keep(self, data: bytes) -> None:
        """Keep ``data`` (a line's text in UTF-8, not empty) to be written
        (:meth:`write`)."""
        with self._lock:
            self._waiting += data
            before = self._size
            self._size = size = before + len(data)
            if self._closed or size >= self._most * BEHIND:
                now = True
            elif size >= self._most:
                if before < self._most:  # a batch is full: the writer writes it now
                    self._wake_writer()
                return
            elif before:  # (lines waited: a line is never empty)
                return  # the writer is already due to write it
            else:
                now = self._clock() - self._written_at >= self._delay
                if not now and self._idle:  # (else it writes it once the delay passes)
                    self._wake_writer()
        if now:
            self.write_waiting()

    def flush(self) -> None:
        """Nothing: eliot calls it after each line, and each line waits for
        its batch (:meth:`write_waiting` writes it now)."""

    def write_waiting(self) -> None:
        """Write every line that waits, now, and flush ``file``."""
        with self._writing:
            with self._lock:
                data, self._waiting, self._size = self._waiting, bytearray(), 0
                if data:
                    self._written_at = self._clock()
            if not data:
                return
            if self._raw is None:
                self._file.write(data.decode("utf-8", "surrogatepass"))
                self._file.flush()
            else:
                self._file.flush()  # (what was written to it as text comes first)
                self._raw.write(data)
                self._raw.flush()

    def close(self) -> None:
        """Write what waits and stop the writer thread; later lines are
        written as they come. ``file`` stays open (it may be stdout); if it
        cannot be written any more (a closed pipe), what waits is dropped, as
        eliot drops a line it cannot write."""
        with self._lock:
            self._closed = True
            self._ready.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with contextlib.suppress(OSError, ValueError):
            self.write_waiting()

    def _wake_writer(self) -> None:
        """(with ``_lock`` held) A line waits: have the writer thread write it
        in time, starting that thread with the first."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._write_when_due, name="actorctl-log", daemon=True
            )
            self._thread.start()
        self._ready.notify()

    def _write_when_due(self) -> None:
        """The writer thread: write what waits once ``delay`` seconds have
        passed since the last write, or at once when a batch is full, until
        :meth:`close`. Once it has written, it waits for the delay to pass
        (a full batch or close ends the wait): a line that comes meanwhile
        is written then, without waking it; only after a delay with no line
        does it wait to be woken."""
        lingered = False  # the delay after its last write waited out
        while True:
            with self._lock:
                if not self._waiting and not self._closed and not lingered:
                    lingered = True
                    self._ready.wait(max(self._written_at + self._delay - self._clock(), 0.0))
                    continue
                while not self._waiting and not self._closed:
                    self._idle = True
                    self._ready.wait()
                self._idle = False
                if self._closed:
                    return  # close() writes what waits
                due = self._written_at + self._delay - self._clock()
                if due > 0 and self._size < self._most:
                    self._ready.wait(due)
                    continue
            lingered = False
            # A file that cannot be written (a closed pipe, a full disk) loses
            # this batch, as eliot loses a line it cannot write; the next may go.
            with contextlib.suppress(OSError, ValueError):
                self.write_waiting()
