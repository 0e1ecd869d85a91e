"""Health checks: functions run at an interval whose results feed breakers.

A check is a plain or async function that returns a :class:`Health` (or a
``(Health, detail)`` pair). The :class:`HealthMonitor` actor (``_health`` on
each node that has checks) runs each check on a timer of its own, in the node:
the runtime does not depend on the task scheduler, so a node's checks run
whether or not a task app (and its scheduler) is there. Each result is kept
(``cluster status`` shows it, per node and per check) and reported to the
breakers the check names; a check that raises is logged as an error and
changes nothing (the Celery 5 draft: "it is ignored and an error message is
logged"); one that runs past its timeout reports Unhealthy.

Built-in checks: :func:`peer_reachable`, :func:`disk_writable` and
:func:`certificate_expiry` (Insecure within 7 days of expiry).
"""

from __future__ import annotations

import datetime
import inspect
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Final, final

import attrs
import trio
from cryptography import x509

from .._log import log
from .._threads import run_sync
from ..actors import Actor, handler
from ._breaker import Breaker, BreakerStatus, Health
from ._status import CheckStatus, HealthReport

__all__ = [
    "HEALTH_AGENT",
    "CheckResult",
    "HealthCheck",
    "HealthMonitor",
    "certificate_expiry",
    "disk_writable",
    "peer_reachable",
]

#: The name the monitor is hosted under on each node that has checks.
HEALTH_AGENT: Final = "_health"

CheckResult = Health | tuple[Health, str]
CheckFn = Callable[[], CheckResult | Awaitable[CheckResult]]


def _positive(_: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(
            f"health check option {attribute.name!r}: expected seconds > 0, got {value!r}"
        )


@final
@attrs.frozen(kw_only=True)
class HealthCheck:
    """One check: what to run, how often, and which breakers it feeds.

    Args:
        name: shown by ``cluster status`` and named in the breakers' reasons.
        fn: a plain function (run in a thread) or an async function (run in
            the node) returning a :class:`Health` or ``(Health, detail)``.
        interval: seconds between two runs (the first runs at once).
        timeout: seconds a run may take; past it, the check reports Unhealthy.
        breakers: the names of the breakers its results feed (every breaker
            of that name on the node: a task's or a resource's, on each worker).
    """

    name: str
    fn: CheckFn = attrs.field(eq=False)
    interval: float = attrs.field(default=30.0, validator=_positive)
    timeout: float = attrs.field(default=10.0, validator=_positive)
    breakers: tuple[str, ...] = ()


class HealthMonitor(Actor):
    """Runs a node's health checks on timers and keeps their last results.

    Args:
        node: the node's name, for logs.
        checks: what to run.
        breakers: the breakers on the node, looked up at each report (the
            workers' and actors' ``breakers``).
    """

    name: ClassVar[str] = HEALTH_AGENT

    def __init__(
        self,
        node: str,
        checks: Sequence[HealthCheck],
        breakers: Callable[[], Iterable[Breaker]] = tuple,
    ) -> None:
        names = [c.name for c in checks]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"node {node!r}: two health checks are named {twice}: rename one")
        self.node = node
        self.checks = list(checks)
        self.breakers = breakers
        self.results: dict[str, CheckStatus] = {}
        self._recorded = trio.Event()  # set (and replaced) on each result

    async def on_start(self) -> None:
        """Runs in the actor's task: a timer per check."""
        for check in self.checks:
            self.start_soon(self._every, check)

    async def _every(self, check: HealthCheck) -> None:
        while True:
            await self.run_check(check)
            await trio.sleep(check.interval)

    async def run_check(self, check: HealthCheck) -> Health | None:
        """Run ``check`` once and report its result (None: it raised)."""
        try:
            with trio.fail_after(check.timeout):
                if inspect.iscoroutinefunction(check.fn):
                    result = await check.fn()
                else:  # in a thread: a plain check may block (fsync, a socket)
                    result = await run_sync(check.fn, abandon_on_cancel=True)
                if inspect.isawaitable(result):
                    result = await result
        except trio.TooSlowError:
            result = (Health.UNHEALTHY, f"no answer within {check.timeout:g} s")
        except Exception as exc:
            log(
                "actorctl:health:check-failed",
                level="error",
                node=self.node,
                check=check.name,
                error_type=type(exc).__name__,
                error=str(exc),
            )
            return None
        health, detail = result if isinstance(result, tuple) else (result, "")
        if not isinstance(health, Health):
            log(
                "actorctl:health:check-failed",
                level="error",
                node=self.node,
                check=check.name,
                error=f"returned {health!r}, not a Health",
            )
            return None
        self._record(check, health, detail)
        return health

    def _record(self, check: HealthCheck, health: Health, detail: str) -> None:
        last = self.results.get(check.name)
        before = None if last is None else last.state.value
        self.results[check.name] = CheckStatus(health, detail, time.time(), tuple(check.breakers))
        if before != health.value:
            log(
                "actorctl:health:changed",
                level="info" if health is Health.HEALTHY else "warning",
                node=self.node,
                check=check.name,
                state=health.value,
                was=before,
                detail=detail,
            )
        if check.breakers:
            for breaker in self.breakers():
                if breaker.name in check.breakers:
                    breaker.report(check.name, health, detail)
        self._recorded.set()
        self._recorded = trio.Event()

    async def wait_result(self) -> None:
        """Wait until a check records its next result."""
        await self._recorded.wait()

    def health_report(self) -> HealthReport:
        """The last result of each check, and the state of each breaker on the node."""
        breakers: dict[str, list[BreakerStatus]] = {}
        for breaker in self.breakers():
            breakers.setdefault(breaker.name, []).append(breaker.status())
        return HealthReport(
            dict(self.results), {name: tuple(found) for name, found in breakers.items()}
        )

    @handler
    async def report(self) -> dict[str, Any]:
        """:meth:`health_report`, in its wire form (``HealthReport.wire``)."""
        return self.health_report().wire()


