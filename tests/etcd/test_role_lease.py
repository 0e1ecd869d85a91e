"""The scheduler role's lease in etcd (etcd/_role_lease.py) and beats that
fire under it (a cluster that spans hosts), against a real etcd.

Each test's role lives under a cluster name of its own. The beats run on real
in-process nodes on 127.0.0.1 with a real worker running the task, in real
time (etcd counts leases on its own clock): waits are on events, bounded by
``trio.fail_after``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from actorctl import ActorctlError, App, TaskContext, open_node
from actorctl.etcd import EtcdClient, EtcdRoleLease
from actorctl.etcd._role_lease import role_key, role_state_key
from actorctl.store import Store
from actorctl.tasks._hosting import _worker_class
from actorctl.tasks.client._client import Directory
from actorctl.tasks.services._beat import RECORDED_BY, Beat
from actorctl.tasks.services._periodic import PeriodicTask, Schedule, firing_id
from actorctl.tasks.worker._control import WorkerState
from tests.support.etcd_server import EtcdServer, open_proxy
from tests.support.harness import Logs, free_port

app = App("roles")
app.pool("celery", concurrency=4)
#: The task id of each run of ``tick``.
RUNS: list[str] = []
#: Who waits for how many runs (:func:`runs_reach`).
_WAITING: list[tuple[int, trio.Event]] = []


@app.task(bind=True)
async def tick(ctx: TaskContext) -> None:
    RUNS.append(ctx.id)
    for count, event in _WAITING:
        if len(RUNS) >= count:
            event.set()


async def runs_reach(count: int) -> None:
    """Wait until ``tick`` has run ``count`` times in all (it runs in this trio run)."""
    if len(RUNS) < count:
        event = trio.Event()
        _WAITING.append((count, event))
        await event.wait()


@pytest.fixture(autouse=True)
def _fresh_runs() -> None:
    RUNS.clear()
    _WAITING.clear()


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> str:
    """A cluster name of the test's own (its roles' keys are under it)."""
    return f"roles-{request.node.name.removeprefix('test_')[:40].replace('_', '-').strip('-')}"


async def test_one_candidate_holds_the_role_and_the_next_starts_from_what_it_recorded(
    etcd: EtcdServer, cluster: str
) -> None:
    client = EtcdClient([etcd.url], timeout=2)
    a = EtcdRoleLease(client, cluster, "scheduler")
    b = EtcdRoleLease(client, cluster, "scheduler")
    with trio.fail_after(10):
        # Given A holds the role (nothing recorded yet)
        first = await a.request("node-a", 3)
        assert first["granted"]
        assert first["state"] == {}
        # Then B is refused, and told who holds it
        refused = await b.request("node-b", 3)
        assert refused == {"granted": False, "fence": first["fence"], "holder": "node-a"}
        # When A records a firing, and renews
        assert await a.record({"minute": 120.0})
        renewed = await a.request("node-a", 3)
        assert renewed["granted"]
        assert renewed["fence"] == first["fence"]
        # Then B, which does not hold it, cannot record over it
        assert not await b.record({"minute": 1.0})
        # When A resigns, B takes the role at once, with a greater fence,
        # starting from what A recorded
        await a.resign()
        taken = await b.request("node-b", 3)
    assert taken["granted"]
    assert taken["fence"] > first["fence"]
    assert taken["state"] == {"minute": 120.0}
    holder = await client.get(role_key(cluster, "scheduler"))
    assert holder is not None
    assert holder.value == b"node-b"


async def test_a_holder_whose_lease_ended_behind_its_back_is_fenced_off(
    etcd: EtcdServer, cluster: str, logs: Logs
) -> None:
    client = EtcdClient([etcd.url], timeout=2)
    a = EtcdRoleLease(client, cluster, "scheduler")
    b = EtcdRoleLease(client, cluster, "scheduler")
    with trio.fail_after(10):
        # Given A holds the role
        assert (await a.request("node-a", 3))["granted"]
        assert await a.record({"minute": 60.0})
        # When its lease ends without A knowing (as when etcd expired it while
        # A was cut off) and B takes the role
        held = await client.get(role_key(cluster, "scheduler"))
        assert held is not None
        await client.revoke(held.lease)
        assert (await b.request("node-b", 3))["granted"]
        assert await b.record({"minute": 120.0})
        # Then A's next act is refused by etcd, and its state is not written
        assert not await a.record({"minute": 180.0})
        state = await client.get(role_state_key(cluster, "scheduler"))
        # And A asks again and is told B holds it
        again = await a.request("node-a", 3)
    assert state is not None
    assert state.value == b'{"minute": 120.0}'
    assert again["granted"] is False
    assert again["holder"] == "node-b"
    assert logs.of_type("actorctl:role:fenced-off")


async def test_a_holder_cut_off_from_etcd_acts_no_more_and_says_so(
    etcd: EtcdServer, cluster: str
) -> None:
    with trio.fail_after(10):
        async with open_proxy(etcd.client_port) as proxy:
            # Given a holder that reaches etcd through a link the test can cut
            a = EtcdRoleLease(EtcdClient([proxy.url], timeout=1), cluster, "scheduler")
            assert (await a.request("node-a", 3))["granted"]
            # When the link is cut
            proxy.cut()
            # Then its next act is refused (it cannot be recorded), within the
            # client's timeout, and a renewal fails with a clear error
            assert not await a.record({"minute": 60.0})
            with pytest.raises(ActorctlError, match=r"role 'scheduler': .*etcd"):
                await a.request("node-a", 3)


# -- beats under the role's lease ---------------------------------------------------------


#: Every second: the schedule of the beats' tests.
SECOND = Schedule.of(every=1.0)
PERIODICS = [PeriodicTask("second", "roles.tick", "celery", SECOND)]


def assert_each_due_time_ran_once(logs: Logs) -> None:
    """No due time ran twice, and none was skipped: from the first firing to
    the last, each ran once, or a catch-up firing says it stood for it."""
    assert [task for task, n in Counter(RUNS).items() if n > 1] == []
    fired = sorted(m["due"] for m in logs.of_type("actorctl:beat:fired"))
    assert sorted(RUNS) == sorted(firing_id("second", due) for due in fired)
    expected = [fired[0], *SECOND.due_between(fired[0], fired[-1])]
    stood_for = sum(m["missed"] - 1 for m in logs.of_type("actorctl:beat:catching-up"))
    assert len(fired) + stood_for == len(expected)


def etcd_beat(directory: Directory, client: EtcdClient, cluster: str, ttl: int) -> Beat:
    """A beat of ``PERIODICS`` under ``cluster``'s scheduler role in etcd."""
    lease = EtcdRoleLease(client, cluster, "scheduler")
    return Beat(PERIODICS, directory, lease=lease, lease_ttl=ttl)


