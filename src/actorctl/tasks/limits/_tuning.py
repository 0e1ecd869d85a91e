"""Limits changed at run time: what ``actorctl control`` sets on a node.

Each node's task actors share one :class:`Tuning` (through ``WorkerState``):
every worker's gate and budget, and its pool routers' gates, register with it
when they start. ``actorctl control rate-limit|suspend|resume|pool-grow|pool-shrink``
reaches the ``_tasks`` actor of every node (through the Controller), which
changes them here. A change to a task's limits is kept in the node's store
(table ``task-limits``) and applied again when the node starts, so it outlives
a restart, as a revoke does; a budget moved by hand is not kept (the pool's
bounds and its demand decide it again).

cluster.toml's ``[[task]]`` tables set a task's ``rate_limit`` and
``global_rate_limit`` over its decorator's (as Celery's ``task_annotations``
do): they are the node's ``defaults``, under what was set at run time. When a
reload changes one, each node sets it as ``control`` would, so the file's new
value is the latest word.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Protocol, final

from ..._errors import ConfigError
from ..._log import log
from ...store import Store
from .._cluster_tables import TaskTable
from ._budget import Budget
from ._gate import Gate
from ._rates import Pacer, RateLimit, rate_limit_of
from ._report import LimitsReport, RouterReport, TaskLimits, WorkerLimits

__all__ = ["ROUTER_WIDEN", "Tuning", "file_limits"]

TABLE: Final = "task-limits"
#: A pool router's pacing is this much wider than the global limit: the hop
#: from the router to the worker adds jitter, and a limit is a ceiling.
ROUTER_WIDEN: Final = 1.05
_KEYS: Final = ("rate_limit", "global_rate_limit", "suspended")


class RouterLimits(Protocol):
    """What a pool's router shows of its limits (``_pacing.PoolRouter``)."""

    gate: Gate
    per_worker: dict[str, dict[Any, Pacer]]

    @property
    def held(self) -> int: ...

    def set_worker_rate(self, task: str, limit: RateLimit | None) -> None: ...


