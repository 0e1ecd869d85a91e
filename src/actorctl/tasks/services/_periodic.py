"""Periodic schedules: when a periodic task is due (pure: no I/O, no clock).

Two kinds, each answering one question, :meth:`Schedule.next_after`: the first
due time strictly after an instant (seconds since the epoch).

- **Interval** (``every``): the due times are the multiples of the interval
  counted from the Unix epoch (``every=30*60`` is due at :00 and :30 UTC, every
  day). They do not depend on when a beat started, so every beat of a cluster,
  before and after a restart, agrees on them, and a firing's id (its schedule's
  name and due time) is the same wherever it is computed. An interval is
  elapsed time: its timezone is only how times are shown.
- **Cron** (five fields: minute, hour, day of month, month, day of week),
  evaluated in a named IANA timezone (``zoneinfo``; default UTC) by the kept
  parser ``cronsim``, with cron's own rules across a DST change (cronsim follows
  cronie, Debian's cron):

  * spring forward: a time that does not exist that day (02:30 in Paris on
    2026-03-29) fires once, at the first instant after the gap (03:00 CEST);
    a job every 30 minutes fires at 01:30 CET, then 03:00 CEST;
  * fall back: a job at a fixed hour and minute (``30 2 * * *``) fires once,
    in the first of the two 02:30s (CEST); a job whose hour is a wildcard or a
    range (``*/30 * * * *``) fires in both repeated hours.

A :class:`PeriodicTask` is a schedule with what it sends: a task by name, its
pool, arguments and options, and ``catch_up`` (what a restart does about due
times that passed while no beat ran: one firing, or a logged skip).
"""

from __future__ import annotations

import datetime
import difflib
import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

import attrs
from cronsim import CronSim, CronSimError

from ..._errors import ConfigError
from .._cluster_tables import PeriodicTable

__all__ = ["PERIODIC_OPTIONS", "PeriodicTask", "Schedule", "firing_id"]

#: The task options a periodic task may carry (sent with each firing).
PERIODIC_OPTIONS: Final = frozenset({"queue", "expires", "priority"})
#: A name used as it is in a firing's id (any other name is hashed there).
_ID_SAFE: Final = re.compile(r"[A-Za-z0-9_.:-]{1,120}")
_NAME_MAX: Final = 200
_CRON_FIELDS: Final = ("minute", "hour", "day of month", "month", "day of week")
#: Due times counted at most when a long outage is caught up or skipped.
_MAX_COUNTED: Final = 100_000


@final
@attrs.frozen
class Schedule:
    """When a periodic task is due: ``every`` seconds, or a ``cron`` expression
    in timezone ``tz``. Build one with :meth:`of`, which checks its input."""

    every: float | None
    cron: str | None
    tz: str = "UTC"
    _zone: ZoneInfo = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_zone", zone_of(self.tz))

    @classmethod
    def of(
        cls,
        *,
        every: float | datetime.timedelta | None = None,
        cron: str | None = None,
        tz: str | None = None,
    ) -> Schedule:
        """Check and build a schedule: exactly one of ``every`` (seconds or a
        timedelta, > 0) and ``cron`` (five fields), and a known ``tz``.

        Raises:
            ConfigError: both or neither, a bad interval, a cron expression
                that cronsim refuses (naming the field), an unknown timezone.
        """
        if (every is None) == (cron is None):
            both = "both" if every is not None else "neither"
            raise ConfigError(
                f"a periodic task needs exactly one of cron=... and every=..., got {both}"
            )
        zone = tz if tz is not None else "UTC"
        if not isinstance(zone, str):
            raise ConfigError(f"tz: expected a timezone name like 'Europe/Paris', got {zone!r}")
        zone_of(zone)
        if every is not None:
            seconds = every.total_seconds() if isinstance(every, datetime.timedelta) else every
            if isinstance(seconds, bool) or not isinstance(seconds, int | float):
                raise ConfigError(f"every: expected seconds or a timedelta, got {every!r}")
            if not math.isfinite(seconds) or seconds <= 0:
                raise ConfigError(f"every: expected a positive interval, got {every!r}")
            return cls(float(seconds), None, zone)
        if not isinstance(cron, str):
            raise ConfigError(f"cron: expected a cron expression like '*/5 * * * *', got {cron!r}")
        check_cron(cron)
        return cls(None, cron, zone)

    @property
    def kind(self) -> str:
        return "every" if self.every is not None else "cron"

    @property
    def expression(self) -> str:
        """How it is shown: ``every 1800s`` or the cron expression."""
        return f"every {self.every:g}s" if self.every is not None else str(self.cron)

    def next_after(self, instant: float) -> float:
        """The first due time strictly after ``instant`` (seconds since the epoch)."""
        if self.every is not None:
            return (math.floor(instant / self.every) + 1) * self.every
        start = datetime.datetime.fromtimestamp(instant, self._zone)
        due = next(CronSim(str(self.cron), start)).timestamp()
        # cronsim matches whole minutes after the minute of ``start``.
        return due if due > instant else self.next_after(instant + 60.0)

    def due_between(self, after: float, upto: float, limit: int = 100_000) -> list[float]:
        """The due times in (``after``, ``upto``], at most ``limit`` of the last ones."""
        found: list[float] = []
        due = self.next_after(after)
        while due <= upto:
            found.append(due)
            if len(found) > limit:
                del found[0]
            due = self.next_after(due)
        return found

    def passed(self, since: float, now: float) -> tuple[int, float]:
        """How many due times fell in (``since``, ``now``], and the latest
        (``since`` if none): what a beat that did not fire meanwhile missed.
        Counted up to ``_MAX_COUNTED`` for a cron schedule (a very long outage:
        the latest is found beyond it, uncounted)."""
        if self.every is not None:
            count = math.floor(now / self.every) - math.floor(since / self.every)
            return max(0, count), math.floor(now / self.every) * self.every
        due, count, latest = self.next_after(since), 0, since
        while due <= now and count < _MAX_COUNTED:
            count, latest, due = count + 1, due, self.next_after(due)
        while due <= now:
            latest, due = due, self.next_after(due)
        return count, latest

    def show(self, instant: float | None) -> str | None:
        """``instant`` as an ISO 8601 time in the schedule's timezone."""
        if instant is None:
            return None
        return datetime.datetime.fromtimestamp(instant, self._zone).isoformat()


