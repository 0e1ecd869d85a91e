"""Circuit breakers: a state machine, and the behaviour an actor switches into.

A :class:`Breaker` is closed (everything runs), open (nothing runs: each
message is answered ``modified`` at once, so a router tries another instance
and a durable sender's backlog keeps it) or half-open (one probe runs; the
others are still answered ``modified``). It trips (closed → open) after
``failures`` failures within ``window`` seconds, or when health checks report
Unhealthy ``unhealthy`` times or Degraded ``degraded`` times within the window,
or Permanently Unavailable once. After the reset period it lets one probe
through (half-open); the probe's success closes it, its failure opens it again
for a longer period when ``growth`` says so.

The defaults are the Celery 5 design draft's ("Circuit Breaking"): 3 failures;
30 s reset with no growth; a trip logs a warning, and once 3 trips happen
within 5 minutes they log errors, until 30 minutes pass without a trip.

Time is trio's clock (``trio.current_time``), so tests can jump it. A breaker
belongs to one actor (or one worker's task or resource): it is not shared
between nodes, so one node's open breaker sends work to another node's.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, Literal, final

import attrs
import trio

from .._log import log
from ..actors import Actor, Behaviour
from ..mailbox import (
    STATUS_ERROR,
    Envelope,
    Outcome,
)

__all__ = [
    "CIRCUIT_OPEN",
    "Breaker",
    "BreakerPolicy",
    "BreakerState",
    "BreakerStatus",
    "CircuitBreaker",
    "Health",
]

#: The condition of the ``modified`` outcome an open breaker answers with.
CIRCUIT_OPEN: Final = "actorctl:circuit-open"


class BreakerState(enum.StrEnum):
    """Where a breaker is (see the module docstring); its value is the word
    ``cluster status``, ``_node`` and the logs show."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


class Health(enum.Enum):
    """What a health check reports (the Celery 5 draft's states)."""

    HEALTHY = "healthy"
    DEGRADED = "degraded"
    UNHEALTHY = "unhealthy"
    INSECURE = "insecure"
    PERMANENTLY_UNAVAILABLE = "permanently-unavailable"


@final
@attrs.frozen
class BreakerStatus:
    """A breaker's state, as ``cluster status`` and ``_health`` show it.

    ``resets_in``: seconds until an open breaker lets a probe through (None
    while closed, or while a health check holds it open); ``health``: the
    last report of each check that feeds it.
    """

    state: BreakerState
    reason: str | None
    resets_in: float | None
    trips: int
    failures: int
    health: Mapping[str, Health] = attrs.field(factory=dict)

    def wire(self) -> dict[str, Any]:
        """Its form in a reply."""
        return {
            "state": self.state.value,
            "reason": self.reason,
            "resets_in": self.resets_in,
            "trips": self.trips,
            "failures": self.failures,
            "health": {check: health.value for check, health in self.health.items()},
        }


Growth = Literal["none", "linear", "exponential"]


