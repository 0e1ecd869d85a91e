"""Supervisors with OTP semantics, on trio.

A supervisor starts its children in order (or, with ``start_together``, the
first alone and then the others at once), each in a cancel scope of its own,
and learns of a child's end by the child's task returning or raising into it:
no polling. It then applies the child's restart type (permanent, transient,
temporary) and its own strategy (one-for-one, one-for-all, rest-for-one),
waiting an exponentially growing backoff between restarts. More than
``max_restarts`` restarts within ``within`` seconds is more than it may absorb:
it stops its children in reverse start order and fails to its own parent with
:class:`SupervisorGaveUp`. A supervisor's ``run`` is itself a child start
function, so supervisors nest.

While it runs it answers OTP's requests: :meth:`~Supervisor.which_children`,
:meth:`~Supervisor.count_children`, :meth:`~Supervisor.start_child`,
:meth:`~Supervisor.terminate_child`, :meth:`~Supervisor.restart_child` and
:meth:`~Supervisor.delete_child`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, final

import trio

from .._log import log
from ._child import (
    ChildError,
    ChildFailedToStart,
    ChildSpec,
    ChildState,
    Restart,
    Running,
    Status,
    Strategy,
    SupervisorGaveUp,
    describe,
)
from ._status import TreeRow

__all__ = ["Supervisor"]


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
        stopping: once set (its node is stopping), a child that ends is not
            started again, and the supervisor returns when none is left.
        on_gone: called with a child's name and the reason when it ends for good
            (it is not started again): monitors hear of it from here.
        start_together: at :meth:`run`, start the first child alone and then
            every other at once, not one after another (for children that
            need only the first, such as the nodes ``cluster up`` starts);
            ``run`` reports started once each is. One that fails to start
            fails the run, as in order, once the others' starts have ended.
            Stopping, restarts and added children keep their order.
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
        stopping: trio.Event | None = None,
        on_gone: Callable[[str, str], None] | None = None,
        start_together: bool = False,
    ) -> None:
        names = [child.name for child in children]
        if len(set(names)) != len(names):
            raise ValueError(f"supervisor {name!r}: child names must be unique, got {names}")
        self.name = name
        self._initial = list(children)
        self.children = list(children)
        self.strategy = strategy
        self.max_restarts = max_restarts
        self.within = within
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.auto_shutdown = auto_shutdown
        self.restarts: dict[str, int] = {child.name: 0 for child in children}
        #: Each child's state.
        self.states: dict[str, ChildState] = {child.name: ChildState.NEW for child in children}
        self._stopping = stopping
        self._on_gone = on_gone
        self._start_together = start_together
        self._running: dict[str, Running] = {}
        # What each activation's Running tells when it ends: one bound method
        # for every child, not one each.
        self._report = self._activation_ended
        self._history: deque[float] = deque()
        self._lock = trio.Lock()  # one change to the children at a time
        self._ended: trio.MemorySendChannel[Running | None]
        self._nursery: trio.Nursery | None = None

    async def run(
        self, *, task_status: trio.TaskStatus[Supervisor] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Start every child in order, then supervise them until cancelled.

        Each run starts from the children it was made with (as OTP's ``init``
        does: children added by :meth:`start_child` are not started again).

        Raises:
            SupervisorGaveUp: the restart intensity was exceeded.
        """
        self.children = list(self._initial)
        self.states = {child.name: ChildState.NEW for child in self.children}
        self._history.clear()
        send, receive = trio.open_memory_channel[Running | None](math.inf)
        self._ended = send
        gave_up: SupervisorGaveUp | None = None
        async with trio.open_nursery() as outer:
            # Children live in a nursery shielded from this supervisor's own
            # cancellation, so that when it is cancelled it can still stop them
            # one by one, in reverse start order.
            self._nursery = await outer.start(self._host_children)
            if self._stopping is not None:
                outer.start_soon(self._wake_when_stopping, self._stopping)
            try:
                async with self._lock:
                    await self._start_children()
                task_status.started(self)
                async for ended in receive:
                    try:
                        if ended is not None:
                            async with self._lock:
                                await self._child_ended(ended)
                    except SupervisorGaveUp as exc:
                        gave_up = exc
                        break
                    if (self.auto_shutdown or self.stopping) and not self._running:
                        break
            finally:
                why = "stopped with its supervisor"
                if gave_up is not None:
                    why = f"its supervisor gave up ({gave_up.last})"
                elif self.stopping:
                    why = "node stopping"
                with trio.CancelScope(shield=True):
                    await self._stop_all(why)
                    self._closing.set()
                self._nursery = None
                outer.cancel_scope.cancel(reason=f"supervisor {self.name!r} done")
        if gave_up is not None:
            raise gave_up

    @property
    def stopping(self) -> bool:
        return self._stopping is not None and self._stopping.is_set()

    async def _host_children(self, *, task_status: trio.TaskStatus[trio.Nursery]) -> None:
        self._closing = trio.Event()
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                task_status.started(nursery)
                await self._closing.wait()

    async def _wake_when_stopping(self, stopping: trio.Event) -> None:
        await stopping.wait()
        self._ended.send_nowait(None)  # look again: perhaps no child is left

    # -- what OTP's supervisor module offers ------------------------------------------

    def child_rows(self) -> list[TreeRow]:
        """Each child in start order: name, kind, state and restarts."""
        return [
            TreeRow(
                spec.name,
                spec.kind,
                self.states.get(spec.name, ChildState.NEW).value,
                restarts=self.restarts.get(spec.name, 0),
            )
            for spec in self.children
        ]

    def which_children(self) -> list[dict[str, Any]]:
        """:meth:`child_rows` in their wire form (OTP's ``which_children``)."""
        return [row.wire() for row in self.child_rows()]

    def count_children(self) -> dict[str, int]:
        """OTP's counts: specs, active (running), supervisors, workers."""
        return {
            "specs": len(self.children),
            "active": len(self._running),
            "supervisors": sum(1 for c in self.children if c.kind == "supervisor"),
            "workers": sum(1 for c in self.children if c.kind != "supervisor"),
        }

    async def start_child(self, spec: ChildSpec) -> None:
        """Add ``spec`` as the last child and start it.

        Raises:
            ChildError: the name is taken, or the supervisor is not running.
            ChildFailedToStart: it failed before it was ready (it is not added).
        """
        async with self._lock:
            if any(child.name == spec.name for child in self.children):
                raise ChildError(f"supervisor {self.name!r} already has a child {spec.name!r}")
            self.children.append(spec)
            self.restarts.setdefault(spec.name, 0)
            try:
                await self._start(spec)
            except BaseException:
                self.children.remove(spec)
                self._running.pop(spec.name, None)
                self.states.pop(spec.name, None)
                raise

    async def terminate_child(self, name: str) -> None:
        """Stop a child and do not start it again; its spec stays (see
        :meth:`restart_child`, :meth:`delete_child`).

        Raises:
            ChildError: no child of that name.
        """
        async with self._lock:
            self._spec(name)
            running = self._running.pop(name, None)
            if running is not None:
                await self._stop(running)
            self.states[name] = ChildState.TERMINATED
            self._gone(self._spec(name), f"terminated by supervisor {self.name!r}")

    async def restart_child(self, name: str) -> None:
        """Start again a child that was terminated (or ended and was not restarted).

        Raises:
            ChildError: no child of that name, or it is running.
            ChildFailedToStart: it failed before it was ready.
        """
        async with self._lock:
            spec = self._spec(name)
            if name in self._running:
                raise ChildError(f"child {name!r} of {self.name!r} is running: terminate it first")
            await self._start(spec)

    async def delete_child(self, name: str) -> None:
        """Forget a child that is not running.

        Raises:
            ChildError: no child of that name, or it is running.
        """
        async with self._lock:
            spec = self._spec(name)
            if name in self._running:
                raise ChildError(f"child {name!r} of {self.name!r} is running: terminate it first")
            self.children.remove(spec)
            self.states.pop(name, None)

    def _spec(self, name: str) -> ChildSpec:
        if self._nursery is None:
            raise ChildError(f"supervisor {self.name!r} is not running")
        for spec in self.children:
            if spec.name == name:
                return spec
        known = ", ".join(child.name for child in self.children) or "none"
        raise ChildError(f"supervisor {self.name!r} has no child {name!r} (it has: {known})")

    # -- children --------------------------------------------------------------------

    async def _start_children(self) -> None:
        """Start the children of a run: in order, or the first and then the
        others at once (``start_together``); a failure to start is raised
        (the first, once every start has ended)."""
        if not self._start_together or not self.children:
            for spec in self.children:
                await self._start(spec)
            return
        first, *others = self.children
        await self._start(first)
        failed: list[Exception] = []

        async def start(spec: ChildSpec) -> None:
            try:
                await self._start(spec)
            except Exception as exc:  # raised below, once the others' starts ended
                failed.append(exc)

        async with trio.open_nursery() as nursery:
            for spec in others:
                nursery.start_soon(start, spec)
        if failed:
            raise failed[0]

    async def _start(self, spec: ChildSpec) -> None:
        if self._nursery is None:
            raise ChildError(f"supervisor {self.name!r} is not running")
        running = Running(spec, self._report)
        self._running[spec.name] = running
        if spec.activation is not None:
            await spec.activation.activate(self._nursery, running)  # (its on_end)
        else:
            await self._nursery.start(self._child, running)
        self.states[spec.name] = ChildState.RUNNING

    def _activation_ended(self, running: Running) -> None:
        """An activation ended by itself (``Running`` tells, as its ``on_end``)."""
        self._ended.send_nowait(running)

    async def _child(self, running: Running, *, task_status: trio.TaskStatus[None]) -> None:
        started = False

        def mark_started(value: object = None) -> None:
            nonlocal started
            started = True
            task_status.started()

        scope = running.scope
        assert scope is not None  # a task child's
        try:
            with scope:
                await running.spec.start(task_status=Status(mark_started))
        except Exception as exc:
            if not started:
                raise  # it failed to start: the one who started it hears of it
            running.error = exc  # it failed while running: the supervisor's to handle
        finally:
            running.finish()
        if not started:
            raise ChildFailedToStart(running.spec.name, "it returned before it was ready")
        if not running.stopped:
            self._ended.send_nowait(running)

    async def _stop(self, running: Running) -> None:
        """Stop one child: cancel its scope and wait until it is gone."""
        if running.finished:
            return
        running.stop(f"stopped by supervisor {self.name!r}")
        activation = running.spec.activation
        if activation is not None:
            await activation.deactivate()
            running.finish()
        await running.wait_finished()

    async def _stop_all(self, why: str) -> None:
        """Stop every child, in reverse start order."""
        for spec in reversed(self.children):
            running = self._running.pop(spec.name, None)
            if running is not None:
                await self._stop(running)
                self.states[spec.name] = ChildState.STOPPED
                self._gone(spec, why)
                log("actorctl:supervisor:stopped-child", supervisor=self.name, child=spec.name)

    def _gone(self, spec: ChildSpec, reason: str) -> None:
        """``spec``'s child ended for good: let go of it, tell who listens."""
        if spec.activation is not None:
            spec.activation.retire(f"not started again by supervisor {self.name!r}: {reason}")
        if self._on_gone is not None:
            self._on_gone(spec.name, reason)

    # -- policy ---------------------------------------------------------------------

    async def _child_ended(self, ended: Running) -> None:
        spec = ended.spec
        if self._running.get(spec.name) is not ended:
            return  # an incarnation that was already replaced
        failed = ended.error is not None
        reason = "exited normally" if ended.error is None else describe(ended.error)
        if (
            spec.restart is Restart.TEMPORARY
            or (spec.restart is Restart.TRANSIENT and not failed)
            or self.stopping
        ):
            log(
                "actorctl:supervisor:child-ended",
                supervisor=self.name,
                child=spec.name,
                reason=reason,
            )
            del self._running[spec.name]
            self.states[spec.name] = ChildState.STOPPED
            self._gone(spec, reason)
            return
        self._check_intensity(spec, reason)
        group = self._to_restart(spec)
        for child in group:
            self.states[child.name] = ChildState.RESTARTING
        await self._stop_group([child for child in group if child is not spec])
        del self._running[spec.name]
        await trio.sleep(min(self.backoff * 2 ** (len(self._history) - 1), self.backoff_max))
        for restart in group:
            if restart is not spec and restart.restart is Restart.TEMPORARY:
                self._running.pop(restart.name, None)  # stopped with the others, not restarted
                self.states[restart.name] = ChildState.STOPPED
                self._gone(restart, f"stopped with {spec.name} ({self.strategy.value})")
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
                again = Running(restart)
                again.error = exc
                self._running[restart.name] = again
                await self._child_ended(again)
                return

    def _check_intensity(self, spec: ChildSpec, reason: str) -> None:
        """Count one more restart, or give up if that is more than allowed."""
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

    def _to_restart(self, spec: ChildSpec) -> list[ChildSpec]:
        """What the strategy says goes with ``spec``, in start order."""
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
