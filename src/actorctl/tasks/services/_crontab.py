"""``crontab(...)``: Celery's way of writing a cron schedule, as the cron
expression the beat evaluates (``_periodic.py``).

Celery's ``celery.schedules.crontab`` takes five keyword fields, in an order of
its own (``minute, hour, day_of_week, day_of_month, month_of_year``); each is a
number, a cron field as text (``"*/15"``, ``"1-5"``, ``"mon-fri"``), or a
collection of numbers. Here they make the five fields of a cron expression
(minute, hour, day of month, month, day of week), checked by cronsim, and the
schedule is evaluated in the app's ``timezone`` setting (default UTC), as
Celery evaluates its crontab in ``app.conf.timezone``.

One difference is refused rather than followed silently: when both
``day_of_week`` and ``day_of_month`` are restricted, Celery fires on days that
match both, cron (and so the beat) on days that match either.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import MappingProxyType
from typing import Any, Final, final

import attrs

from ..._errors import ConfigError
from ._periodic import check_cron

__all__ = ["crontab"]

#: Celery's full day names, to cron's three letters.
_DAYS: Final = MappingProxyType(
    {
        "sunday": "sun",
        "monday": "mon",
        "tuesday": "tue",
        "wednesday": "wed",
        "thursday": "thu",
        "friday": "fri",
        "saturday": "sat",
    }
)
_ARGUMENTS: Final = ("minute", "hour", "day_of_week", "day_of_month", "month_of_year")


@final
@attrs.frozen(init=False)
class crontab:
    """A cron schedule with Celery's arguments: ``crontab(minute=0,
    hour="*/3")``, ``crontab(hour=7, minute=30, day_of_week="mon-fri")``.
    Give it as a ``beat_schedule`` entry's ``schedule`` or to
    ``app.add_periodic_task``; it fires in ``app.conf.timezone`` (default UTC).

    Raises:
        ConfigError: a field cron refuses (naming the argument), an argument
            Celery's crontab does not take, or both ``day_of_week`` and
            ``day_of_month`` restricted (Celery wants both to match, cron
            either: give one, or write ``cron=`` with cron's meaning).
    """

    minute: str
    hour: str
    day_of_week: str
    day_of_month: str
    month_of_year: str

    def __init__(
        self,
        minute: Any = "*",
        hour: Any = "*",
        day_of_week: Any = "*",
        day_of_month: Any = "*",
        month_of_year: Any = "*",
        **others: Any,
    ) -> None:
        given = {
            "minute": minute,
            "hour": hour,
            "day_of_week": day_of_week,
            "day_of_month": day_of_month,
            "month_of_year": month_of_year,
        }
        shown = ", ".join(f"{k}={v!r}" for k, v in given.items() if v != "*")
        if others:
            raise ConfigError(
                f"crontab({shown}): no argument {', '.join(sorted(others))}: it takes "
                f"{', '.join(_ARGUMENTS)} (its timezone is app.conf.timezone)"
            )
        fields = {name: _field(f"crontab({shown})", name, value) for name, value in given.items()}
        fields["day_of_week"] = _days(fields["day_of_week"])
        if fields["day_of_week"] != "*" and fields["day_of_month"] != "*":
            raise ConfigError(
                f"crontab({shown}): day_of_week and day_of_month both restricted: Celery "
                "fires on days that match both, cron on days that match either. Give one "
                "of them, or write the cron expression (cron=...) with cron's meaning"
            )
        for name, value in fields.items():
            object.__setattr__(self, name, value)
        try:
            check_cron(self.expression)
        except ConfigError as exc:
            raise ConfigError(f"crontab({shown}): {exc}") from None

    @property
    def expression(self) -> str:
        """The cron expression: minute, hour, day of month, month, day of week."""
        return (
            f"{self.minute} {self.hour} {self.day_of_month} {self.month_of_year} {self.day_of_week}"
        )

    def __repr__(self) -> str:
        return f"<crontab: {self.expression} (m/h/dM/MY/d)>"


def _field(call: str, name: str, value: Any) -> str:
    """One of Celery's crontab fields as a cron field.

    Raises:
        ConfigError: a value of no kind a field takes.
    """
    if isinstance(value, bool):
        raise ConfigError(f"{call}: {name}={value!r}: give a number, a cron field or numbers")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        text = value.strip().replace(" ", "")
        if text:
            return text
    elif isinstance(value, Iterable):
        items = sorted(value, key=str)
        if items and all(isinstance(i, int | str) and not isinstance(i, bool) for i in items):
            return ",".join(str(i) for i in items)
    raise ConfigError(
        f"{call}: {name}={value!r}: give a number, a cron field as text ('*/15', '1-5') "
        "or a collection of numbers"
    )


def _days(field: str) -> str:
    """Celery's full day names (``monday``) as cron's (``mon``)."""
    words = field.lower()
    for long, short in _DAYS.items():
        words = words.replace(long, short)
    return words if words != field.lower() else field