def _positive(_: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not (isinstance(value, int | float) and not isinstance(value, bool) and value > 0):
        raise ValueError(f"breaker option {attribute.name!r}: expected a number > 0, got {value!r}")


def _count(_: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(
            f"breaker option {attribute.name!r}: expected a whole number >= 1, got {value!r}"
        )


def _growth(_: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if value not in ("none", "linear", "exponential"):
        raise ValueError(
            f"breaker option 'growth': expected 'none', 'linear' or 'exponential', got {value!r}"
        )


@final
@attrs.frozen(kw_only=True)
class BreakerPolicy:
    """When a breaker trips, how long it stays open, and how loudly it says so.

    Args:
        failures: failures within ``window`` that trip it.
        window: seconds over which failures and health reports are counted.
        reset: seconds it stays open before it lets a probe through.
        growth: how the open period grows on each trip in a row (a probe that
            fails): ``"none"``, ``"linear"`` (reset * n) or ``"exponential"``
            (reset * 2 ** (n - 1)), at most ``reset_max``.
        reset_max: the longest open period.
        unhealthy: Unhealthy health reports within ``window`` that trip it.
        degraded: Degraded health reports within ``window`` that trip it.
        error_trips: trips within ``error_period`` after which a trip is
            logged as an error instead of a warning ...
        error_period: ... (seconds) ...
        quiet: ... until this many seconds pass without a trip.
    """

    failures: int = attrs.field(default=3, validator=_count)
    window: float = attrs.field(default=60.0, validator=_positive)
    reset: float = attrs.field(default=30.0, validator=_positive)
    growth: Growth = attrs.field(default="none", validator=_growth)
    reset_max: float = attrs.field(default=300.0, validator=_positive)
    unhealthy: int = attrs.field(default=2, validator=_count)
    degraded: int = attrs.field(default=10, validator=_count)
    error_trips: int = attrs.field(default=3, validator=_count)
    error_period: float = attrs.field(default=300.0, validator=_positive)
    quiet: float = attrs.field(default=1800.0, validator=_positive)

    def open_for(self, trips_in_a_row: int) -> float:
        """Seconds the breaker stays open on its ``trips_in_a_row``-th trip in a row."""
        n = max(trips_in_a_row, 1)
        if self.growth == "linear":
            period = self.reset * n
        elif self.growth == "exponential":
            period = self.reset * 2 ** min(n - 1, 60)
        else:
            period = self.reset
        return min(period, max(self.reset_max, self.reset))


@final
class Breaker:
    """One circuit breaker (see the module docstring).

    ``closed`` is a plain attribute: the per-message test of a closed breaker
    is ``if not breaker.closed``, nothing more.

    Args:
        name: named in its logs and in the ``modified`` answers it causes.
        policy: its thresholds and periods.
        on_change: told the new :class:`BreakerState` on each change (a
            ``CircuitBreaker`` attachment switches the actor's
            behaviour with it).
    """

    def __init__(
        self,
        name: str,
        policy: BreakerPolicy | None = None,
        *,
        on_change: Callable[[BreakerState], None] | None = None,
    ) -> None:
        self.name = name
        self.policy = policy or BreakerPolicy()
        self.on_change = on_change
        self.closed = True
        self.state: BreakerState = BreakerState.CLOSED
        self.reason = ""
        self.reset_at = math.inf
        self.trips = 0  # in all
        self._in_a_row = 0  # trips since it was last closed
        self._failures: collections.deque[float] = collections.deque()
        self._unhealthy: collections.deque[float] = collections.deque()
        self._degraded: collections.deque[float] = collections.deque()
        self._trip_times: collections.deque[float] = collections.deque()
        self._loud_until = -math.inf  # trips log errors until then
        self._probe_since: float | None = None
        self._held = False  # a Permanently Unavailable report holds it open
        self.health: dict[str, Health] = {}  # the last report of each check that feeds it

    # -- the message path ----------------------------------------------------------

    def admit(self) -> str | None:
        """Whether a message may run now: None (closed, or the half-open probe),
        or why not (the description of the ``modified`` answer)."""
        if self.closed:
            return None
        now = trio.current_time()
        if self.state == BreakerState.OPEN and not self._held and now >= self.reset_at:
            self._change(BreakerState.HALF_OPEN)
        if self.state == BreakerState.HALF_OPEN:
            # One probe at a time; one that never reported back (its run was
            # cancelled) gives way to another after a reset period.
            since = self._probe_since
            if since is None or now - since >= self.policy.reset:
                self._probe_since = now
                return None
        return self.why(now)

    def why(self, now: float | None = None) -> str:
        """Why it refuses: its name, the reason it tripped and when it tries again."""
        now = trio.current_time() if now is None else now
        if self._held:
            when = "when a health check reports the resource healthy again"
        elif self.state == BreakerState.HALF_OPEN:
            when = "once the probe it let through succeeds"
        else:
            when = f"in {max(self.reset_at - now, 0.0):.1f} s (a probe, half-open)"
        return f"circuit breaker {self.name!r} is {self.state} ({self.reason}); it retries {when}"

    def succeeded(self) -> None:
        """A run went well: a half-open breaker closes."""
        if self.closed:
            return
        if self.state == BreakerState.HALF_OPEN and self._probe_since is not None:
            self._close("the probe succeeded")

    def failed(self, reason: str) -> None:
        """A run failed: counted while closed, and a failed probe opens it again."""
        now = trio.current_time()
        if self.state == BreakerState.HALF_OPEN and self._probe_since is not None:
            self._trip(f"the probe failed: {reason}", now)
        elif self.closed and _over(self._failures, now, self.policy.window, self.policy.failures):
            self._trip(
                f"{self.policy.failures} failures within {self.policy.window:g} s, "
                f"the last: {reason}",
                now,
            )

    def close(self, why: str) -> None:
        """Close it now (what it guards is known to work again)."""
        if not self.closed:
            self._close(why)

    def released(self) -> None:
        """The probe let through did not run after all (revoked, expired): let
        the next message be the probe."""
        if self.state == BreakerState.HALF_OPEN:
            self._probe_since = None

    def report(self, check: str, health: Health, detail: str = "") -> None:
        """A health check's result (see the module docstring for what trips it)."""
        self.health[check] = health
        now = trio.current_time()
        policy = self.policy
        why = f"health check {check!r} reports {health.value}" + (f": {detail}" if detail else "")
        if health is Health.HEALTHY:
            if self._held:
                self._held = False
                self.reset_at = now  # the next message is a probe
            return
        if health is Health.PERMANENTLY_UNAVAILABLE:
            self._held = True
            if self.state != BreakerState.OPEN:
                self._trip(why, now)
            return
        if not self.closed:
            return
        if (
            health is Health.UNHEALTHY
            and _over(self._unhealthy, now, policy.window, policy.unhealthy)
        ) or (
            health is Health.DEGRADED and _over(self._degraded, now, policy.window, policy.degraded)
        ):
            self._trip(why, now)

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Record the outcome of the block: an exception is a failure (and goes
        on up), the end of the block a success. In an async handler, or a plain
        one (which runs in a worker thread). For an actor's handlers::

            with self.breaker.guard():
                await charge(card)
        """
        try:
            yield
        except Exception as exc:
            _in_trio(self.failed, f"{type(exc).__name__}: {exc}")
            raise
        _in_trio(self.succeeded)

    def status(self) -> BreakerStatus:
        """Its state, as ``cluster status`` and ``_health`` show it."""
        now = trio.current_time()
        return BreakerStatus(
            self.state,
            self.reason,
            None if self.closed or self._held else round(max(self.reset_at - now, 0), 3),
            self.trips,
            len(self._failures),
            dict(self.health),
        )

    def statistics(self) -> dict[str, Any]:
        """:meth:`status` in its wire form (``BreakerStatus.wire``)."""
        return self.status().wire()

    # -- transitions -----------------------------------------------------------------

    def _trip(self, reason: str, now: float) -> None:
        self.trips += 1
        self._in_a_row += 1
        self.reason = reason
        period = self.policy.open_for(self._in_a_row)
        self.reset_at = now + period
        self._probe_since = None
        self._failures.clear()
        self._unhealthy.clear()
        self._degraded.clear()
        policy = self.policy
        if _over(self._trip_times, now, policy.error_period, policy.error_trips):
            self._loud_until = now + policy.quiet
        level = "error" if now < self._loud_until else "warning"
        log(
            "actorctl:breaker:tripped",
            level=level,
            breaker=self.name,
            reason=reason,
            open_for=period,
            trips=self.trips,
        )
        self._change(BreakerState.OPEN)

    def _close(self, why: str) -> None:
        self._in_a_row = 0
        self._probe_since = None
        self.reset_at = math.inf
        self.reason = ""
        log("actorctl:breaker:closed", breaker=self.name, why=why)
        self._change(BreakerState.CLOSED)

    def _change(self, state: BreakerState) -> None:
        self.state = state
        self.closed = state == BreakerState.CLOSED
        if state == BreakerState.HALF_OPEN:
            log("actorctl:breaker:half-open", breaker=self.name)
        if self.on_change is not None:
            self.on_change(state)


def _in_trio(fn: Callable[..., None], *args: object) -> None:
    """Call ``fn`` in the trio thread: here, or from a worker thread trio started."""
    try:
        trio.lowlevel.current_trio_token()
    except RuntimeError:
        trio.from_thread.run_sync(fn, *args)
    else:
        fn(*args)


def _over(times: collections.deque[float], now: float, window: float, limit: int) -> bool:
    """Count one more event at ``now``: whether ``limit`` happened within ``window``."""
    times.append(now)
    while times and times[0] <= now - window:
        times.popleft()
    return len(times) >= limit


class CircuitBreaker(Behaviour):
    """The behaviour of an actor whose breaker is not closed: every message is
    answered ``modified`` at once, except the one probe of the half-open
    state, which runs on the actor's own handlers; its outcome closes the
    breaker (the actor returns to its own behaviour) or opens it again.

    Switch into it with :meth:`attach` (on each trip, and back on each close)::

        class Payments(Actor):
            def __init__(self) -> None:
                self.breaker = Breaker("payments")

            async def on_start(self) -> None:
                CircuitBreaker.attach(self, self.breaker)

            @handler
            async def charge(self, amount: int) -> None:
                with self.breaker.guard():
                    ...

    A message an open breaker refuses is not lost: a router sends it to
    another instance, and a durable sender's backlog sends it again later.
    """

    def __init__(self, actor: Actor, breaker: Breaker) -> None:
        self.actor = actor
        self.breaker = breaker

    @staticmethod
    def attach(actor: Actor, breaker: Breaker) -> None:
        """Switch ``actor`` into a :class:`CircuitBreaker` whenever ``breaker``
        opens, and back to its own behaviour when it closes. Call it from
        ``on_start`` (each incarnation of the actor)."""
        refusing = CircuitBreaker(actor, breaker)

        def change(state: BreakerState) -> None:
            if state == BreakerState.CLOSED:
                actor.unbecome()
            else:
                actor.become(refusing)

        breaker.on_change = change
        if not breaker.closed:
            actor.become(refusing)

    def unhandled(self, envelope: Envelope) -> Outcome | None:
        return Outcome.modified(CIRCUIT_OPEN, f"{envelope.subject}: {self.breaker.why()}")

    async def handle_unmatched(
        self, envelope: Envelope
    ) -> tuple[Outcome, tuple[str, Any] | None] | None:
        why = self.breaker.admit()
        if why is not None:
            return Outcome.modified(CIRCUIT_OPEN, f"{envelope.subject}: {why}"), None
        return await self._probe(envelope)

    async def _probe(self, envelope: Envelope) -> tuple[Outcome, tuple[str, Any] | None] | None:
        """Run the probe on the actor's own handlers, as its cell runs any
        message (roles, arguments, expiry, its capacity limiter); a raised
        error (an error reply) is a failed probe, a refusal (bad input, no
        such handler, not permitted, expired) says nothing of the resource."""
        breaker = self.breaker
        handled = await self.actor.handle_own(envelope)
        if handled.outcome.state != "accepted":
            breaker.released()
        elif handled.reply is not None and handled.reply[0] == STATUS_ERROR:
            body = handled.reply[1]
            why = body.get("message", body) if isinstance(body, dict) else body
            breaker.failed(f"{body.get('type')}: {why}" if isinstance(body, dict) else str(why))
        else:
            breaker.succeeded()
        return handled.outcome, handled.reply
