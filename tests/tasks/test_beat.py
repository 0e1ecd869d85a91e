"""The beat on real in-process nodes (real sockets, a real worker running the
task), under trio's autojump clock: days of periodic firings in milliseconds,
and the scheduler lease that lets one beat of two fire (tasks/services/_beat.py,
_beat_lease.py).

Every node's wall clock is ``BASE + trio.current_time()``, so due times and the
times the task records are exact.
"""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from actorctl import ActorctlError, App, RemoteError, TaskContext, open_node
from actorctl.cluster import load_cluster
from actorctl.ops import Controller
from actorctl.store import Store
from actorctl.tasks._hosting import _worker_class
from actorctl.tasks.client._client import Directory
from actorctl.tasks.services._beat import Beat
from actorctl.tasks.services._periodic import PeriodicTask, Schedule, firing_id
from actorctl.tasks.services._schedules import cluster_schedules
from actorctl.tasks.worker._control import WorkerState
from tests.support.harness import Logs, free_port

BASE = datetime.datetime(2026, 3, 28, 12, 0, tzinfo=datetime.UTC).timestamp()
DAY = 86400.0

app = App("beat")
app.pool("celery", concurrency=4)  # an async task: no thread
#: The schedules of the catch-up test.
NAMES = ("caught", "skipped")
#: (task id, the node's wall clock when it ran), one per run.
RUNS: list[tuple[str, float]] = []


@app.task(bind=True)
async def tick(ctx: TaskContext) -> None:
    RUNS.append((ctx.id, BASE + trio.current_time()))


def clock() -> float:
    return BASE + trio.current_time()


def schedules(*periodics: tuple[str, Schedule]) -> list[PeriodicTask]:
    return [PeriodicTask(name, "beat.tick", "celery", schedule) for name, schedule in periodics]


# Long heartbeats and idle times: the connections stay up across simulated hours.
QUIET = {"idle_timeout": 3 * DAY, "peer_idle_timeout": 3 * DAY, "clock": clock, "insecure": True}


@asynccontextmanager
async def worker_node(port: int) -> AsyncIterator[Directory]:
    """A node running the pool ``celery``'s worker; yields the directory naming it."""
    directory = Directory({"celery": f"amqp://127.0.0.1:{port}/celery"})
    worker = _worker_class(app, "celery")(app, "celery", directory, WorkerState())
    async with open_node("worker", {"celery": worker}, port=port, **QUIET):
        yield directory


@pytest.fixture(autouse=True)
def _fresh_runs() -> None:
    RUNS.clear()


async def test_a_beat_fires_at_exactly_its_due_times_over_two_simulated_days(
    autojump_clock: trio.abc.Clock, logs: Logs
) -> None:
    # Given a beat with an interval and a cron in Paris (across its spring-forward)
    half_hour = Schedule.of(every=1800)
    night = Schedule.of(cron="30 2 * * *", tz="Europe/Paris")
    beat = Beat(schedules(("half-hour", half_hour), ("night", night)), Directory())
    async with worker_node(free_port()) as directory:
        beat.directory = directory
        async with open_node("services", {"beat": beat}, **QUIET):
            start = clock()
            # When two days pass
            await trio.sleep(2 * DAY + 1)
            end = clock()
    # Then the task ran once per due time, each at its due time exactly
    expected = {firing_id("half-hour", d): d for d in half_hour.due_between(start, end)}
    expected |= {firing_id("night", d): d for d in night.due_between(start, end)}
    assert len(expected) == 96 + 2
    assert dict(RUNS) == expected
    assert len(RUNS) == len(expected)
    # And the night's firings are 03:00 CEST on the day of the change (01:00Z), then 02:30 CEST
    nights = sorted(d for i, d in RUNS if i.startswith("periodic:night@"))
    assert nights == [BASE + 13 * 3600, BASE + 36.5 * 3600]
    fired = logs.of_type("actorctl:beat:fired")
    assert len(fired) == len(expected)
    assert not logs.of_type("actorctl:beat:late")


@asynccontextmanager
async def controller_node(tmp_path: Path, port: int) -> AsyncIterator[str]:
    """A node hosting a real Controller (the lease grantor); yields its address."""
    (tmp_path / "cluster.toml").write_text(
        f'[cluster]\ninsecure = true\ncontroller = "127.0.0.1:{port}"\n\n'
        f'[[node]]\nname = "x"\nlisten = "127.0.0.1:{free_port()}"\n'
    )
    config = load_cluster(tmp_path / "cluster.toml")
    controller = Controller(config, {}, trio.Event())
    async with open_node("controller", {"controller": controller}, port=port, **QUIET):
        yield f"amqp://127.0.0.1:{port}/controller"