@final
class Tuning:
    """The gates of one node's task actors, and the limits set on them at run time."""

    def __init__(self) -> None:
        # actor -> (pool, gate, budget (None: fixed), most run slots)
        self.workers: dict[str, tuple[str, Gate, Budget | None, int]] = {}
        self.routers: dict[str, RouterLimits] = {}  # pool -> its router
        self.overrides: dict[str, dict[str, Any]] = {}  # task -> {key: value}
        #: What the cluster file's [[task]] tables say: under the overrides.
        self.defaults: dict[str, dict[str, Any]] = {}
        self._store: Store | None = None

    # -- registering ------------------------------------------------------------------

    def load(self, store: Store) -> None:
        """Read the limits this node kept (``_tasks`` does it before the workers start)."""
        self._store = store
        for task, value in store.items(TABLE):
            try:
                kept = json.loads(value)
            except ValueError as exc:
                log("actorctl:limits:unreadable", task=task, error=str(exc))
                continue
            if isinstance(kept, dict):
                self.overrides[task] = {k: v for k, v in kept.items() if k in _KEYS}

    def add_worker(
        self, name: str, pool: str, gate: Gate, budget: Budget | None, most: int
    ) -> None:
        self.workers[name] = (pool, gate, budget, most)
        for task, kept in self._in_force().items():
            _apply(gate, task, kept, router=False)

    def add_router(self, pool: str, router: RouterLimits) -> None:
        self.routers[pool] = router
        for task, kept in self._in_force().items():
            _apply_router(router, task, kept)

    def _in_force(self) -> dict[str, dict[str, Any]]:
        """The file's limits, and over them what was set at run time."""
        merged = {task: dict(kept) for task, kept in self.defaults.items()}
        for task, kept in self.overrides.items():
            merged.setdefault(task, {}).update(kept)
        return merged

    def follow(self, limits: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """The file's [[task]] limits are ``limits`` now (a reload): each value
        that changed is set as ``control`` sets it. What changed, in lines."""
        lines = []
        for task in sorted(self.defaults.keys() | limits.keys()):
            was, now = self.defaults.get(task, {}), limits.get(task, {})
            for key in sorted(was.keys() | now.keys()):
                if was.get(key) != now.get(key):
                    self.set_limit(task, key, now.get(key))
                    lines.append(f"task {task}: {key} {was.get(key)} -> {now.get(key)}")
        self.defaults = {task: dict(kept) for task, kept in limits.items()}
        return lines

    # -- changing ---------------------------------------------------------------------

    def set_limit(self, task: str, key: str, value: Any) -> LimitsReport:
        """Set ``key`` (rate_limit, global_rate_limit or suspended) of ``task``
        on every gate of this node, and keep it. Returns what the node has now.

        Raises:
            ConfigError: a bad rate, naming it.
        """
        if key not in _KEYS:
            raise ConfigError(f"no task limit {key!r} ({', '.join(_KEYS)})")
        if key != "suspended":
            rate = rate_limit_of(value, what=f"{key} of {task}")
            value = None if rate is None else str(rate)
        kept = self.overrides.setdefault(task, {})
        kept[key] = value
        for _, gate, _, _ in self.workers.values():
            _apply(gate, task, {key: value}, router=False)
        for router in self.routers.values():
            _apply_router(router, task, {key: value})
        if self._store is not None:
            self._store.put(TABLE, task, json.dumps(kept).encode())
        log("actorctl:limits:changed", task=task, limit=key, value=value)
        return self.report()

    def move_budget(self, pool: str, by: int) -> dict[str, int]:
        """Grow (``by`` > 0) or shrink every worker budget of ``pool`` here,
        within the pool's bounds (1 to its concurrency, for a fixed pool).
        Returns each worker's budget now.

        Raises:
            ConfigError: this node runs no worker of ``pool``.
        """
        moved: dict[str, int] = {}
        for name, (worker_pool, gate, budget, most) in self.workers.items():
            if worker_pool != pool:
                continue
            if budget is None:
                gate.resize(max(1, min(most, int(gate.capacity) + by)))
                moved[name] = int(gate.capacity)
            else:
                why = "pool-grow" if by > 0 else "pool-shrink"
                moved[name] = budget.set(budget.capacity + by, why)
        if not moved:
            raise ConfigError(f"this node runs no worker of pool {pool!r}")
        return moved

    async def sync(self) -> None:
        if self._store is not None:
            await self._store.sync()

    # -- reporting --------------------------------------------------------------------

    def report(self) -> LimitsReport:
        """Each worker's budget, running and waiting tasks, and the limits set here."""
        workers = {
            name: WorkerLimits(
                pool,
                int(gate.capacity),
                (budget.spec.min, budget.spec.max) if budget else (1, most),
                gate.running,
                gate.waiting,
                _task_limits(gate),
            )
            for name, (pool, gate, budget, most) in sorted(self.workers.items())
        }
        routers = {
            pool: RouterReport(
                router.held,
                _task_limits(router.gate),
                {
                    task: str(next(iter(pacers.values())).limit)
                    for task, pacers in sorted(router.per_worker.items())
                    if pacers
                },
            )
            for pool, router in sorted(self.routers.items())
        }
        overrides = {task: dict(kept) for task, kept in self.overrides.items()}
        return LimitsReport(workers, routers, overrides)


def _apply(gate: Gate, task: str, kept: dict[str, Any], *, router: bool) -> None:
    """Apply what was set of ``task`` to ``gate``: a worker's takes its rate
    limit, a router's its global one; both take a suspend."""
    rate_key = "global_rate_limit" if router else "rate_limit"
    if rate_key in kept:
        gate.set_rate(task, rate_limit_of(kept[rate_key], what=f"{rate_key} of {task}"))
    if "suspended" in kept:
        gate.suspend(task, bool(kept["suspended"]))


def _apply_router(router: RouterLimits, task: str, kept: dict[str, Any]) -> None:
    """A router keeps a task's global limit and suspend in its gate, and
    paces its per-worker limit for each instance."""
    _apply(router.gate, task, kept, router=True)
    if "rate_limit" in kept:
        router.set_worker_rate(
            task, rate_limit_of(kept["rate_limit"], what=f"rate_limit of {task}")
        )


def _task_limits(gate: Gate) -> dict[str, TaskLimits]:
    return {
        name: TaskLimits(
            str(limits.pacer.limit) if limits.pacer.limit else None,
            limits.cap,
            limits.per_key,
            limits.suspended,
            limits.running,
        )
        for name, limits in sorted(gate.tasks.items())
    }


def file_limits(
    tables: Sequence[TaskTable], tasks: Collection[str], path: Path | None
) -> dict[str, dict[str, Any]]:
    """The limits cluster.toml's ``[[task]]`` tables set (their names checked
    already, as records), by task, checked against the app.

    Raises:
        ConfigError: an unknown task (with the nearest name), or a task
            named twice.
    """
    where = f"{path}: " if path is not None else ""
    limits: dict[str, dict[str, Any]] = {}
    for index, table in enumerate(tables):
        name = table.name
        if name not in tasks:
            near = difflib.get_close_matches(name, sorted(tasks), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigError(
                f"{where}task[{index}]: no task named {name!r}{hint}; the app's tasks: "
                f"{', '.join(sorted(tasks))}"
            )
        if name in limits:
            raise ConfigError(f"{where}task[{index}]: task {name!r} has two [[task]] tables")
        kept = limits[name] = {}
        for key, value in (
            ("rate_limit", table.rate_limit), ("global_rate_limit", table.global_rate_limit)
        ):  # fmt: skip
            if value is not None:  # the key is given (its rate read with the file)
                kept[key] = None if value.limit is None else str(value.limit)
    return limits