@asynccontextmanager
async def worker_node() -> AsyncIterator[Directory]:
    """A node running pool ``celery``'s worker; yields the directory naming it."""
    port = free_port()
    directory = Directory({"celery": f"amqp://127.0.0.1:{port}/celery"})
    worker = _worker_class(app, "celery")(app, "celery", directory, WorkerState())
    async with open_node("worker", {"celery": worker}, port=port, insecure=True):
        yield directory


async def run_beat(beat: Beat, name: str, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    async with open_node(name, {"beat": beat}, insecure=True):
        task_status.started()
        await trio.sleep_forever()


async def test_two_beats_on_etcd_fire_each_due_time_once_and_one_takes_over_when_the_other_stops(
    etcd: EtcdServer, cluster: str, logs: Logs
) -> None:
    ttl = 2
    client = EtcdClient([etcd.url], timeout=2)
    async with worker_node() as directory, trio.open_nursery() as nursery:
        # Given two beats with one schedule, each on a node of its own, under
        # the scheduler role's lease in etcd; A first
        a = etcd_beat(directory, client, cluster, ttl)
        b = etcd_beat(directory, client, cluster, ttl)
        a_scope = trio.CancelScope()

        async def run_a(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            with a_scope:
                await run_beat(a, "a", task_status=task_status)

        with trio.fail_after(20):
            await nursery.start(run_a)
            await a.wait_holding()
            await nursery.start(run_beat, b, "b")
            # When A's firings have run three times
            await runs_reach(3)
            assert b.fired == 0
            assert not b.holding()
            # And A's node stops (it resigns the role on its way out)
            a_scope.cancel(reason="the holder stops")
            stopped = trio.current_time()
            # Then B holds the role well before A's lease could have run out
            await b.wait_holding()
            assert trio.current_time() - stopped < ttl
            await runs_reach(len(RUNS) + 3)
            nursery.cancel_scope.cancel(reason="test over")
    # And no due time ran twice, and none was skipped
    assert_each_due_time_ran_once(logs)
    assert a.fired + b.fired == len(logs.of_type("actorctl:beat:fired"))
    leaders = [m["fence"] for m in logs.of_type("actorctl:beat:leader")]
    assert len(leaders) == 2
    assert leaders[1] > leaders[0]


async def test_a_beat_whose_role_was_taken_while_it_was_cut_off_fires_nothing_more(
    etcd: EtcdServer, cluster: str, logs: Logs
) -> None:
    ttl = 3
    client = EtcdClient([etcd.url], timeout=1)
    async with (
        worker_node() as directory,
        open_proxy(etcd.client_port) as proxy,
        trio.open_nursery() as nursery,
    ):
        # Given a beat A holding the role, which reaches etcd through a link the
        # test can cut, and a beat B that reaches it directly
        cut_off = EtcdClient([proxy.url], timeout=1)
        a = etcd_beat(directory, cut_off, cluster, ttl)
        b = etcd_beat(directory, client, cluster, ttl)
        with trio.fail_after(30):
            await nursery.start(run_beat, a, "a")
            await a.wait_holding()
            await nursery.start(run_beat, b, "b")
            await runs_reach(2)
            # When A's link to etcd is cut (etcd and the worker stay up)
            proxy.cut()
            # Then B takes the role once A's lease ran out in etcd, and fires on
            await b.wait_holding()
            fired_by_a = a.fired
            await runs_reach(len(RUNS) + 3)
            # And A fired nothing after B took over, and no longer holds the role
            assert a.fired == fired_by_a
            assert not a.holding()
            nursery.cancel_scope.cancel(reason="test over")
    # And no due time ran twice, and none was skipped
    assert_each_due_time_ran_once(logs)


async def test_a_firing_its_beat_recorded_in_etcd_but_never_stored_is_fired_again(
    etcd: EtcdServer, cluster: str, logs: Logs, tmp_path: Path
) -> None:
    ttl = 2
    client = EtcdClient([etcd.url], timeout=2)
    port = free_port()
    holder = f"amqp://127.0.0.1:{port}/beat"  # the beat's address on its node
    async with worker_node() as directory, trio.open_nursery() as nursery:
        with trio.fail_after(20):
            # Given a beat that took the scheduler role and recorded a firing in
            # etcd, then died before its store committed it (its SQLite file has
            # no row of it: here, none at all), and whose lease then ended
            died = EtcdRoleLease(client, cluster, "scheduler")
            assert (await died.request(holder, ttl))["granted"]
            due = SECOND.next_after(time.time() - 2.0)  # passed already
            assert await died.record({"second": due, RECORDED_BY: holder})
            await died.resign()
            # When it starts again, on the same address and store
            beat = etcd_beat(directory, client, cluster, ttl)
            store = Store(tmp_path / "store.sqlite", name="a")

            async def run_again(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                async with open_node("a", {"beat": beat}, store=store, port=port, insecure=True):
                    task_status.started()
                    await trio.sleep_forever()

            await nursery.start(run_again)
            # Then that due time runs, under its own firing's id
            await runs_reach(1)
            while firing_id("second", due) not in RUNS:
                await runs_reach(len(RUNS) + 1)
            nursery.cancel_scope.cancel(reason="test over")
    again = logs.of_type("actorctl:beat:firing-again")
    assert [(m["schedule"], m["due"]) for m in again] == [("second", due)]
    assert RUNS.count(firing_id("second", due)) == 1


async def test_a_beat_takes_the_role_as_soon_as_etcd_ends_the_lost_holders_lease(
    etcd: EtcdServer, cluster: str, logs: Logs
) -> None:
    ttl = 30  # a candidate asks every 10 s: what it waits for is etcd, not its turn
    client = EtcdClient([etcd.url], timeout=2)
    async with (
        worker_node() as directory,
        open_proxy(etcd.client_port) as proxy,
        trio.open_nursery() as nursery,
    ):
        # Given a beat A holding the role, which reaches etcd through a link the
        # test can cut, and a beat B, refused the role (asking again in 10 s)
        a = etcd_beat(directory, EtcdClient([proxy.url], timeout=1), cluster, ttl)
        b = etcd_beat(directory, client, cluster, ttl)
        with trio.fail_after(20):
            await nursery.start(run_beat, a, "a")
            await a.wait_holding()
            await nursery.start(run_beat, b, "b")
            await logs.wait_for("actorctl:beat:standby")
            # When A's host is lost (its link to etcd cut) and etcd ends its
            # lease (revoked here, as etcd does once the ttl has run out)
            proxy.cut()
            held = await client.get(role_key(cluster, "scheduler"))
            assert held is not None
            await client.revoke(held.lease)
            ended = trio.current_time()
            # Then B holds the role within a second, not at its next turn
            await b.wait_holding()
            took = trio.current_time() - ended
            await runs_reach(len(RUNS) + 1)
            nursery.cancel_scope.cancel(reason="test over")
    print(f"B held the role {took:.2f} s after A's lease ended (its next turn: {ttl / 3:.0f} s)")
    assert took < 1.0
    assert b.fired >= 1