async def run_beat(beat: Beat, name: str, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    async with open_node(name, {"beat": beat}, **QUIET):
        task_status.started()
        await trio.sleep_forever()


async def test_two_beats_under_one_lease_fire_each_due_time_once_and_take_over_after_the_ttl(
    autojump_clock: trio.abc.Clock, tmp_path: Path, logs: Logs
) -> None:
    every, ttl = 60.0, 10.0
    minute = Schedule.of(every=every)
    controller_port = free_port()
    async with (
        controller_node(tmp_path, controller_port) as grantor,
        worker_node(free_port()) as directory,
    ):
        # Given two beats with the same schedule under one grantor, A first
        a = Beat(schedules(("minute", minute)), directory, lease=grantor, lease_ttl=ttl)
        b = Beat(schedules(("minute", minute)), directory, lease=grantor, lease_ttl=ttl)
        start = clock()
        async with trio.open_nursery() as nursery:
            a_scope = trio.CancelScope()

            async def run_a(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                with a_scope:
                    await run_beat(a, "a", task_status=task_status)

            await nursery.start(run_a)
            with trio.fail_after(ttl):
                await a.wait_holding()
            await nursery.start(run_beat, b, "b")
            # When ten minutes pass, A holding the lease
            await trio.sleep(600)
            assert a.fired >= 9
            assert b.fired == 0
            assert not b.holding()
            # And A stops (its node too) just after a firing
            await trio.sleep(minute.next_after(clock()) + 1 - clock())
            fired_by_a = a.fired
            a_scope.cancel(reason="the holder stops")
            stopped = clock()
            # Then B takes over once A's lease ran out, and fires on
            with trio.fail_after(2 * ttl):
                await b.wait_holding()
            took_over = clock()
            assert stopped + ttl - 1 <= took_over <= stopped + ttl + ttl / 3 + 1
            await trio.sleep(600)
            end = clock()
            nursery.cancel_scope.cancel(reason="test over")
    # And every due time ran exactly once, fired by one beat or the other
    expected = {firing_id("minute", d): d for d in minute.due_between(start, end)}
    ran = [task_id for task_id, _ in RUNS]
    assert sorted(ran) == sorted(expected)
    assert a.fired + b.fired == len(expected)
    assert a.fired == fired_by_a
    assert b.fired >= 10
    leaders = logs.of_type("actorctl:beat:leader")
    assert [m["fence"] for m in leaders] == [1, 2]


async def test_schedule_list_with_no_beat_says_so(
    autojump_clock: trio.abc.Clock, tmp_path: Path
) -> None:
    async with (
        controller_node(tmp_path, free_port()) as grantor,
        open_node("cli", host=None, **QUIET) as cli,
    ):
        with pytest.raises((RemoteError, ActorctlError), match="no beat holds the scheduler lease"):
            await cluster_schedules(cli.ref(grantor).with_options(timeout=5), cli.ref)


async def test_a_beat_that_cannot_renew_its_lease_stops_firing_when_it_runs_out(
    autojump_clock: trio.abc.Clock, tmp_path: Path, logs: Logs
) -> None:
    every, ttl = 60.0, 30.0
    minute = Schedule.of(every=every)
    async with worker_node(free_port()) as directory:
        port = free_port()
        lease = f"amqp://127.0.0.1:{port}/controller"
        beat = Beat(schedules(("minute", minute)), directory, lease=lease, lease_ttl=ttl)
        async with trio.open_nursery() as nursery:
            grantor_scope = trio.CancelScope()

            async def run_grantor(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                with grantor_scope:
                    async with controller_node(tmp_path, port):
                        task_status.started()
                        await trio.sleep_forever()

            await nursery.start(run_grantor)
            await nursery.start(run_beat, beat, "services")
            with trio.fail_after(ttl):
                await beat.wait_holding()
            # Given a beat firing under its lease
            await trio.sleep(300)
            assert beat.fired >= 4
            # When its grantor goes away
            grantor_scope.cancel(reason="the controller stops")
            stopped, before = clock(), beat.fired
            # Then it fires at most until its lease (less the margin) runs out, then no more
            await trio.sleep(3600)
            assert beat.fired - before <= ttl / every + 1
            assert not beat.holding()
            assert logs.of_type("actorctl:beat:lease-unrenewed")
            assert clock() - stopped >= 3600
            nursery.cancel_scope.cancel(reason="test over")


async def test_a_beat_with_no_controller_to_ask_fires_nothing_and_says_why_once(
    autojump_clock: trio.abc.Clock, logs: Logs
) -> None:
    # Given a beat whose grantor address has nothing listening (a services node
    # run alone with `node run --cluster`, no Controller)
    minute = Schedule.of(every=60.0)
    async with worker_node(free_port()) as directory:
        beat = Beat(
            schedules(("minute", minute)),
            directory,
            lease=f"amqp://127.0.0.1:{free_port()}/controller",
            lease_ttl=30.0,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(run_beat, beat, "services")
            # When an hour of due times passes
            await trio.sleep(3600)
            nursery.cancel_scope.cancel(reason="test over")
    # Then nothing fired, and one log line said why (not one per renewal)
    assert beat.fired == 0
    assert RUNS == []
    said = logs.of_type("actorctl:beat:no-lease")
    assert len(said) == 1
    assert "no Controller answers" in said[0]["why"]


async def test_a_reloaded_schedule_is_followed_in_place(
    autojump_clock: trio.abc.Clock, logs: Logs
) -> None:
    # Given a beat firing "kept" every hour and "dropped" every 10 minutes
    hourly, ten = Schedule.of(every=3600), Schedule.of(every=600)
    beat = Beat(schedules(("kept", hourly), ("dropped", ten)), Directory())
    async with worker_node(free_port()) as directory:
        beat.directory = directory
        async with open_node("services", {"beat": beat}, **QUIET):
            await trio.sleep(3600 - trio.current_time() % 3600 + 1)  # past one hourly firing
            changed_at = clock()
            # When a reload makes "kept" every 15 minutes, drops "dropped" and adds "added"
            lines = beat.replace(
                schedules(("kept", Schedule.of(every=900)), ("added", Schedule.of(every=1200)))
            )
            await trio.sleep(3600)
            end = clock()
    # Then it said so, and from then on fired the new schedules only, none for the past
    assert lines == [
        "beat: periodic dropped removed",
        "beat: periodic kept changed",
        "beat: periodic added added",
    ]
    after = sorted(i.partition("@")[0] for i, at in RUNS if at > changed_at)
    assert after.count("periodic:kept") == len(Schedule.of(every=900).due_between(changed_at, end))
    assert after.count("periodic:added") == 3  # every 20 minutes, for an hour
    assert "periodic:dropped" not in after
    assert not logs.of_type("actorctl:beat:catching-up")


async def test_due_times_missed_while_no_beat_ran_make_one_firing_for_the_latest(
    autojump_clock: trio.abc.Clock, logs: Logs
) -> None:
    # Given a beat firing "caught" and "skipped" (catch_up = false) every half
    # hour, that has fired both twice. (Its store outlives the node, as a
    # durable one does: here the same memory store, so that no SQLite thread
    # lets the autojump clock run ahead; tests/tasks/test_periodic_cluster.py kills a
    # real services node on a real SQLite store.)
    half_hour = Schedule.of(every=1800)
    periodics = [
        PeriodicTask("caught", "beat.tick", "celery", half_hour),
        PeriodicTask("skipped", "beat.tick", "celery", half_hour, catch_up=False),
    ]
    store = Store.memory("services")
    async with worker_node(free_port()) as directory:
        beat = Beat(periodics, directory)
        async with open_node("services", {"beat": beat}, store=store, **QUIET):
            started = clock()
            await trio.sleep(3600 - trio.current_time() % 3600 + 60)  # past two due times
        stopped = clock()
        before = half_hour.due_between(started, stopped)
        assert len(before) == 2
        assert sorted(RUNS) == sorted((firing_id(n, d), d) for d in before for n in NAMES)
        # When no beat runs for two and a half hours (five due times), then one starts again
        await trio.sleep(5 * 1800)
        restarted = clock()
        missed = half_hour.due_between(stopped, restarted)
        assert len(missed) == 5
        beat = Beat(periodics, directory)
        async with open_node("services", {"beat": beat}, store=store, **QUIET):
            await trio.sleep(600)  # less than the next due time
            after_restart = RUNS[4:]
            await trio.sleep(1800)  # past the next one
            end = clock()
    # Then "caught" fired once, at once, for the latest missed due time; "skipped" not at all
    assert after_restart == [(firing_id("caught", missed[-1]), restarted)]
    # and each said so: how many due times that firing stands for, how many were skipped
    caught = logs.of_type("actorctl:beat:catching-up")
    assert [(m["schedule"], m["missed"], m["fires_once"]) for m in caught] == [
        ("caught", 5, missed[-1])
    ]
    skipped = logs.of_type("actorctl:beat:skipped")
    assert [(m["schedule"], m["skipped"], m["last_skipped"]) for m in skipped] == [
        ("skipped", 5, missed[-1])
    ]
    # and both fired at the next due time, once each, as before
    (following,) = half_hour.due_between(restarted, end)
    assert sorted(RUNS[5:]) == sorted((firing_id(n, following), following) for n in NAMES)
    assert len(RUNS) == 4 + 1 + 2