# -- built-in checks -----------------------------------------------------------------------


def peer_reachable(host: str, port: int, *, timeout: float = 2.0) -> CheckFn:
    """Healthy when a TCP connection to ``host:port`` opens within ``timeout``."""

    async def check() -> CheckResult:
        try:
            with trio.fail_after(timeout):
                stream = await trio.open_tcp_stream(host, port)
        except (OSError, trio.TooSlowError) as exc:
            return Health.UNHEALTHY, f"{host}:{port} unreachable: {exc or 'timed out'}"
        await stream.aclose()
        return Health.HEALTHY

    return check


def disk_writable(directory: Path | str) -> CheckFn:
    """Healthy when a file can be written and synced in ``directory`` (the
    durable store's); Unhealthy when it cannot; Permanently Unavailable when
    the directory is not there."""
    where = Path(directory)

    def check() -> CheckResult:
        if not where.is_dir():
            return Health.PERMANENTLY_UNAVAILABLE, f"{where} is not a directory"
        probe = where / f".health-{os.getpid()}"
        try:
            with probe.open("wb") as f:
                f.write(b"ok")
                f.flush()
                os.fsync(f.fileno())
            probe.unlink()
        except OSError as exc:
            return Health.UNHEALTHY, f"{where} is not writable: {exc}"
        return Health.HEALTHY

    return check


def certificate_expiry(
    path: Path | str, *, days: float = 7.0, clock: Callable[[], float] = time.time
) -> CheckFn:
    """Insecure when the (first) certificate in the PEM file ``path`` expires
    within ``days`` (or has expired, or is not valid yet); Healthy otherwise;
    Unhealthy when it cannot be read."""
    where = Path(path)

    def check() -> CheckResult:
        try:
            cert = x509.load_pem_x509_certificate(where.read_bytes())
        except (OSError, ValueError) as exc:
            return Health.UNHEALTHY, f"cannot read certificate {where}: {exc}"
        now = datetime.datetime.fromtimestamp(clock(), tz=datetime.UTC)
        ends = cert.not_valid_after_utc
        left = (ends - now).total_seconds() / 86400
        if now < cert.not_valid_before_utc:
            return Health.INSECURE, f"{where} is not valid before {cert.not_valid_before_utc}"
        if left <= 0:
            return Health.INSECURE, f"{where} expired on {ends:%Y-%m-%d %H:%M} UTC"
        if left <= days:
            return Health.INSECURE, f"{where} expires in {left:.1f} days ({ends:%Y-%m-%d} UTC)"
        return Health.HEALTHY, f"expires in {left:.0f} days"

    return check
