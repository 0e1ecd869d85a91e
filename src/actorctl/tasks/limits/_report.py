"""What a node says of its task limits, as records: each worker's budget and
tasks (:class:`WorkerLimits`), each pool router's (:class:`RouterReport`), and
the whole answer to ``limits`` (:class:`LimitsReport`).

:class:`~actorctl.tasks.limits._tuning.Tuning` makes the report where the
gates are; ``actorctl control limits``, ``inspect stats`` and the web page's
overview read it as a record. It is a dict only in the ``_tasks`` actor's
reply (``wire()``); ``from_wire`` reads a reply back and names what is wrong
with a malformed one (``actors/_answers.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, final

import attrs

from ...actors._answers import read_answer

__all__ = ["LimitsReport", "RouterReport", "TaskLimits", "WorkerLimits"]


@final
@attrs.frozen
class TaskLimits:
    """One task's limits at one gate: its rate limit (``"10/s"``, None: none),
    its concurrency cap, its cap per key, whether it is suspended, and how
    many of its runs hold a slot there now."""

    rate_limit: str | None
    concurrency: int | None
    per_key: int | None
    suspended: bool
    running: int

    def wire(self) -> dict[str, Any]:
        """Its form in a reply."""
        return {
            "rate_limit": self.rate_limit,
            "concurrency": self.concurrency,
            "per_key": self.per_key,
            "suspended": self.suspended,
            "running": self.running,
        }


def _tasks_wire(tasks: Mapping[str, TaskLimits]) -> dict[str, Any]:
    return {name: limits.wire() for name, limits in tasks.items()}


@final
@attrs.frozen
class WorkerLimits:
    """One worker's budget (and its bounds), its running and waiting tasks,
    and each task's limits at its gate."""

    pool: str
    budget: int
    bounds: tuple[int, int]
    running: int
    waiting: int
    tasks: Mapping[str, TaskLimits]

    def wire(self) -> dict[str, Any]:
        """Its form in a reply."""
        return {
            "pool": self.pool,
            "budget": self.budget,
            "bounds": list(self.bounds),
            "running": self.running,
            "waiting": self.waiting,
            "tasks": _tasks_wire(self.tasks),
        }


@final
@attrs.frozen
class RouterReport:
    """One pool router's held tasks, each task's limits at its gate, and the
    per-worker rate it paces each task at."""

    held: int
    tasks: Mapping[str, TaskLimits]
    per_worker: Mapping[str, str]

    def wire(self) -> dict[str, Any]:
        """Its form in a reply."""
        return {
            "held": self.held,
            "tasks": _tasks_wire(self.tasks),
            "per_worker": dict(self.per_worker),
        }


@final
@attrs.frozen
class LimitsReport:
    """A node's answer to ``limits`` (and to ``limit``, once it is set): its
    workers, its routers (by pool), and the limits set at run time (by task:
    ``rate_limit``, ``global_rate_limit``, ``suspended``, as kept)."""

    workers: Mapping[str, WorkerLimits]
    routers: Mapping[str, RouterReport]
    overrides: Mapping[str, Mapping[str, Any]]

    def wire(self) -> dict[str, Any]:
        """Its form in a reply."""
        return {
            "workers": {name: worker.wire() for name, worker in self.workers.items()},
            "routers": {pool: router.wire() for pool, router in self.routers.items()},
            "overrides": {task: dict(kept) for task, kept in self.overrides.items()},
        }

    @classmethod
    def from_wire(cls, value: object, where: str) -> LimitsReport:
        """A reply's body as the report.

        Raises:
            WireFormatError: it is not one (naming ``where`` and what is wrong).
        """
        return read_answer(value, cls, where)
