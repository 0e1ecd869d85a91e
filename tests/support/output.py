"""What a child process writes to one of its streams, read as it comes.

One reader for every test that starts a process and waits on what it says
(``cluster up``, ``cluster controller``, ``node run``): :class:`Output` keeps
every byte, and a test waits for a line (:meth:`Output.until`) or for a text
past an offset (:meth:`Output.wait_for`), each with a bound. Either the test
reads as it asks (the stream is read only while it waits: enough for a
process that says little between two waits), or :meth:`Output.run` reads in
a task of its own (the pipe never fills, and the process never blocks on
its next log line).
"""

from __future__ import annotations

import trio

__all__ = ["WAIT", "Output"]

#: Seconds a wait on a process's output may take by default.
WAIT = 30.0


class Output:
    """The bytes a child process writes to ``stream``, and its complete lines;
    ``wait``: the seconds a wait takes at most unless it says otherwise."""

    def __init__(self, stream: trio.abc.ReceiveStream, wait: float = WAIT) -> None:
        self.stream = stream
        self.wait = wait
        self.data = b""  # everything it wrote so far
        self.lines: list[str] = []  # its complete lines so far
        self.ended = False  # it closed the stream
        self._partial = b""
        self._taken = 0  # lines before this one were looked at by until()
        self._running = False  # run() reads: a wait only waits for it
        self._reading = False  # a task is in receive_some (one at a time)
        self._grew = trio.Event()

    async def run(self) -> None:
        """Read to the end of the stream (start it in the test's nursery)."""
        self._running = True
        while not self.ended:
            await self._next()

    async def _next(self) -> None:
        """Read what comes next, or wait until the task reading it has."""
        if self._reading:
            await self._grew.wait()
            return
        self._reading = True
        try:
            chunk = await self.stream.receive_some(65536)
            if chunk:
                self.data += chunk
                *lines, self._partial = (self._partial + chunk).split(b"\n")
                self.lines += [line.decode("utf-8", "replace") for line in lines]
            else:
                self.ended = True
        finally:
            self._reading = False
            self._grew.set()  # (also when cancelled: whoever waits reads next)
            self._grew = trio.Event()

    async def _more(self, waiting_for: object) -> None:
        """Wait until more was read (reading it unless run() does)."""
        assert not self.ended, f"the process ended before it said {waiting_for!r}:\n{self.text()}"
        if self._running:
            await self._grew.wait()
        else:
            await self._next()

    def text(self) -> str:
        """Everything it wrote so far, as text."""
        return self.data.decode("utf-8", "replace")

    async def until(self, text: str, timeout: float | None = None) -> str:
        """The next line (after the last one this returned) that contains ``text``."""
        with trio.fail_after(self.wait if timeout is None else timeout):
            while True:
                while self._taken < len(self.lines):
                    line = self.lines[self._taken]
                    self._taken += 1
                    if text in line:
                        return line
                await self._more(text)

    async def wait_for(
        self, text: str | bytes, after: int = 0, timeout: float | None = None
    ) -> int:
        """Wait until ``text`` is in what it wrote past byte ``after``; the
        offset where it ends."""
        marker = text.encode() if isinstance(text, str) else text
        with trio.fail_after(self.wait if timeout is None else timeout):
            while (at := self.data.find(marker, after)) < 0:
                await self._more(text)
        return at + len(marker)

    async def rest(self, timeout: float | None = None) -> list[str]:
        """Every line, once the process closed the stream."""
        await self.wait_closed(timeout)
        return self.lines

    async def wait_closed(self, timeout: float | None = None) -> None:
        """Wait until the process closed the stream."""
        with trio.fail_after(self.wait if timeout is None else timeout):
            while not self.ended:
                if self._running:
                    await self._grew.wait()
                else:
                    await self._next()
