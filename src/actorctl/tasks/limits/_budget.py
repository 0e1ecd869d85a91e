"""A pool's concurrency budget: fixed, or growing and shrinking between bounds.

``app.pool("db", concurrency=4)`` runs at most 4 tasks at once on each worker.
``concurrency=(2, 16)`` or :class:`Concurrency` lets each worker's budget move
between a minimum and a maximum, as the Celery 5 draft's autoscaler does: it
starts at the minimum, **doubles** when tasks wait for a run slot (exponential
growth), **halves** when fewer than half its slots were used for a whole
cooldown, and does not change again until ``cooldown`` seconds after its last
change. With ``current=fn`` the budget is what ``fn()`` returns (the free
connections of a database pool, say), kept within the bounds, asked again
every ``cooldown`` seconds. ``actorctl control pool-grow|pool-shrink`` move it
by hand, within the same bounds.

Nothing polls: growth is decided when a task finds no free slot, shrinking when
a run ends; only a ``current`` function is asked on a timer.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Final, final

import attrs
import trio

from ..._errors import ConfigError
from ..._log import log
from ._gate import Gate

__all__ = ["Budget", "Concurrency", "concurrency_of", "worker_gate"]

DEFAULT_COOLDOWN: Final = 10.0


@final
@attrs.frozen
class Concurrency:
    """A pool's concurrency budget per worker: between ``min`` and ``max``.

    Args:
        min: run slots it starts with and never goes below (at least 1).
        max: run slots it never goes above.
        current: a function (plain or ``async``) that says how many tasks may
            run now (e.g. free database connections); None: the budget follows
            demand.
        cooldown: seconds after a change before the next one.
    """

    min: int
    max: int
    current: Callable[[], int | Awaitable[int]] | None = None
    cooldown: float = DEFAULT_COOLDOWN

    @property
    def fixed(self) -> bool:
        return self.min == self.max and self.current is None


def concurrency_of(value: object, *, what: str) -> Concurrency:
    """A pool's ``concurrency=``: an int (fixed), ``(min, max)`` or a Concurrency.

    Raises:
        ConfigError: naming ``what``, the value and the forms it takes.
    """
    if isinstance(value, Concurrency):
        spec = value
    elif isinstance(value, int) and not isinstance(value, bool):
        spec = Concurrency(value, value)
    elif isinstance(value, tuple | list) and len(value) == 2:
        low, high = value
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high)):
            raise ConfigError(f"{what}: concurrency={value!r}: give two whole numbers (min, max)")
        spec = Concurrency(low, high)
    else:
        raise ConfigError(
            f"{what}: concurrency={value!r}: give a number of tasks (4), a range (2, 16), "
            "or Concurrency(min=..., max=..., current=fn)"
        )
    if spec.min < 1 or spec.max < spec.min:
        raise ConfigError(
            f"{what}: concurrency={value!r}: the minimum must be at least 1 and the maximum "
            "at least the minimum"
        )
    if spec.cooldown < 0:
        raise ConfigError(f"{what}: cooldown={spec.cooldown!r}: give seconds, 0 or more")
    return spec


@final
class Budget:
    """One worker's budget: sets its gate's run slots (and its thread limiter).

    Args:
        spec: the pool's bounds.
        gate: the worker's gate.
        threads: the worker's thread limiter (as many threads as slots).
        pool: for logs.
    """

    def __init__(
        self, spec: Concurrency, gate: Gate, threads: trio.CapacityLimiter, pool: str
    ) -> None:
        self.spec = spec
        self.gate = gate
        self.threads = threads
        self.pool = pool
        self._changed = -spec.cooldown  # trio time of the last change
        self._busy = 0.0  # trio time when at least half the slots were last in use
        self._pressed = trio.Event()  # tasks wait, and the cooldown holds growth back
        self.set(spec.min, "start")

    @property
    def capacity(self) -> int:
        return int(self.gate.capacity)

    def set(self, capacity: int, why: str) -> int:
        """Set the budget (kept within the bounds); returns what it is now."""
        capacity = max(self.spec.min, min(self.spec.max, capacity))
        old = self.gate.capacity
        if capacity != old:
            self._changed = trio.current_time()
            self.threads.total_tokens = capacity
            self.gate.resize(capacity)
            if why != "start":
                log("actorctl:pool:budget", pool=self.pool, old=old, new=capacity, why=why)
        return capacity

    def blocked(self) -> None:
        """The gate's hook: a task waits for a slot. Double, past the cooldown."""
        now = trio.current_time()
        self._busy = now
        if self.spec.current is not None or self.capacity >= self.spec.max:
            return
        if now - self._changed >= self.spec.cooldown:
            self.set(self.capacity * 2, "tasks wait for a run slot")
        else:
            self._pressed.set()  # grow once the cooldown is over, if they still wait

    def ran(self) -> None:
        """A run ended: halve if fewer than half the slots were used for a cooldown."""
        now = trio.current_time()
        gate = self.gate
        if gate.running * 2 >= gate.capacity or gate.waiting:
            self._busy = now
            return
        quiet = min(now - self._busy, now - self._changed)
        if self.spec.current is None and quiet >= self.spec.cooldown:
            self.set(self.capacity // 2, "fewer than half its run slots used")

    async def run(self) -> None:
        """The budget's own task, for as long as its worker runs: with a
        ``current`` function, ask it every cooldown; otherwise, when tasks
        waited while a cooldown held growth back, look again once it is over."""
        if self.spec.current is not None:
            await self._follow(self.spec.current)
            return
        while True:
            await self._pressed.wait()
            self._pressed = trio.Event()
            await trio.sleep_until(self._changed + self.spec.cooldown)
            self.gate.poke()  # still waiting: blocked() grows it now

    async def _follow(self, current: Callable[[], int | Awaitable[int]]) -> None:
        """Ask ``current`` every cooldown. A function that raises (or returns
        no whole number) is logged, and the budget stays."""
        while True:
            try:
                value: Any = current()
                if inspect.isawaitable(value):
                    value = await value
                if not isinstance(value, int) or isinstance(value, bool):
                    raise TypeError(f"it returned {value!r}, not a whole number")
            except Exception as exc:
                log(
                    "actorctl:pool:budget-failed",
                    pool=self.pool,
                    error=f"{type(exc).__name__}: {exc}",
                )
            else:
                self.set(value, "its current() said so")
            await trio.sleep(max(self.spec.cooldown, 0.1))


def worker_gate(
    spec: Concurrency | None, threads: trio.CapacityLimiter, pool: str
) -> tuple[Gate, Budget | None]:
    """A worker's gate with as many run slots as ``threads`` has, and its
    budget when the pool's concurrency is a range (None when it is fixed)."""
    gate = Gate(int(threads.total_tokens))
    if spec is None or spec.fixed:
        return gate, None
    budget = Budget(spec, gate, threads, pool)
    gate.on_blocked = budget.blocked
    return gate, budget
