"""How one call of a task runs on its worker: where, under which limits, and
with which client.

A plain ``def`` runs inline on the node's event loop (a pool with
``threads=False``, as Celery's solo pool runs it) or in one of the pool's
worker threads; an ``async def`` in the worker's own task; a ``boxed`` task in
a process of its own or in its pool's long-lived boxed worker (docs/boxed.md).
Each runs under its time limits (``limits/_limits.py``), with its node's client
as the client of the code it runs, so that ``add.delay()`` inside a task sends
through this node. A run that a revoke's terminate or the hard limit stopped
raises :class:`~..limits._limits.TaskFailure`, saying which.

The worker (``_worker.py``) decides whether a task runs at all, and what
follows it; this module only runs it.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Mapping
from typing import Any, final

import trio

from ..._errors import ActorctlError
from ...supervision import Boxed
from ..app._task import PER_CALL, Task, TaskContext
from ..client._client import TaskClient, using_client
from ..limits._limits import (
    TaskFailure,
    TimeLimits,
    call_boxed,
    run_async,
    run_boxed,
    run_inline,
    run_thread,
)
from ..limits._policies import limits_of
from ..protocol._protocol import H_TIMELIMIT
from ._control import WorkerState

__all__ = ["Runner"]


@final
class Runner:
    """Runs the calls of one worker's tasks.

    Args:
        state: the worker's (shared with its node's ``TaskControl``): what is
            revoked, and the cancel scope of each task running.
        threads: the pool's worker threads (as many as it runs at once).
        inline: plain ``def`` tasks run on the event loop, not in ``threads``.
        boxed: the pool's boxed worker, if it has one.

    """

    __slots__ = ("_block", "_client", "_threads", "_unlimited", "boxed", "inline", "state")

    def __init__(
        self,
        state: WorkerState,
        threads: trio.CapacityLimiter,
        *,
        inline: bool,
        boxed: Boxed | None = None,
    ) -> None:
        self.state = state
        self.inline = inline
        self.boxed = boxed
        self._threads = threads
        self._unlimited = TimeLimits(None, None)  # every run without limits (limits_of)
        self._client: TaskClient | None = None
        # The client as the client of the code a task runs: made once, entered
        # per run (see run).
        self._block: contextlib.AbstractContextManager[TaskClient] | None = None

    def attach(self, client: TaskClient) -> None:
        """Give the runs ``client`` (the node's) as the client of their code:
        once the worker runs (its ``on_start``)."""
        self._client = client
        self._block = using_client(client)

    async def run(
        self,
        task: Task,
        task_id: str,
        retries: int,
        args: list[Any],
        kwargs: dict[str, Any],
        headers: Mapping[str, Any],
    ) -> Any:
        """One run of ``task`` under its limits, with this node's client as the
        client of the code it runs.

        Raises:
            TaskFailure: it ran past its hard limit, or was terminated.
        """
        if task.time_limit is None and task.soft_time_limit is None and H_TIMELIMIT not in headers:
            limits = self._unlimited  # limits_of's usual answer, without the call
        else:
            limits = limits_of(task, headers, self._unlimited)
        if task.bind:
            aborted = functools.partial(self.state.revoked.__contains__, task_id)
            ctx = TaskContext(
                task, task_id, retries=retries, args=args, kwargs=kwargs, aborted=aborted
            )
            args = [ctx, *args]
        if not (task.boxed or task.is_async) and self.inline:
            # A plain def on the event loop's own thread: nothing else runs
            # until it returns, so nothing could cancel it (a revoke's
            # terminate, the hard limit's deadline): no cancel scope to enter.
            # run_inline drops its value if it returned past the hard limit.
            # The worker's one client block serves every inline run: no
            # checkpoint comes between its enter and its exit, so no other
            # run enters it meanwhile.
            with self._block or using_client(self._client_of()):
                if limits is self._unlimited:
                    # No limits: what its context says is the same as none set
                    # (check_soft_time_limit and soft_time_limit do nothing for
                    # either), and a runner's context has none set: run_inline's
                    # set and reset would change nothing.
                    return task.fn(*args, **kwargs)
                return run_inline(functools.partial(task.fn, *args, **kwargs), limits)
        call = functools.partial(task.fn, *args, **kwargs)
        # A long-lived boxed worker counts the hard limit itself, from when one
        # of its processes takes the task (afresh when it runs again after a
        # crash): the wait for a process (a restart's backoff) does not count.
        by_boxed = task.boxed and self.boxed is not None and task.boxed != PER_CALL
        deadline = math.inf if by_boxed else limits.trio_deadline(limits.hard_deadline)
        with using_client(self._client_of()), trio.CancelScope(deadline=deadline) as scope:
            self.state.running[task_id] = scope
            try:
                if task.boxed:
                    return await self._boxed(task, args, kwargs, limits, task_id)
                if task.is_async:
                    return await run_async(call, limits)
                return await run_thread(call, limits, self._threads)
            finally:
                self.state.running.pop(task_id, None)
        if self.state.revoked.get(task_id):
            raise TaskFailure("TaskRevoked", "terminated while running")
        raise TaskFailure(
            "TimeLimitExceeded",
            f"task {task.name} ran past its hard time limit ({limits.hard:g} s) and was stopped"
            + ("" if task.is_async or task.boxed else " (its thread runs on: use boxed=True)"),
        )

    async def _boxed(
        self, task: Task, args: list[Any], kwargs: dict[str, Any], limits: TimeLimits, trace: str
    ) -> Any:
        if self.boxed is None or task.boxed == PER_CALL:
            return await run_boxed(task.name, task.fn, args, kwargs)
        return await call_boxed(self.boxed, task.name, args, kwargs, limits, trace)

    def _client_of(self) -> TaskClient:
        if self._client is None:
            raise ActorctlError("a task runs before its worker started: host the worker on a node")
        return self._client