@final
@attrs.frozen
class PeriodicTask:
    """A schedule and what it sends each time it is due.

    Attributes:
        name: unique in the cluster; with a due time, the id of each firing.
        task: the task's name; pool: where it goes.
        catch_up: True (default): due times that passed while no beat ran are
            fired once when a beat runs again; False: they are skipped, and the
            skip is logged with how many.
        options: ``expires`` (seconds) and ``priority`` of each firing.
    """

    name: str
    task: str
    pool: str
    schedule: Schedule
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = attrs.field(factory=dict)
    catch_up: bool = True
    options: Mapping[str, Any] = attrs.field(factory=dict)

    def describe(self, last: float | None, next_due: float | None) -> dict[str, Any]:
        """A row of ``actorctl schedule list``."""
        return {
            "name": self.name,
            "task": self.task,
            "pool": self.pool,
            "kind": self.schedule.kind,
            "schedule": self.schedule.expression,
            "tz": self.schedule.tz,
            "catch_up": self.catch_up,
            "last": last,
            "last_text": self.schedule.show(last),
            "next": next_due,
            "next_text": self.schedule.show(next_due),
        }


def firing_id(name: str, due: float) -> str:
    """The task id (and, with a suffix, message id) of ``name``'s firing due at
    ``due``: the same wherever and however often it is computed. A name of
    letters, digits and ``_ . : -`` is used as it is; any other (Celery's
    ``"add every 10"``) as those characters of it and a hash of the whole, so
    that the id stays one that ``actorctl control revoke`` takes."""
    when = datetime.datetime.fromtimestamp(due, datetime.UTC)
    return f"periodic:{_id_part(name)}@{when.strftime('%Y-%m-%dT%H:%M:%S.%fZ')}"


def _id_part(name: str) -> str:
    if _ID_SAFE.fullmatch(name):
        return name
    slug = re.sub(r"[^A-Za-z0-9_.:-]+", "-", name).strip("-")[:60] or "periodic"
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{slug}:{digest}"


def check_name(name: object) -> str:
    """A periodic task's name: any text of 1 to 200 characters without control
    characters (Celery's ``name="add every 10"`` is one).

    Raises:
        ConfigError: saying what a name may hold.
    """
    if not isinstance(name, str) or not 0 < len(name) <= _NAME_MAX or not name.isprintable():
        raise ConfigError(
            f"periodic task name: expected text of 1 to {_NAME_MAX} characters without "
            f"control characters, got {name!r}"
        )
    return name


