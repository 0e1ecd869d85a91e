"""An actor's own tasks besides its handlers: timers and the like.

An actor starts one with :meth:`Actor.start_soon` (in ``on_start`` or in a
handler). It belongs to the actor's current incarnation: it runs in the nursery
the actor's turns run in, it is cancelled (and waited for) before ``on_stop``
when the actor stops or its supervisor stops it to start it again, and an
exception from it crashes the actor, as one from the actor's own code does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import final

import trio

__all__ = ["Background", "TaskFn"]

#: What an actor runs as a task of its own: ``await fn(*args)``.
TaskFn = Callable[..., Awaitable[object]]


@final
class Background:
    """The tasks one actor runs besides its handlers (its cell owns it)."""

    __slots__ = ("_running",)

    def __init__(self) -> None:
        self._running: dict[trio.CancelScope, trio.Event] = {}

    def __len__(self) -> int:
        return len(self._running)

    def start_soon(
        self,
        nursery: trio.Nursery,
        fn: TaskFn,
        args: tuple[object, ...],
        on_error: Callable[[Exception], Awaitable[None]],
    ) -> None:
        """Run ``fn(*args)`` in ``nursery``; ``on_error`` gets what it raises."""
        scope = trio.CancelScope()
        done = trio.Event()
        self._running[scope] = done
        nursery.start_soon(self._run, scope, done, fn, args, on_error)

    async def cancel(self, reason: str) -> None:
        """Cancel every task and wait until each is gone."""
        running = list(self._running.items())
        for scope, _ in running:
            scope.cancel(reason=reason)
        for _, done in running:
            await done.wait()

    async def _run(
        self,
        scope: trio.CancelScope,
        done: trio.Event,
        fn: TaskFn,
        args: tuple[object, ...],
        on_error: Callable[[Exception], Awaitable[None]],
    ) -> None:
        error: Exception | None = None
        try:
            with scope:
                await fn(*args)
        except Exception as exc:
            error = exc
        finally:
            del self._running[scope]
            done.set()
        if error is not None:
            await on_error(error)
