"""Rate limits: Celery's ``"10/s"`` syntax, and the pacer that enforces one.

A rate limit of N per period lets a task start at most N times in any window
of that period. The pacer spaces starts evenly, ``period / N`` apart (a token
bucket that holds one token, as Celery's per-worker limit is): a burst never
goes over the limit in any window, sliding or fixed, and a steady stream runs
at the limit. It runs on trio's clock, so tests can use ``autojump_clock``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from types import MappingProxyType
from typing import Final, final

import attrs
import trio

from ..._errors import ConfigError

__all__ = ["Pacer", "RateLimit", "rate_limit_of"]

_PERIODS: Final = MappingProxyType({"s": 1.0, "m": 60.0, "h": 3600.0})
_SYNTAX: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:/\s*([smh]))?\s*$")


@final
@attrs.frozen
class RateLimit:
    """At most ``count`` starts in any window of ``period`` seconds."""

    count: float
    period: float

    @property
    def interval(self) -> float:
        """Seconds between two starts at the limit."""
        return self.period / self.count

    def __str__(self) -> str:
        unit = {1.0: "s", 60.0: "m", 3600.0: "h"}.get(self.period)
        count = f"{self.count:g}"
        return f"{count}/{unit}" if unit else f"{count}/{self.period:g}s"


def rate_limit_of(value: object, *, what: str) -> RateLimit | None:
    """Read a rate limit in Celery's syntax: ``"10/s"``, ``"100/m"``, ``"5/h"``,
    or a bare number (per second); None, ``""``, ``0`` or ``"0/s"`` mean no limit.

    Raises:
        ConfigError: naming ``what`` and the value, with the syntax it takes.
    """
    if value is None or value == "" or value == 0:
        return None
    if isinstance(value, RateLimit):
        return value
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(f'{what}: {value!r} is not a rate limit: give one like "10/s"')
    match = _SYNTAX.match(str(value))
    count = float(match.group(1)) if match else math.nan
    if count == 0:
        return None
    if match is None or not math.isfinite(count) or count < 0:
        raise ConfigError(
            f"{what}: {value!r} is not a rate limit: give tasks per second, minute or hour, "
            'as in Celery: "10/s", "100/m", "5/h" (a bare number is per second)'
        )
    return RateLimit(count, _PERIODS[match.group(2) or "s"])


@final
class Pacer:
    """When the next start of one rate-limited task may be.

    Args:
        limit: the rate; None lets every start through.
        widen: a factor over the limit's interval (1.0: exactly at the limit).
            A limit enforced a network hop before the tasks start (a router's)
            widens it a little, so that the jitter of that hop cannot put one
            start too many into a window.
        clock: trio's clock by default.
    """

    __slots__ = ("_clock", "_interval", "_next", "limit", "widen")

    def __init__(
        self,
        limit: RateLimit | None,
        *,
        widen: float = 1.0,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self._clock = clock
        self.widen = widen
        self._next = -math.inf
        self.limit = limit
        self._interval = 0.0 if limit is None else limit.interval * widen

    def set(self, limit: RateLimit | None) -> None:
        """Change the limit from the next start on."""
        self.limit = limit
        self._interval = 0.0 if limit is None else limit.interval * self.widen

    def ready_at(self) -> float:
        """The moment (on the clock) the next start may happen; in the past if now."""
        return self._next

    def take(self) -> bool:
        """Start now if the limit allows it (True), and count it."""
        if self.limit is None:
            return True
        now = self._clock()
        if now < self._next:
            return False
        # From the moment it really started: a late start never lets the next
        # one come early, so no window ever holds more than the limit.
        self._next = now + self._interval
        return True
