"""A boxed worker's runtime side: its requests and the processes that serve them.

:class:`Boxed` holds the requests waiting for a process (a queue shared by its
processes) and runs a supervisor of ``instances`` processes
(:class:`~._boxed_process.BoxedRun`, one per start). :meth:`Boxed.call` queues a
request and waits for its reply; a request whose process dies under it goes
back to the front of the queue (at-least-once); one that was alone in flight
when its process died is to blame, and fails after the spec's ``redeliveries``
such deaths (a request that kills every process it reaches). A request's hard
time limit counts from when a process takes it, afresh on each run (a wait in
the queue, for a restart's backoff, does not count). A caller that stops
waiting (its time limit) has the process killed: a request cannot be taken
back from a process that may be hung in it.
docs/boxed.md is the protocol and what happens on each failure.
"""

from __future__ import annotations

import functools
import itertools
from collections import deque
from typing import Any, final

import attrs
import trio

from .._errors import ActorctlError, RemoteError
from .._log import log
from ._boxed_call import Call
from ._boxed_process import BoxedRun
from ._boxed_spec import BoxedSpec
from ._child import ChildSpec, ChildState, Restart
from ._status import TreeRow
from ._supervisor import Supervisor

__all__ = ["Boxed", "BoxedUnavailable", "Call"]


class BoxedUnavailable(ActorctlError):
    """A boxed worker stopped for good (its supervisor gave up, or it was stopped)."""


