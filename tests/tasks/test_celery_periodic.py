"""Celery's periodic habits: a port of Celery's ``examples/periodic-tasks``
(``on_after_configure`` and ``add_periodic_task``, with ``beat_schedule``
entries of a ``timedelta`` and a ``crontab``) on a cluster of real nodes
(the testing kit: a services node whose beat fires under a real Controller's
lease, a worker node, real AMQP 1.0), under trio's autojump clock; and the
mapping of each Celery form onto the app's periodic tasks.
"""

from __future__ import annotations

import datetime
import re
from collections import Counter
from typing import Any

import pytest
import trio
from examples.periodic_tasks import app, say

from actorctl import App, ConfigError, NotSupported, crontab, signals
from actorctl.tasks.services._periodic import firing_id
from actorctl.testing import open_cluster

#: Monday 2026-03-30, 07:28:50 UTC: the Monday crontab is due 70 s later.
BASE = datetime.datetime(2026, 3, 30, 7, 28, 50, tzinfo=datetime.UTC).timestamp()


def clock() -> float:
    return BASE + trio.current_time()


async def test_celerys_periodic_example_fires_every_schedule_once_per_due_time(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Given Celery's example app on a cluster, each run of `say` recorded
    runs: list[tuple[str, tuple[Any, ...], float]] = []

    def record(task_id: str, args: Any, **kwargs: Any) -> None:
        runs.append((task_id, tuple(args), clock()))

    signals.task_prerun.connect(record, sender=say, dispatch_uid="test_celery_periodic")
    try:
        async with open_cluster(app, clock=clock):
            start = clock()
            # When 17 simulated minutes pass
            await trio.sleep(17 * 60)
            end = clock()
    finally:
        signals.task_prerun.disconnect(dispatch_uid="test_celery_periodic")
    periodics = app.periodics
    assert set(periodics) == {
        "add every 10",
        "myapp.say('world')",
        "myapp.say('Happy Mondays!')",
        "say-every-minute",
        "say-at-the-quarters",
    }
    # Then every due time of each schedule in the window ran, once, at its due
    # time, with the schedule's arguments; and nothing else ran
    due_of = {
        firing_id(name, due): (name, due)
        for name, periodic in periodics.items()
        for due in periodic.schedule.due_between(start - 60, end)
    }
    counts = Counter(task_id for task_id, _, _ in runs)
    assert counts
    assert max(counts.values()) == 1, "a firing ran twice"
    for task_id, args, ran_at in runs:
        name, due = due_of[task_id]
        assert args == periodics[name].args
        assert due <= ran_at < due + 1.0
    expected = {task_id for task_id, (_, due) in due_of.items() if start < due <= end - 1.0}
    assert expected <= set(counts)
    by_name = Counter(due_of[task_id][0] for task_id in expected)
    assert by_name == {
        "add every 10": 101,
        "myapp.say('world')": 34,
        "myapp.say('Happy Mondays!')": 1,
        "say-every-minute": 17,
        "say-at-the-quarters": 2,
    }
    [monday] = [r for r in runs if r[1] == ("Happy Mondays!",)]
    assert datetime.datetime.fromtimestamp(monday[2], datetime.UTC).strftime("%a %H:%M") == (
        "Mon 07:30"
    )


def test_a_beat_schedule_entry_takes_seconds_a_timedelta_or_a_crontab() -> None:
    mine = App("proj")

    @mine.task
    def add(x: int, y: int) -> int:
        return x + y

    mine.conf.timezone = "Europe/Paris"
    mine.conf.beat_schedule = {
        "add-every-30-seconds": {"task": "proj.add", "schedule": 30.0, "args": (16, 16)},
        "add-every-hour": {"task": "proj.add", "schedule": datetime.timedelta(hours=1)},
        "add-every-monday-morning": {
            "task": f"{__name__}.add",  # Celery's default name of the task
            "schedule": crontab(hour=7, minute=30, day_of_week=1),
            "args": (16, 16),
            "options": {"expires": 60, "queue": "celery"},
        },
    }
    found = mine.periodics
    assert found["add-every-30-seconds"].schedule.every == 30.0
    assert found["add-every-30-seconds"].args == (16, 16)
    assert found["add-every-hour"].schedule.every == 3600.0
    monday = found["add-every-monday-morning"]
    assert (monday.task, monday.schedule.cron, monday.schedule.tz) == (
        "proj.add",
        "30 7 * * 1",
        "Europe/Paris",
    )
    assert monday.options == {"expires": 60}


def test_add_periodic_task_takes_a_signature_any_name_and_replaces_a_name_given_twice() -> None:
    mine = App("proj")
    heard: list[tuple[object, object]] = []

    @mine.task
    def say(what: str) -> str:
        return what

    @mine.on_after_configure.connect
    def setup(sender: App, source: object = None, **kwargs: Any) -> None:
        heard.append((sender, source))
        sender.add_periodic_task(10.0, say.s("hello"), name="add every 10")
        sender.add_periodic_task(60.0, say.s(), ("again",), priority=3)
        sender.add_periodic_task(5.0, say.s("hello"), name="add every 10")  # replaces

    assert heard == []  # sent when the app is configured, not at connect()
    found = mine.periodics
    assert heard == [(mine, mine.conf)]
    assert found["add every 10"].schedule.every == 5.0
    assert found["add every 10"].args == ("hello",)
    called = found["proj.say('again')"]
    assert (called.args, called.options) == (("again",), {"priority": 3})
    assert mine.periodics is not found  # read again: the signal is not sent twice
    assert len(heard) == 1
    # a firing's id stays one that `actorctl control revoke` takes
    assert re.fullmatch(r"periodic:add-every-10:[0-9a-f]{8}@.*", firing_id("add every 10", 0.0))


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"minute": 61}, "crontab(minute=61): cron expression '61 * * * *': Bad minute"),
        (
            {"day_of_week": "mon", "day_of_month": 1},
            "day_of_week and day_of_month both restricted: Celery fires on days that match both",
        ),
        ({"nowfun": None}, "crontab(): no argument nowfun: it takes minute, hour, day_of_week"),
    ],
)
def test_a_crontab_cron_cannot_follow_is_refused_naming_the_argument(
    given: dict[str, Any], says: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)):
        crontab(**given)


