"""The vocabulary of supervision: restart types, strategies, child specs, errors."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, final

import attrs
import trio

from .._errors import ActorctlError

__all__ = [
    "Activation",
    "ChildError",
    "ChildFailedToStart",
    "ChildSpec",
    "ChildState",
    "Restart",
    "StartFn",
    "Strategy",
    "SupervisorGaveUp",
    "describe",
]

#: How a child is started: an async function that calls ``task_status.started()``
#: once it is ready (trio's ``nursery.start`` protocol) and runs until it is done.
StartFn = Callable[..., Awaitable[Any]]


class ChildState(enum.StrEnum):
    """Where a supervisor's child is; its value is the word ``which_children``
    and ``cluster status`` show."""

    NEW = "new"  #: not started yet
    RUNNING = "running"
    RESTARTING = "restarting"  #: ended, to be started again after its backoff
    TERMINATED = "terminated"  #: stopped by request (``terminate_child``)
    STOPPED = "stopped"  #: ended, and not started again


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


class ChildError(ActorctlError):
    """A request about a child that cannot be done: no child of that name, a
    name already taken, a child that is (or is not) running."""


class SupervisorGaveUp(ActorctlError):
    """A supervisor restarted its children more often than its intensity allows."""

    def __init__(self, name: str, restarts: int, within: float, last: str) -> None:
        super().__init__(
            f"supervisor {name!r} gave up: more than {restarts} restarts within "
            f"{within:g} s (last: {last})"
        )
        self.supervisor = name
        self.last = last


class Activation(Protocol):
    """A child that needs no task of its own while it is idle (an actor: see
    ``ActorCell.activate``). The supervisor starts it with :meth:`activate`,
    hears of its end through ``on_end``, and stops it with :meth:`deactivate`."""

    async def activate(
        self, nursery: trio.Nursery, on_end: Callable[[BaseException | None], None]
    ) -> None:
        """Start it; run whatever tasks it needs in ``nursery``; tell ``on_end``
        once when it ends by itself (None: normally; else what it failed with).
        Raises what made it fail to start."""
        ...

    async def deactivate(self) -> None:
        """Stop it; ``on_end`` is not told."""
        ...

    def retire(self, why: str = "not started again") -> None:
        """It ended and will not be started again (``why``, for whoever sends
        to it now): let go of what it holds."""
        ...


@final
@attrs.frozen
class ChildSpec:
    """One child of a supervisor.

    Attributes:
        name: unique among the supervisor's children; used in logs.
        start: ``async def start(*, task_status)``: starts the child, calls
            ``task_status.started()`` when it is ready, and returns when it is done.
        restart: when it is started again after it ended.
        kind: what it is, for ``which_children`` (OTP's ``worker`` or
            ``supervisor``; actorctl's trees say ``actor``, ``process``, ``node``).
        activation: if given, how the child is started and stopped instead of
            ``start`` (no task of its own: a node's idle actors cost no task).

    A child is stopped by cancelling its scope: its ``finally`` blocks run (shield
    what must finish), then it is gone.
    """

    name: str
    start: StartFn
    restart: Restart = Restart.PERMANENT
    kind: str = "worker"
    activation: Activation | None = None


@final
class Status:
    """The task_status a child's start function gets."""

    def __init__(self, started: Callable[[object], None]) -> None:
        self._started = started

    def started(self, value: object = None) -> None:
        self._started(value)


@final
class Running:
    """A child while it runs: how it is stopped, and how it ended.

    Small, for a node may supervise a million idle actors: a task child has a
    cancel scope of its own, an activation (an actor) none, and the event a
    supervisor waits on for its end is made only when one waits. Called, it is
    an activation's ``on_end``: ``report`` (one per supervisor, shared by its
    children) hears of it unless its supervisor stopped it.
    """

    __slots__ = ("_done", "_report", "error", "finished", "scope", "spec", "stopped")

    def __init__(self, spec: ChildSpec, report: Callable[[Running], None] | None = None) -> None:
        self.spec = spec
        #: The scope a task child runs in (None: an activation, no task).
        self.scope = trio.CancelScope() if spec.activation is None else None
        self.error: BaseException | None = None
        #: Its supervisor stopped it (what ends it then is no end to handle).
        self.stopped = False
        #: It has ended (or been stopped).
        self.finished = False
        self._done: trio.Event | None = None  # made by the first who waits
        self._report = report

    def __call__(self, error: BaseException | None) -> None:
        """An activation ended by itself (``error``: what it failed with)."""
        self.error = error
        self.finish()
        if not self.stopped and self._report is not None:
            self._report(self)

    def stop(self, reason: str) -> None:
        """Its supervisor stops it: a task child's scope is cancelled."""
        self.stopped = True
        if self.scope is not None:
            self.scope.cancel(reason=reason)

    def finish(self) -> None:
        """It has ended: whoever waits (:meth:`wait_finished`) goes on."""
        self.finished = True
        if self._done is not None:
            self._done.set()

    async def wait_finished(self) -> None:
        """Wait until it has ended (at once if it has)."""
        if self.finished:
            await trio.lowlevel.checkpoint()
            return
        if self._done is None:
            self._done = trio.Event()
        await self._done.wait()


def describe(error: BaseException) -> str:
    """``Type: message`` of what a child raised, looking inside groups of one."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}"
