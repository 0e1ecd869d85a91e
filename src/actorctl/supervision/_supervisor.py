"""Supervisors with OTP semantics, on trio.

A supervisor starts its children in order, each in a cancel scope of its own,
and learns of a child's end by the child's task returning or raising into it:
no polling. It then applies the child's restart type (permanent, transient,
temporary) and its own strategy (one-for-one, one-for-all, rest-for-one),
waiting an exponentially growing backoff between restarts. More than
``max_restarts`` restarts within ``within`` seconds is more than it may absorb:
it stops its children in reverse start order and fails to its own parent with
:class:`SupervisorGaveUp`. A supervisor's ``run`` is itself a child start
function, so supervisors nest.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, final

import attrs
import trio

from .._errors import ActorctlError
from .._log import log

__all__ = [
    "ChildFailedToStart",
    "ChildSpec",
    "Restart",
    "Strategy",
    "Supervisor",
    "SupervisorGaveUp",
]

#: How a child is started: an async function that calls ``task_status.started()``
#: once it is ready (trio's ``nursery.start`` protocol) and runs until it is done.
StartFn = Callable[..., Awaitable[Any]]


class Restart(enum.Enum):
    """When a child that ended is started again (OTP's restart types)."""

    PERMANENT = "permanent"  #: always
    TRANSIENT = "transient"  #: only if it failed (raised)
    TEMPORARY = "temporary"  #: never


class Strategy(enum.Enum):
    """Which children are restarted when one ends (OTP's strategies)."""

    ONE_FOR_ONE = "one_for_one"  #: only that child
    ONE_FOR_ALL = "one_for_all"  #: all of them
    REST_FOR_ONE = "rest_for_one"  #: that child and those started after it


class ChildFailedToStart(ActorctlError):
    """A child failed before it said it was ready."""

    def __init__(self, child: str, reason: str) -> None:
        super().__init__(f"child {child!r} failed to start: {reason}")
        self.child = child
        self.reason = reason


class SupervisorGaveUp(ActorctlError):
    """A supervisor restarted its children more often than its intensity allows."""

    def __init__(self, name: str, restarts: int, within: float, last: str) -> None:
        super().__init__(
            f"supervisor {name!r} gave up: more than {restarts} restarts within "
            f"{within:g} s (last: {last})"
        )
        self.supervisor = name
        self.last = last


@final
@attrs.frozen
class ChildSpec:
    """One child of a supervisor.

    Attributes:
        name: unique among the supervisor's children; used in logs.
        start: ``async def start(*, task_status)``: starts the child, calls
            ``task_status.started()`` when it is ready, and returns when it is done.
        restart: when it is started again after it ended.

    A child is stopped by cancelling its scope: its ``finally`` blocks run (shield
    what must finish), then it is gone.
    """

    name: str
    start: StartFn
    restart: Restart = Restart.PERMANENT


@final
class _Running:
    """A child while it runs: its scope, and how it ended."""

    __slots__ = ("done", "error", "scope", "spec")

    def __init__(self, spec: ChildSpec) -> None:
        self.spec = spec
        self.scope = trio.CancelScope()
        self.done = trio.Event()
        self.error: BaseException | None = None


@final
class Supervisor:
    """Supervises children; run it with ``await nursery.start(supervisor.run)``.

    Args:
        name: for logs and errors.
        children: started in this order, stopped in the reverse order.
        strategy: which children are restarted when one ends.
        max_restarts, within: the restart intensity: more than ``max_restarts``
            restarts within ``within`` seconds and the supervisor gives up.
        backoff, backoff_max: seconds before the first restart of a burst,
            doubled for each further restart within the intensity period, at most
            ``backoff_max``.
        auto_shutdown: return once no child is left running (every one ended
            and was not restarted), instead of waiting to be cancelled.
    """

    def __init__(
        self,
        name: str,
        children: Sequence[ChildSpec],
        *,
        strategy: Strategy = Strategy.ONE_FOR_ONE,
        max_restarts: int = 3,
        within: float = 5.0,
        backoff: float = 0.1,
        backoff_max: float = 5.0,
        auto_shutdown: bool = False,
    ) -> None:
        names = [child.name for child in children]
        if len(set(names)) != len(names):
            raise ValueError(f"supervisor {name!r}: child names must be unique, got {names}")
        self.name = name
        self.children = list(children)
        self.strategy = strategy
        self.max_restarts = max_restarts
        self.within = within
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.auto_shutdown = auto_shutdown
        self.restarts: dict[str, int] = {child.name: 0 for child in children}
        self._running: dict[str, _Running] = {}
        self._history: deque[float] = deque()
        self._ended: trio.MemorySendChannel[_Running]
        self._nursery: trio.Nursery | None = None

    async def run(
        self, *, task_status: trio.TaskStatus[Supervisor] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Start every child in order, then supervise them until cancelled.

        Raises:
            SupervisorGaveUp: the restart intensity was exceeded.
        """
        send, receive = trio.open_memory_channel[_Running](math.inf)
        self._ended = send
        gave_up: SupervisorGaveUp | None = None
        async with trio.open_nursery() as outer:
            # Children live in a nursery shielded from this supervisor's own
            # cancellation, so that when it is cancelled it can still stop them
            # one by one, in reverse start order.
            self._nursery = await outer.start(self._host_children)
            try:
                for spec in self.children:
                    await self._start(spec)
                task_status.started(self)
                async for ended in receive:
                    try:
                        await self._child_ended(ended)
                    except SupervisorGaveUp as exc:
                        gave_up = exc
                        break
                    if self.auto_shutdown and not self._running:
                        break
            finally:
                with trio.CancelScope(shield=True):
                    await self._stop_all()
                    self._closing.set()
        if gave_up is not None:
            raise gave_up

    async def _host_children(self, *, task_status: trio.TaskStatus[trio.Nursery]) -> None:
        self._closing = trio.Event()
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                task_status.started(nursery)
                await self._closing.wait()

    # -- children --------------------------------------------------------------------

    async def _start(self, spec: ChildSpec) -> None:
        assert self._nursery is not None
        running = _Running(spec)
        self._running[spec.name] = running
        await self._nursery.start(self._child, running)

    async def _child(self, running: _Running, *, task_status: trio.TaskStatus[None]) -> None:
        started = False

        def mark_started(value: object = None) -> None:
            nonlocal started
            started = True
            task_status.started()

        status = _Status(mark_started)
        try:
            with running.scope:
                await running.spec.start(task_status=status)
        except Exception as exc:
            if not started:
                raise  # it failed to start: the one who started it hears of it
            running.error = exc  # it failed while running: the supervisor's to handle
        finally:
            running.done.set()
        if not started:
            raise ChildFailedToStart(running.spec.name, "it returned before it was ready")
        if not running.scope.cancel_called:
            self._ended.send_nowait(running)

    async def _stop(self, running: _Running) -> None:
        """Stop one child: cancel its scope and wait until it is gone."""
        if running.done.is_set():
            return
        running.scope.cancel(reason=f"stopped by supervisor {self.name!r}")
        await running.done.wait()

    async def _stop_all(self) -> None:
        """Stop every child, in reverse start order."""
        for spec in reversed(self.children):
            running = self._running.pop(spec.name, None)
            if running is not None:
                await self._stop(running)
                log("actorctl:supervisor:stopped-child", supervisor=self.name, child=spec.name)

    # -- policy ---------------------------------------------------------------------

    async def _child_ended(self, ended: _Running) -> None:
        spec = ended.spec
        if self._running.get(spec.name) is not ended:
            return  # an incarnation that was already replaced
        failed = ended.error is not None
        reason = "exited normally" if ended.error is None else _describe(ended.error)
        if spec.restart is Restart.TEMPORARY or (spec.restart is Restart.TRANSIENT and not failed):
            log(
                "actorctl:supervisor:child-ended",
                supervisor=self.name,
                child=spec.name,
                reason=reason,
            )
            del self._running[spec.name]
            return
        now = trio.current_time()
        history = self._history
        while history and now - history[0] > self.within:
            history.popleft()
        if len(history) >= self.max_restarts:
            log(
                "actorctl:supervisor:gave-up",
                supervisor=self.name,
                child=spec.name,
                reason=reason,
                restarts=len(history),
                within=self.within,
            )
            raise SupervisorGaveUp(
                self.name, self.max_restarts, self.within, f"{spec.name}: {reason}"
            )
        history.append(now)
        group = self._to_restart(spec)
        await self._stop_group([child for child in group if child is not spec])
        del self._running[spec.name]
        await trio.sleep(min(self.backoff * 2 ** (len(history) - 1), self.backoff_max))
        for restart in group:
            if restart is not spec and restart.restart is Restart.TEMPORARY:
                self._running.pop(restart.name, None)  # stopped with the others, not restarted
                continue
            self.restarts[restart.name] += 1
            log(
                "actorctl:supervisor:restart",
                supervisor=self.name,
                child=restart.name,
                reason=reason
                if restart is spec
                else f"{spec.name} {reason} ({self.strategy.value})",
                count=self.restarts[restart.name],
            )
            try:
                await self._start(restart)
            except Exception as exc:
                # It failed to start again: that counts as another failure.
                again = _Running(restart)
                again.error = exc
                self._running[restart.name] = again
                await self._child_ended(again)
                return

    def _to_restart(self, spec: ChildSpec) -> list[ChildSpec]:
        """Stop what the strategy says goes with ``spec``; return what to start again,
        in start order."""
        if self.strategy is Strategy.ONE_FOR_ONE:
            return [spec]
        index = self.children.index(spec)
        group = self.children if self.strategy is Strategy.ONE_FOR_ALL else self.children[index:]
        return [child for child in group if child is spec or child.name in self._running]

    async def _stop_group(self, group: list[ChildSpec]) -> None:
        for child in reversed(group):
            running = self._running.get(child.name)
            if running is not None:
                await self._stop(running)


@final
class _Status:
    """The task_status a child's start function gets."""

    def __init__(self, started: Callable[[object], None]) -> None:
        self._started = started

    def started(self, value: object = None) -> None:
        self._started(value)


def _describe(error: BaseException) -> str:
    """``Type: message`` of what a child raised, looking inside groups of one."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}"
