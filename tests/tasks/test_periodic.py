"""Periodic schedules, pure: exact due times over days, across DST changes,
and the errors that declaring one with bad input gets (tasks/services/_periodic.py)."""

from __future__ import annotations

import datetime
import itertools
from zoneinfo import ZoneInfo

import pytest

from actorctl import App, ConfigError
from actorctl.tasks.services._periodic import Schedule, firing_id

UTC = datetime.UTC
PARIS = ZoneInfo("Europe/Paris")


def at(text: str, zone: datetime.tzinfo = UTC) -> float:
    return datetime.datetime.fromisoformat(text).replace(tzinfo=zone).timestamp()


def dues(schedule: Schedule, start: float, count: int) -> list[str]:
    """The next ``count`` due times after ``start``, as UTC ISO text."""
    found, instant = [], start
    for _ in range(count):
        instant = schedule.next_after(instant)
        found.append(datetime.datetime.fromtimestamp(instant, UTC).strftime("%Y-%m-%dT%H:%MZ"))
    return found


def test_an_interval_is_due_on_multiples_of_itself_from_the_epoch() -> None:
    # Given every 30 minutes, from a time between two due times
    schedule = Schedule.of(every=datetime.timedelta(minutes=30))
    start = at("2026-05-01T10:17:03")
    # Then over two days it is due 96 times, on :00 and :30, 30 minutes apart
    found = schedule.due_between(start, start + 2 * 86400)
    assert len(found) == 96
    assert found[0] == at("2026-05-01T10:30:00")
    assert all(b - a == 1800.0 for a, b in itertools.pairwise(found))
    # And a due time itself is not "after" itself
    assert schedule.next_after(found[0]) == found[1]
    assert Schedule.of(every=7).next_after(14.0) == 21.0


def test_a_cron_in_utc_is_due_at_its_minutes_over_days() -> None:
    schedule = Schedule.of(cron="*/5 9-10 * * mon-fri")
    start = at("2026-05-01T10:50:00")  # a Friday
    assert dues(schedule, start, 3) == [
        "2026-05-01T10:55Z",
        "2026-05-04T09:00Z",
        "2026-05-04T09:05Z",
    ]
    day = schedule.due_between(at("2026-05-04T00:00:00"), at("2026-05-05T00:00:00"))
    assert len(day) == 24  # 12 a hour, two hours
    # Within a minute, the next is the next match, never the same minute again
    assert schedule.next_after(at("2026-05-04T09:05:30")) == at("2026-05-04T09:10:00")


def test_spring_forward_in_paris_a_missing_time_fires_once_after_the_gap() -> None:
    # Given 02:30 every day in Paris, whose clocks go from 02:00 to 03:00 on 2026-03-29
    daily = Schedule.of(cron="30 2 * * *", tz="Europe/Paris")
    found = dues(daily, at("2026-03-27T12:00:00", PARIS), 4)
    # Then it fires at 02:30 CET (01:30Z), at 03:00 CEST on the day (01:00Z), then 02:30 CEST
    assert found == [
        "2026-03-28T01:30Z", "2026-03-29T01:00Z", "2026-03-30T00:30Z", "2026-03-31T00:30Z",
    ]  # fmt: skip
    # And every 30 minutes goes 01:30 CET, then 03:00 CEST (the gap has no due time)
    half = Schedule.of(cron="*/30 * * * *", tz="Europe/Paris")
    assert dues(half, at("2026-03-29T01:00:00", PARIS), 4) == [
        "2026-03-29T00:30Z", "2026-03-29T01:00Z", "2026-03-29T01:30Z", "2026-03-29T02:00Z",
    ]  # fmt: skip
    day = half.due_between(at("2026-03-29T00:00:00", PARIS), at("2026-03-30T00:00:00", PARIS))
    assert len(day) == 46  # a 23-hour day