def check_cron(expression: str) -> None:
    """Check a cron expression with cronsim.

    Raises:
        ConfigError: naming the expression and the field cronsim refused.
    """
    fields = expression.split()
    if len(fields) != len(_CRON_FIELDS):
        raise ConfigError(
            f"cron expression {expression!r}: expected 5 fields "
            f"({', '.join(_CRON_FIELDS)}), got {len(fields)}"
        )
    try:
        CronSim(expression, datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC))
    except CronSimError as exc:
        said = str(exc).lower().replace("-", " ")
        field = next((f for f in _CRON_FIELDS if f in said), None)
        which = ""
        if field is not None:
            which = f" (field {_CRON_FIELDS.index(field) + 1}, {field}: "
            which += f"{fields[_CRON_FIELDS.index(field)]!r})"
        raise ConfigError(f"cron expression {expression!r}: {exc}{which}") from None


def zone_of(name: str) -> ZoneInfo:
    """The timezone ``name`` (an IANA name such as ``Europe/Paris``).

    Raises:
        ConfigError: an unknown name, with the nearest known one.
    """
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        close = difflib.get_close_matches(name, sorted(available_timezones()), n=1)
        hint = f": did you mean {close[0]!r}?" if close else " (an IANA name like 'Europe/Paris')"
        raise ConfigError(f"unknown timezone {name!r}{hint}") from None


def periodic_task(
    tasks: Mapping[str, str],
    *,
    name: object,
    task: object,
    cron: str | None = None,
    every: float | datetime.timedelta | None = None,
    tz: str | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    catch_up: object = True,
    options: Mapping[str, Any] | None = None,
) -> PeriodicTask:
    """Check and build a periodic task.

    Args:
        tasks: the app's task names, each with its pool.

    Raises:
        ConfigError: an unknown task ("did you mean"), a bad schedule, bad
            arguments or options, naming the periodic task.
    """
    label = check_name(name)
    try:
        if not isinstance(task, str) or task not in tasks:
            close = difflib.get_close_matches(str(task), sorted(tasks), n=1)
            hint = f": did you mean {close[0]!r}?" if close else f" (tasks: {sorted(tasks)})"
            raise ConfigError(f"task: no task named {task!r}{hint}")
        schedule = Schedule.of(every=every, cron=cron, tz=tz)
        if not isinstance(catch_up, bool):
            raise ConfigError(f"catch_up: expected true or false, got {catch_up!r}")
        if isinstance(args, str | bytes) or not isinstance(args, Sequence):
            raise ConfigError(f"args: expected a list, got {args!r}")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise ConfigError(f"kwargs: expected a table of keyword arguments, got {kwargs!r}")
        given = dict(options or {})
        for option in given:
            if option not in PERIODIC_OPTIONS:
                close = difflib.get_close_matches(option, sorted(PERIODIC_OPTIONS), n=1)
                hint = f"did you mean {close[0]!r}?" if close else str(sorted(PERIODIC_OPTIONS))
                raise ConfigError(f"no option {option!r} for a periodic task: {hint}")
        expires = given.get("expires")
        if expires is not None and (not isinstance(expires, int | float) or expires <= 0):
            raise ConfigError(f"expires: expected seconds > 0, got {expires!r}")
        priority = given.get("priority")
        if priority is not None and (type(priority) is not int or not 0 <= priority <= 9):
            raise ConfigError(f"priority: expected a whole number from 0 to 9, got {priority!r}")
        pool = given.pop("queue", None) or tasks[task]
    except ConfigError as exc:
        raise ConfigError(f"periodic task {label!r}: {exc}") from None
    return PeriodicTask(
        label, task, str(pool), schedule, tuple(args), dict(kwargs or {}), catch_up, given
    )


def cluster_periodics(
    declared: Mapping[str, PeriodicTask],
    tasks: Mapping[str, str],
    tables: Sequence[PeriodicTable],
    path: object,
) -> list[PeriodicTask]:
    """The periodic tasks of a cluster: those its app declares and its
    cluster.toml's ``[[periodic]]`` tables (their keys and typed values
    checked already, as records), each checked against the app.

    Raises:
        ConfigError: naming the file, the table and what is wrong; a name used
            by two of them.
    """
    found = dict(declared)
    for index, table in enumerate(tables):
        try:
            periodic = periodic_task(
                tasks, name=table.name, task=table.task, cron=table.cron, every=table.every,
                tz=table.tz, args=table.args if table.args is not None else [],
                kwargs=table.kwargs, catch_up=table.catch_up, options=table.options(),
            )  # fmt: skip
        except ConfigError as exc:
            raise ConfigError(f"{path}: periodic[{index}]: {exc}") from None
        if periodic.name in found:
            where = "declared by the app too" if periodic.name in declared else "used twice"
            raise ConfigError(
                f"{path}: periodic[{index}]: the periodic task name {periodic.name!r} is "
                f"{where}: names must be unique"
            )
        found[periodic.name] = periodic
    return list(found.values())
