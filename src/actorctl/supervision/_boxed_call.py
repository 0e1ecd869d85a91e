"""One request to a boxed worker, from its queue to its reply (docs/boxed.md).

Its hard time limit bounds each run, not the wait for a process: it counts
from when a process takes the request, afresh when a request given back (its
process died) is taken again; while it waits in the queue (behind others, or
for a restart's backoff) its caller's scope has no deadline.
"""

from __future__ import annotations

import math
import time
from typing import Any, Protocol, final

import trio

__all__ = ["Call", "Killable"]


class Killable(Protocol):
    """The process a request is in flight on."""

    def kill(self, why: str, call: Call | None = None) -> None: ...


@final
class Call:
    """One request: queued, then in flight on one process, then done."""

    __slots__ = (
        "args", "attempts", "deadline", "done", "error", "handler", "id", "kwargs",
        "limit", "run", "scope", "trace", "value",
    )  # fmt: skip

    def __init__(
        self,
        call_id: str,
        handler: str,
        args: list[Any],
        kwargs: dict[str, Any],
        limit: float | None,
        trace: str | None,
    ) -> None:
        self.id = call_id
        self.handler = handler
        self.args = args
        self.kwargs = kwargs
        self.limit = limit  # seconds a run may take (None: no limit)
        self.deadline: float | None = None  # of this run, in seconds since the epoch
        self.scope: trio.CancelScope | None = None  # its caller's wait: see start()
        self.trace = trace
        self.done = trio.Event()
        self.value: Any = None
        self.error: tuple[str, str] | None = None
        self.attempts = 0  # processes that died while it was in flight
        self.run: Killable | None = None  # the process it is in flight on

    def start(self, run: Killable) -> None:
        """A process takes it: its time limit starts now (its caller's scope)."""
        self.run = run
        if self.limit is None:
            return
        self.deadline = time.time() + self.limit
        if self.scope is not None:
            self.scope.deadline = trio.current_time() + self.limit

    def wait_again(self) -> None:
        """Back in the queue: the wait for the next process does not count."""
        self.run = None
        self.deadline = None
        if self.scope is not None:
            self.scope.deadline = math.inf

    def record(self) -> dict[str, Any]:
        return {
            "type": "request",
            "id": self.id,
            "handler": self.handler,
            "args": self.args,
            "kwargs": self.kwargs,
            "deadline": self.deadline,
            "trace": self.trace,
        }

    def finish(self, value: Any = None, error: tuple[str, str] | None = None) -> None:
        if not self.done.is_set():
            self.value, self.error = value, error
            self.run = None
            self.done.set()
