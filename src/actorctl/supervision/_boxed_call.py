"""One request to a boxed worker, from its queue to its reply (docs/boxed.md)."""

from __future__ import annotations

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
        "run", "trace", "value",
    )  # fmt: skip

    def __init__(
        self,
        call_id: str,
        handler: str,
        args: list[Any],
        kwargs: dict[str, Any],
        deadline: float | None,
        trace: str | None,
    ) -> None:
        self.id = call_id
        self.handler = handler
        self.args = args
        self.kwargs = kwargs
        self.deadline = deadline  # seconds since the epoch, for the worker
        self.trace = trace
        self.done = trio.Event()
        self.value: Any = None
        self.error: tuple[str, str] | None = None
        self.attempts = 0  # processes that died while it was in flight
        self.run: Killable | None = None  # the process it is in flight on

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
