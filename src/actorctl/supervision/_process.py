"""Boxed processes: an external command, in any language, as a supervised child.

The child is ready once the process is spawned; its exit ends the child (code 0
a normal exit, anything else a failure); stopping the child stops the process
(SIGTERM, then SIGKILL after the spec's ``stop_timeout``).
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
from typing import final

import attrs
import trio

from .._errors import ActorctlError
from .._log import log
from ._specs import ProcessSpec
from ._status import TreeRow

__all__ = ["BoxedProcess", "ProcessExited"]


class ProcessExited(ActorctlError):
    """A boxed process ended with a non-zero code or a signal."""


@final
class BoxedProcess:
    """Runs one :class:`ProcessSpec`; ``run`` is the child's start function."""

    def __init__(self, spec: ProcessSpec, stopping: trio.Event | None = None) -> None:
        self.spec = spec
        self.pid: int | None = None
        self._stopping = stopping

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the process, say so, and wait for it to exit.

        Raises:
            ProcessExited: it exited with a non-zero code (or was killed).
        """
        spec = self.spec
        env = None if spec.env is None else {**os.environ, **spec.env}
        async with trio.open_nursery() as nursery:
            process: trio.Process = await nursery.start(
                functools.partial(
                    trio.run_process,
                    list(spec.command),
                    check=False,
                    stdin=subprocess.DEVNULL,
                    cwd=spec.cwd,
                    env=env,
                    deliver_cancel=self._terminate,
                )
            )
            self.pid = process.pid
            log("actorctl:process:started", child=spec.name, pid=process.pid, command=spec.command)
            task_status.started()
            if self._stopping is not None:
                nursery.start_soon(_cancel_when, self._stopping, nursery.cancel_scope)
            await process.wait()
            nursery.cancel_scope.cancel(reason="the process exited")
        self.pid = None
        code = process.returncode
        log("actorctl:process:exited", child=spec.name, pid=process.pid, code=code)
        if self._stopping is not None and self._stopping.is_set():
            return  # stopped with its node: a normal end
        if code is not None and code != 0:
            how = f"signal {signal.Signals(-code).name}" if code < 0 else f"code {code}"
            raise ProcessExited(f"process {spec.name!r} (pid {process.pid}) exited with {how}")

    async def _terminate(self, process: trio.Process) -> None:
        process.terminate()
        with trio.move_on_after(self.spec.stop_timeout):
            await process.wait()
            return
        log("actorctl:process:killed", child=self.spec.name, pid=process.pid)
        process.kill()

    def detail(self, row: TreeRow) -> TreeRow:
        """Its tree row ``row`` with its pid and command."""
        return attrs.evolve(row, pid=self.pid, command=tuple(self.spec.command))


async def _cancel_when(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel(reason="node stopping")