@final
class Boxed:
    """The requests of one boxed worker, and the supervisor of its processes.

    Args:
        spec: what to run and its limits.
        stopping: set when its node begins to stop: a process that ends then
            is not started again.
    """

    def __init__(self, spec: BoxedSpec, stopping: trio.Event | None = None) -> None:
        self.spec = spec
        self._stopping = stopping
        self.handlers: frozenset[str] | None = None  # from the first hello
        self._queue: deque[Call] = deque()
        self._lot = trio.lowlevel.ParkingLot()
        self._ids = itertools.count(1)
        self.runs: dict[int, BoxedRun] = {}  # slot -> its current process
        self.supervisor: Supervisor | None = None
        self._stopped: str | None = None

    # -- callers -------------------------------------------------------------------

    async def call(
        self,
        handler: str,
        args: list[Any],
        kwargs: dict[str, Any],
        *,
        time_limit: float | None = None,
        trace: str | None = None,
    ) -> Any:
        """Run ``handler`` in one of the processes; its value.

        The time limit (the least of ``time_limit`` and the spec's) bounds each
        run: it counts from when a process takes the request, and afresh when a
        request whose process died is taken again. Past it, or when this is
        cancelled while the request is in flight, the process that runs it is
        killed (SIGTERM, then SIGKILL after the grace period).

        Raises:
            RemoteError: the handler failed (its type and message), ran past its
                time limit (``TimeLimitExceeded``), or the worker serves no such
                handler (``UnknownHandler``).
            BoxedUnavailable: the worker stopped for good.
        """
        if self._stopped is not None:
            raise BoxedUnavailable(f"boxed worker {self.spec.name!r} stopped: {self._stopped}")
        if self.handlers is not None and handler not in self.handlers:
            raise RemoteError("UnknownHandler", self.no_handler(handler))
        limits = [t for t in (time_limit, self.spec.time_limit) if t is not None]
        limit = min(limits) if limits else None
        call = Call(f"{self.spec.name}-{next(self._ids)}", handler, args, kwargs, limit, trace)
        self._queue.append(call)
        self._lot.unpark_all()
        with trio.CancelScope() as scope:  # a deadline only while a process runs it
            call.scope = scope
            try:
                await call.done.wait()
            except trio.Cancelled:
                why = "its caller stopped waiting"
                if scope.cancel_called:
                    why = f"it ran past its time limit ({limit:g} s)"
                self._abandon(call, why)
                raise
        if scope.cancelled_caught:
            raise RemoteError(
                "TimeLimitExceeded",
                f"{handler} ran past its hard time limit ({limit:g} s, counted from when "
                f"a process took it): boxed worker {self.spec.name!r} killed the process "
                "that ran it",
            )
        if call.error is not None:
            raise RemoteError(*call.error)
        return call.value

    def no_handler(self, handler: str) -> str:
        """Why ``handler`` is refused: the handlers its processes' hellos listed."""
        served = ", ".join(sorted(self.handlers or ())) or "none"
        return (
            f"boxed worker {self.spec.name!r} serves no handler {handler!r} "
            f"(its hello listed: {served})"
        )

    def _abandon(self, call: Call, why: str) -> None:
        if call.done.is_set():
            return
        run = call.run
        call.finish(error=("Cancelled", why))
        if call in self._queue:
            self._queue.remove(call)
        elif run is not None:
            run.kill(f"request {call.id} ({call.handler}): {why}", call)

    # -- processes -----------------------------------------------------------------

    async def next_call(self) -> Call:
        """The next request for a process that has room for one."""
        while not self._queue:
            await self._lot.park()
        return self._queue.popleft()

    def queued(self) -> int:
        """Requests waiting for a process."""
        return len(self._queue)

    def take(self) -> Call:
        """The next request waiting (there is one: see :meth:`queued`)."""
        return self._queue.popleft()

    def give_back(self, calls: list[Call], why: str, *, counts: bool) -> None:
        """Requests in flight on a process that ended: to the front of the queue
        (oldest first), or failed once they have been given back too often."""
        for call in reversed(calls):
            if call.done.is_set():
                continue
            call.wait_again()
            if counts:
                call.attempts += 1
            if call.attempts > self.spec.redeliveries:
                call.finish(
                    error=(
                        "BoxedProcessError",
                        f"boxed worker {self.spec.name!r}: its process died {call.attempts} "
                        f"times while running {call.handler} (last: {why})",
                    )
                )
                continue
            log("actorctl:boxed:redeliver", boxed=self.spec.name, request=call.id, reason=why)
            self._queue.appendleft(call)
        if self._queue:
            self._lot.unpark_all()

    def said_hello(self, handlers: frozenset[str]) -> None:
        self.handlers = handlers if self.handlers is None else self.handlers | handlers

    async def supervise(
        self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run the processes under a supervisor (a child start function): ready
        once every process said hello; fails to its parent past its intensity.

        Raises:
            SupervisorGaveUp: the processes failed more often than allowed.
        """
        spec = self.spec
        children = [
            ChildSpec(
                f"{spec.name}/{slot}",
                functools.partial(self._run_process, BoxedRun, slot),
                Restart.PERMANENT,
                kind="process",
            )
            for slot in range(1, spec.instances + 1)
        ]
        self.supervisor = Supervisor(
            spec.name,
            children,
            max_restarts=spec.max_restarts,
            within=spec.within,
            backoff=spec.backoff,
            backoff_max=spec.backoff_max,
            stopping=self._stopping,
        )
        self._stopped = None
        try:
            await self.supervisor.run(task_status=task_status)
        except BaseException as exc:
            self.stop(f"{type(exc).__name__}: {exc}")
            raise
        self.stop("stopped")

    async def _run_process(
        self, make: type[BoxedRun], slot: int, *, task_status: trio.TaskStatus[None]
    ) -> None:
        run = make(self, slot)
        self.runs[slot] = run
        await run.run(task_status=task_status)

    def stop(self, why: str) -> None:
        """It stops for good: every request waiting fails."""
        self._stopped = why
        while self._queue:
            self._queue.popleft().finish(
                error=("BoxedUnavailable", f"boxed worker {self.spec.name!r} stopped: {why}")
            )

    # -- what cluster status shows ---------------------------------------------------

    def detail(self, row: TreeRow) -> TreeRow:
        """Its tree row ``row`` with its command, queue, requests in flight and
        processes (pid, state, restarts, requests in flight)."""
        children = self.supervisor.child_rows() if self.supervisor is not None else []
        processes = []
        for slot, child in enumerate(children, start=1):
            run = self.runs.get(slot)
            processes.append(
                attrs.evolve(
                    child,
                    pid=run.pid if run is not None and child.state == ChildState.RUNNING else None,
                    in_flight=len(run.in_flight) if run is not None else 0,
                )
            )
        return attrs.evolve(
            row,
            command=tuple(self.spec.command),
            queued=len(self._queue),
            in_flight=sum(len(run.in_flight) for run in self.runs.values()),
            children=tuple(processes),
        )
