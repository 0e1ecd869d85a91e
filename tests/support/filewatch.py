"""Waiting for what another process writes to files, on the writes themselves.

A test whose cluster runs in other processes learns what they did from files
they write (logs, task records). :class:`FileWatch` wakes on each write to the
files of a directory (Linux inotify), so a test waits for the write it needs,
with a timeout, instead of looking again on a clock. Make the watch before the
first look: a write between the look and the wait then wakes the wait.
"""

from __future__ import annotations

import ctypes
import os
import select
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Final, final

import trio

__all__ = ["FileWatch", "wait_written"]

# inotify(7): what changes a watched directory's files
_IN_MODIFY: Final = 0x002
_IN_CLOSE_WRITE: Final = 0x008
_IN_MOVED_TO: Final = 0x080
_IN_CREATE: Final = 0x100
_EVENTS: Final = _IN_MODIFY | _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE


@final
class FileWatch:
    """Wakes on writes to the files of ``directory`` and of each of ``more``
    (and files made there).

    Use it as a context manager; ``await changed()`` from trio code,
    ``wait_changed(timeout)`` from a thread.
    """

    def __init__(self, directory: Path, *more: Path) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        for watched in (directory, *more):
            if libc.inotify_add_watch(fd, os.fsencode(watched), _EVENTS) < 0:
                error = ctypes.get_errno()
                os.close(fd)
                raise OSError(error, f"inotify_add_watch {watched}")
        self.fd = fd

    def __enter__(self) -> FileWatch:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        os.close(self.fd)

    async def changed(self) -> None:
        """Return once a file of the directory was written since the last call."""
        while not self._drain():
            await trio.lowlevel.wait_readable(self.fd)

    def wait_changed(self, timeout: float) -> None:
        """:meth:`changed` for a thread: return once a write came, or
        ``timeout`` seconds passed (the caller looks again either way)."""
        if not self._drain():
            select.select([self.fd], [], [], max(timeout, 0.0))
            self._drain()

    def _drain(self) -> bool:
        """Read the events that came; whether there were any."""
        came = False
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return came
            came = came or bool(data)


def wait_written(
    what: str | Callable[[], str],
    done: Callable[[], bool],
    directories: Iterable[Path],
    timeout: float,
) -> None:
    """From a thread (not trio): look until ``done()`` holds, again at each
    write to a file of ``directories`` (watched before the first look).

    Raises:
        AssertionError: naming ``what`` (or what it says then), after
            ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    with FileWatch(*directories) as watch:
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                said = what() if callable(what) else what
                raise AssertionError(f"not within {timeout:g} s: {said}")
            watch.wait_changed(left)