def test_crontab_fields_are_celerys_in_cron_order() -> None:
    made = crontab(minute=[0, 30], hour="9-17", day_of_week="monday-friday", month_of_year=6)
    assert made.expression == "0,30 9-17 * 6 mon-fri"


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        (
            {"task": "proj.add"},
            "beat_schedule['x']: no 'schedule': an entry needs task and schedule",
        ),
        (
            {"task": "proj.add", "schedule": "daily"},
            "beat_schedule['x']: schedule='daily': give seconds, a timedelta or crontab(...)",
        ),
        (
            {"task": "proj.add", "schedule": 5, "relative": True},
            "relative=True is not taken: due times are counted from the Unix epoch",
        ),
        (
            {"task": "proj.add", "schedule": 5, "options": {"routing_key": "x"}},
            "no option 'routing_key' for a periodic task",
        ),
        ({"task": "proj.ad", "schedule": 5}, "no task named 'proj.ad': did you mean 'proj.add'?"),
    ],
)
def test_a_wrong_beat_schedule_entry_is_refused_naming_it(entry: dict[str, Any], says: str) -> None:
    mine = App("proj")

    @mine.task
    def add(x: int, y: int) -> int:
        return x + y

    def give() -> object:
        mine.conf.beat_schedule = {"x": entry}
        return mine.periodics  # the tasks are looked up when it is read

    with pytest.raises(ConfigError, match=re.escape(says)):
        give()


def test_celery_beat_s_command_is_refused_naming_cluster_up() -> None:
    with pytest.raises(NotSupported, match=re.escape("actorctl cluster up cluster.toml")):
        app.start()
    assert not hasattr(app, "Beat")