def test_fall_back_in_paris_a_fixed_time_fires_once_a_wildcard_hour_twice() -> None:
    # Given 02:30 every day in Paris, whose clocks go from 03:00 back to 02:00 on 2026-10-25
    daily = Schedule.of(cron="30 2 * * *", tz="Europe/Paris")
    found = dues(daily, at("2026-10-24T12:00:00", PARIS), 3)
    # Then it fires once on the day, in the first 02:30 (CEST, 00:30Z)
    assert found == ["2026-10-25T00:30Z", "2026-10-26T01:30Z", "2026-10-27T01:30Z"]
    # And every 30 minutes fires in both 02:00-03:00 hours
    half = Schedule.of(cron="*/30 * * * *", tz="Europe/Paris")
    assert dues(half, at("2026-10-25T01:45:00", PARIS), 5) == [
        "2026-10-25T00:00Z", "2026-10-25T00:30Z", "2026-10-25T01:00Z", "2026-10-25T01:30Z",
        "2026-10-25T02:00Z",
    ]  # fmt: skip
    day = half.due_between(at("2026-10-25T00:00:00", PARIS), at("2026-10-26T00:00:00", PARIS))
    assert len(day) == 50  # a 25-hour day


def test_a_firing_id_is_the_schedule_name_and_its_due_time() -> None:
    assert (
        firing_id("report", at("2026-05-01T10:30:00"))
        == "periodic:report@2026-05-01T10:30:00.000000Z"
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"cron": "61 * * * *"},
            "cron expression '61 * * * *': Bad minute (field 1, minute: '61')",
        ),
        ({"cron": "0 0 * * mon-xyz"}, "field 5, day of week"),
        (
            {"cron": "* * * *"},
            "expected 5 fields (minute, hour, day of month, month, day of week), got 4",
        ),
        ({"cron": "* * * * *", "every": 5}, "exactly one of cron=... and every=..., got both"),
        ({}, "exactly one of cron=... and every=..., got neither"),
        ({"every": 0}, "every: expected a positive interval, got 0"),
        (
            {"every": 5, "tz": "Europe/Pari"},
            "unknown timezone 'Europe/Pari': did you mean 'Europe/Paris'?",
        ),
        (
            {"every": 5, "expire": 3},
            "no option 'expire' for a periodic task: did you mean 'expires'?",
        ),
        ({"every": 5, "priority": 12}, "priority: expected a whole number from 0 to 9, got 12"),
    ],
)
def test_a_bad_periodic_declaration_is_refused_naming_what_is_wrong(
    kwargs: dict[str, object], message: str
) -> None:
    app = App("p")

    @app.task
    def tick() -> None: ...

    with pytest.raises(ConfigError) as caught:
        app.add_periodic(tick, **kwargs)  # type: ignore[arg-type]
    assert "periodic task 'p.tick'" in str(caught.value)
    assert message in str(caught.value)


def test_app_periodic_decorates_a_function_or_a_task_and_names_must_be_unique() -> None:
    app = App("p")

    # A plain function becomes a task
    @app.periodic(cron="*/5 * * * *", tz="Europe/Paris", args=(1,), name="five")
    def tick(n: int) -> int:
        return n

    # And a task declared already
    @app.periodic(every=datetime.timedelta(hours=1), catch_up=False)
    @app.task
    def hourly() -> None: ...

    assert sorted(app.periodics) == ["five", "p.hourly"]
    five = app.periodics["five"]
    assert (five.task, five.pool, five.args, five.schedule.tz) == (
        "p.tick",
        "celery",
        (1,),
        "Europe/Paris",
    )
    assert app.periodics["p.hourly"].catch_up is False
    assert app.periodics["p.hourly"].schedule.every == 3600.0
    with pytest.raises(ConfigError, match="two periodic tasks are named 'five'"):
        app.add_periodic(tick, every=60, name="five")
    with pytest.raises(ConfigError, match=r"no task named 'p.tik': did you mean 'p.tick'\?"):
        app.add_periodic("p.tik", every=60)
