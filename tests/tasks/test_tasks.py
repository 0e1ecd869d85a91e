"""Tasks, events and results against a real multi-process cluster.

One cluster (``tests/apps/tasks.toml``: a services node and two worker nodes, mutual
TLS and signed messages, development certificates) runs for the whole module;
each test connects its own client node to it.
"""

from __future__ import annotations

import datetime
import json
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from examples._cluster import running_cluster

from actorctl import (
    ActorctlError,
    ActorRef,
    Address,
    App,
    AskTimeout,
    AsyncResult,
    ConfigError,
    DataSink,
    TaskFailed,
    TaskResult,
    TaskRevoked,
    WireFormatError,
    chord,
    group,
    open_node,
)
from actorctl.cluster import NodeConfig, hosted_actors, load_cluster
from tests.apps.task_app import (
    RECORDS,
    WAKE,
    UserRegistered,
    abortable,
    add,
    always_down,
    app,
    boxed_spin,
    boxed_square,
    cleans_up_async,
    cleans_up_sync,
    collect,
    decode,
    div,
    echo,
    flaky,
    ignores_soft_limit,
    mul,
    overruns,
    record_error,
    sleepy,
    thread_overruns,
    when,
)
from tests.support.harness import Logs, free_port

APPS = Path(__file__).resolve().parents[1] / "apps"
WAIT = 20.0  # seconds any one result may take on a loaded 2-core machine


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the event's tasks record each run (tests/apps/task_app.py)."""
    return tmp_path_factory.mktemp("records")


@pytest.fixture(scope="module")
def cluster(records: Path) -> Iterator[Path]:
    env = {RECORDS: str(records)}
    with running_cluster(APPS / "tasks.toml", echo=False, env=env) as path:
        yield path


class Sink(DataSink):
    """A data sink that wakes the test once ``expected`` results arrived."""

    def __init__(self, expected: int) -> None:
        self.results: list[TaskResult] = []
        self.expected = expected
        self.arrived = trio.Event()

    async def on_result(self, result: TaskResult) -> None:
        self.results.append(result)
        if len(self.results) >= self.expected:
            self.arrived.set()


@asynccontextmanager
async def sink_node(cluster: Path, expected: int) -> AsyncIterator[tuple[Sink, str]]:
    """A node of the test's own hosting a data sink; yields it and its address."""
    sink = Sink(expected)
    security = load_cluster(cluster).security("cli")
    async with open_node("sink", {"totals": sink}, host="127.0.0.1", security=security) as node:
        yield sink, str(node.address_of("totals"))


# -- tasks and results -----------------------------------------------------------------


async def test_delay_returns_a_result_whose_get_returns_the_value(cluster: Path) -> None:
    async with app.aconnect(cluster):
        result = await add.adelay(1, 2)
        # (the send returns once the worker settled the task, which it does
        # with the result's commit: the result may be in by then)
        assert result.state in ("PENDING", "SUCCESS")
        assert await result.aget(timeout=WAIT) == 3
        assert (result.state, result.ready(), result.successful()) == ("SUCCESS", True, True)
        assert await (await mul.adelay(6, 7)).aget(timeout=WAIT) == 42  # an async task
        options = {"priority": 5, "time_limit": 30, "soft_time_limit": 20}
        assert await (await add.aapply_async((2, 3), **options)).aget(timeout=WAIT) == 5


def _celery_style(cluster: Path) -> list[Any]:
    with app.connect(cluster):
        first = add.delay(1, 2).get(timeout=WAIT)
        many = [add.delay(i, i) for i in range(200)]
        return [first, [r.get(timeout=WAIT) for r in many]]


async def test_plain_code_uses_it_as_celery_is_used(cluster: Path) -> None:
    first, many = await trio.to_thread.run_sync(_celery_style, cluster)
    assert first == 3
    assert many == [2 * i for i in range(200)]


async def test_a_failing_task_raises_its_error_type_and_message(cluster: Path) -> None:
    async with app.aconnect(cluster):
        result = await div.adelay(1, 0)
        with pytest.raises(ZeroDivisionError, match="division by zero") as raised:
            await result.aget(timeout=WAIT)
        assert isinstance(raised.value, TaskFailed)
        assert raised.value.type_name == "ZeroDivisionError"
        assert raised.value.task_id == result.id
        assert (result.state, result.failed()) == ("FAILURE", True)
        error = await result.aget(propagate=False)
        assert isinstance(error, ZeroDivisionError)


async def test_bad_calls_fail_with_clear_errors(cluster: Path) -> None:
    other = App("t")
    nope = other.task(name="t.nope")(lambda: None)
    async with app.aconnect(cluster):
        with pytest.raises(TaskFailed, match="add") as raised:
            await (await add.adelay(1)).aget(timeout=WAIT)  # one argument short
        assert raised.value.type_name == "BadArguments"
        # Any app's tasks go through the client of this context.
        with pytest.raises(TaskFailed, match=r"has no task 't\.nope'") as unknown:
            await (await nope.adelay()).aget(timeout=WAIT)
        assert unknown.value.type_name == "UnknownTask"
        with pytest.raises(ConfigError, match="bogus"):
            await add.aapply_async((1, 2), bogus=True)
        with pytest.raises(WireFormatError, match="JSON"):
            await add.adelay(object(), 1)
        result = await add.adelay(1, 1)
        with pytest.raises(ActorctlError, match=r"await result.aget\(\)"):
            result.get(timeout=1)
    with pytest.raises(ConfigError, match="not connected"):
        add.delay(1, 2)


async def test_results_also_go_to_data_sinks(cluster: Path) -> None:
    async with sink_node(cluster, expected=1) as (sink, address), app.aconnect(cluster):
        result = await add.aapply_async((2, 3), sinks=[address])
        assert await result.aget(timeout=WAIT) == 5
        with trio.fail_after(WAIT):
            await sink.arrived.wait()
    [seen] = sink.results
    assert (seen.task, seen.state, seen.value, seen.task_id) == ("t.add", "SUCCESS", 5, result.id)


async def test_retries_until_it_succeeds_or_gives_up(cluster: Path) -> None:
    async with app.aconnect(cluster):
        assert await (await flaky.adelay(2)).aget(timeout=WAIT) == "ok after 2 retries"
        down = await always_down.adelay()
        with pytest.raises(ConnectionError, match=r"service is down \(gave up after 2 retries\)"):
            await down.aget(timeout=WAIT)
        assert down.retries == 2


# -- the canvas --------------------------------------------------------------------------


async def test_a_chain_passes_each_result_on(cluster: Path) -> None:
    async with app.aconnect(cluster):
        steps = add.s(1, 1) | add.s(2) | mul.s(10) | sleepy.si(0) | echo.s("x")
        assert await (await steps.adelay()).aget(timeout=WAIT) == [["slept", "x"], {}]


async def test_an_error_stops_a_chain_reaches_the_caller_and_runs_link_error(
    cluster: Path,
) -> None:
    async with sink_node(cluster, expected=1) as (sink, address), app.aconnect(cluster):
        errback = record_error.s().set(sinks=[address])
        steps = add.s(1, 1) | div.s(0).on_error(errback) | add.s(100)
        result = await steps.adelay()
        with pytest.raises(ZeroDivisionError):
            await result.aget(timeout=WAIT)
        with trio.fail_after(WAIT):
            await sink.arrived.wait()
    [called] = sink.results
    assert (called.task, called.state) == ("t.record_error", "SUCCESS")
    assert str(called.value).endswith(":ZeroDivisionError")


async def test_link_runs_a_callback_with_the_result(cluster: Path) -> None:
    async with sink_node(cluster, expected=1) as (sink, address), app.aconnect(cluster):
        callback = mul.s(10).set(sinks=[address])
        assert await (await add.aapply_async((2, 2), link=callback)).aget(timeout=WAIT) == 4
        with trio.fail_after(WAIT):
            await sink.arrived.wait()
    assert [(r.task, r.value) for r in sink.results] == [("t.mul", 40)]


async def test_group_chord_map_starmap_and_chunks(cluster: Path) -> None:
    async with app.aconnect(cluster):
        results = await group(add.s(i, i) for i in range(10)).adelay()
        assert await results.aget(timeout=WAIT) == [2 * i for i in range(10)]
        assert results.ready()
        assert results.completed_count() == 10
        barrier = chord((add.s(i, i) for i in range(10)), collect.s())
        assert await (await barrier.aapply_async()).aget(timeout=WAIT) == 90
        assert await (await add.starmap([(1, 2), (3, 4)]).adelay()).aget(timeout=WAIT) == [3, 7]
        assert await (await echo.map([1, 2]).adelay()).aget(timeout=WAIT) == [
            [[1], {}],
            [[2], {}],
        ]
        chunks = await add.chunks(zip(range(10), range(10), strict=True), 4).adelay()
        assert await chunks.aget(timeout=WAIT) == [[0, 2, 4, 6], [8, 10, 12, 14], [16, 18]]


async def test_malformed_follow_ups_and_odd_errors_fail_the_task_not_the_worker(
    cluster: Path,
) -> None:
    async with app.aconnect(cluster):
        bad_callback = mul.s(2).set(countdown="soon")
        result = await add.aapply_async((1, 1), link=bad_callback)
        with pytest.raises(TaskFailed, match="soon") as raised:
            await result.aget(timeout=WAIT)
        assert raised.value.type_name == "ValueError"
        with pytest.raises(TaskFailed, match="can't decode byte 0xff") as odd:
            await (await decode.adelay([255])).aget(timeout=WAIT)
        assert odd.value.type_name == "UnicodeDecodeError"  # its own arguments: no subclass
        # a value JSON has no type for: the error says what to return instead
        with pytest.raises(TaskFailed, match=r"for a datetime, send its \.isoformat\(\) text"):
            await (await when.adelay(0.0)).aget(timeout=WAIT)
        assert await (await add.adelay(2, 2)).aget(timeout=WAIT) == 4  # the pool goes on
        assert await (await chord([], collect.s()).aapply_async()).aget(timeout=WAIT) == 0


async def test_a_failing_member_fails_the_chord(cluster: Path) -> None:
    async with app.aconnect(cluster):
        barrier = chord([add.s(1, 1), div.s(1, 0)], collect.s())
        with pytest.raises(TaskFailed, match="ZeroDivisionError") as raised:
            await (await barrier.aapply_async()).aget(timeout=WAIT)
        assert raised.value.type_name == "ChordError"


# -- time limits and cancellation -----------------------------------------------------------


async def test_the_soft_time_limit_is_an_exception_the_task_can_catch(cluster: Path) -> None:
    async with app.aconnect(cluster):
        assert await (await cleans_up_async.adelay()).aget(timeout=WAIT) == (
            "cleaned up after the soft limit"
        )
        assert await (await cleans_up_sync.adelay()).aget(timeout=WAIT) == (
            "sync cleaned up after the soft limit"
        )
        with pytest.raises(TaskFailed, match=r"soft time limit \(0.2 s\)") as raised:
            await (await ignores_soft_limit.adelay()).aget(timeout=WAIT)
        assert raised.value.type_name == "SoftTimeLimitExceeded"


async def test_the_hard_time_limit_stops_an_async_task_and_a_boxed_one(cluster: Path) -> None:
    async with app.aconnect(cluster):
        for task in (overruns, boxed_spin):
            with pytest.raises(TaskFailed, match="hard time limit") as raised:
                await (await task.adelay()).aget(timeout=WAIT)
            assert raised.value.type_name == "TimeLimitExceeded"
        assert await (await boxed_square.adelay(7)).aget(timeout=WAIT) == 49
        with pytest.raises(TaskFailed, match="its thread runs on") as abandoned:
            await (await thread_overruns.adelay()).aget(timeout=WAIT)
        assert abandoned.value.type_name == "TimeLimitExceeded"


async def test_a_revoked_task_never_runs_and_running_ones_see_is_aborted(cluster: Path) -> None:
    async with app.aconnect(cluster):
        # Fill every slot of the slow pool (2 nodes x concurrency 2) with tasks
        # that run until they are aborted, so the next one must queue.
        blockers = [await abortable.aapply_async((100_000,), track_started=True) for _ in range(4)]
        for blocker in blockers:
            assert await blocker.await_state("STARTED", timeout=WAIT) == "STARTED"
        queued = await sleepy.adelay(0)
        await app.control.arevoke(queued.id)
        await app.control.arevoke([b.id for b in blockers])
        with pytest.raises(TaskRevoked, match="revoked"):
            await queued.aget(timeout=WAIT)
        assert queued.state == "REVOKED"
        for blocker in blockers:
            assert str(await blocker.aget(timeout=WAIT)).startswith("aborted at step")


async def test_revoke_with_terminate_cancels_a_running_async_task(cluster: Path) -> None:
    async with app.aconnect(cluster):
        running = await sleepy.aapply_async((60,), track_started=True)
        await running.await_state("STARTED", timeout=WAIT)
        await running.arevoke(terminate=True)
        with pytest.raises(TaskRevoked, match="terminated"):
            await running.aget(timeout=WAIT)


# -- ETA and expiry ------------------------------------------------------------------------


async def test_a_delayed_task_waits_in_the_scheduler_then_runs(cluster: Path) -> None:
    config = load_cluster(cluster)
    scheduler = f"{config.url(config.node('services'))}/scheduler"
    async with app.aconnect(cluster) as client:
        later = await add.aapply_async((1, 2), countdown=60)
        soon = await add.aapply_async((2, 2), countdown=0.3)
        ref = ActorRef(Address.parse(scheduler), client.outbox)
        assert await ref.ask("pending") >= 1  # held there, not in a worker
        assert await soon.aget(timeout=WAIT) == 4
        await app.control.arevoke(later.id)
        with pytest.raises(TaskRevoked, match="revoked while it waited in the scheduler"):
            await later.aget(timeout=WAIT)
        eta = datetime.datetime.now() + datetime.timedelta(seconds=0.2)
        assert await (await add.aapply_async((5, 5), eta=eta)).aget(timeout=WAIT) == 10


async def test_an_expired_task_is_never_executed_and_says_why(cluster: Path) -> None:
    async with app.aconnect(cluster):
        past = datetime.datetime.now() - datetime.timedelta(seconds=1)
        stale = await add.aapply_async((1, 2), expires=past)
        with pytest.raises(TaskRevoked, match="expired") as raised:
            await stale.aget(timeout=WAIT)
        assert "before it could run" in raised.value.reason
        due_late = await add.aapply_async((1, 2), countdown=0.3, expires=0.1)
        with pytest.raises(TaskRevoked, match=r"expired .* before it was due"):
            await due_late.aget(timeout=WAIT)


# -- events --------------------------------------------------------------------------------


async def test_an_event_reaches_every_subscribing_pool_once(cluster: Path) -> None:
    async with sink_node(cluster, expected=20) as (sink, address), app.aconnect(cluster):
        for user in range(10):
            event = UserRegistered(user_id=user, email=f"user{user}@example.com")
            await app.apublish(event, sinks=[address])
        with trio.fail_after(WAIT):
            await sink.arrived.wait()
    by_task: dict[str, list[object]] = {}
    for result in sink.results:
        by_task.setdefault(result.task, []).append(result.value)
    assert sorted(by_task["t.send_welcome_email"]) == sorted(
        f"welcome user{u}@example.com" for u in range(10)
    )
    assert sorted(by_task["t.add_to_crm"]) == sorted(f"crm {u}" for u in range(10))


def _publish_as_in_the_design_draft(cluster: Path, user_id: int, email: str) -> None:
    with app.connect(cluster):
        UserRegistered.delay(user_id=user_id, email=email)  # type: ignore[attr-defined]


def _runs_for(records: Path, user_id: int) -> dict[str, list[dict[str, Any]]]:
    """The runs the event's tasks recorded for the user ``user_id``, by task."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for path in records.glob("*.json"):
        record = json.loads(path.read_text(encoding="utf-8"))
        if record["user_id"] == user_id:
            runs.setdefault(record["task"], []).append(record)
    return runs


async def test_event_delay_publishes_from_plain_code(cluster: Path, records: Path) -> None:
    subscribers = ["t.add_to_crm", "t.send_welcome_email"]
    user_id, email = 1001, "ada@example.com"  # no other test's event has this user
    with trio.socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as wake:
        await wake.bind(str(records / WAKE))
        try:
            # When plain code publishes the event as the design draft does
            await trio.to_thread.run_sync(_publish_as_in_the_design_draft, cluster, user_id, email)
            # Then every subscribing task runs: wait for their records (each
            # record written wakes this test)
            with trio.fail_after(WAIT):
                while sorted(_runs_for(records, user_id)) != subscribers:
                    await wake.recv(16)
        finally:
            (records / WAKE).unlink()
    runs = _runs_for(records, user_id)
    # with the event's fields
    for task in subscribers:
        assert {(r["user_id"], r["email"]) for r in runs[task]} == {(user_id, email)}, task
    # and each once: the event hub sends each subscriber one task (at least once
    # is the guarantee: a run twice would be a redelivery, and is reported here)
    twice = {task: len(r) for task, r in runs.items() if len(r) > 1}
    assert len(twice) == 0, f"{len(twice)} subscribing tasks ran more than once: {twice}"
    with pytest.raises(ConfigError, match="not an event"):
        app.subscribe(int, add)


# -- configuration ---------------------------------------------------------------------------


def test_cluster_files_with_task_pools_are_checked(tmp_path: Path) -> None:
    # Given a node that hosts the task app with wrong task settings
    node = '[[node]]\nname = "n"\nlisten = "127.0.0.1:5999"\nactors = "tests.apps.task_app:app"\n'
    cases = {
        'pools = "celery"': "pools",
        'pools = ["no such"]': "no pool named 'no such'",
        'pools = ["events"]': "pool names other than",
        'services = true\npools = ["celery"]': "services = true and pools",
    }
    for extra, message in cases.items():
        path = tmp_path / "cluster.toml"
        path.write_text(f"{node}{extra}\n")
        config = load_cluster(path)  # the cluster layer does not read task settings
        # When the node's actors are made, then the app says what is wrong
        with pytest.raises(ConfigError, match=message):
            hosted_actors(config.nodes[0].actors, node=config.nodes[0], cluster=config)
    # A node run without its cluster file cannot host the app
    bare = NodeConfig("n", "127.0.0.1", 5999, "tests.apps.task_app:app")
    with pytest.raises(ConfigError, match=r"needs its cluster\.toml"):
        hosted_actors(bare.actors, node=bare)


def test_an_event_class_whose_attributes_clash_is_refused() -> None:
    other = App("x")

    @attrs.define
    class Scheduled:
        delay: float

    with pytest.raises(ConfigError, match=r"attributes \['delay'\]"):
        other.event(Scheduled)


def test_a_task_called_directly_runs_here() -> None:
    assert add(2, 3) == 5
    assert add.s(2)(3) == 5
    assert repr(add.s(1) | mul.si(2)) == "t.add.s(1) | t.mul.si(2)"
    assert abortable.name == "t.abortable"
    with pytest.raises(AskTimeout, match="not ready within") as raised:
        AsyncResult("x", "t.add").get(timeout=0.01)
    assert isinstance(raised.value, TimeoutError)  # as Celery's get(timeout=) raises


# -- connecting ----------------------------------------------------------------------------


async def test_connect_returns_within_one_bound_when_nodes_of_the_cluster_are_down(
    tmp_path: Path, logs: Logs
) -> None:
    # Given a cluster of three nodes: one running here, two not running at all
    # (their ports are free: nothing listens there)
    live, down, down_too = free_port(), free_port(), free_port()
    path = tmp_path / "cluster.toml"
    path.write_text(
        "[cluster]\ninsecure = true\n"
        f'[[node]]\nname = "live"\nlisten = "127.0.0.1:{live}"\n'
        'actors = "tests.apps.task_app:app"\npools = ["celery"]\n'
        f'[[node]]\nname = "down"\nlisten = "127.0.0.1:{down}"\n'
        'actors = "tests.apps.task_app:app"\npools = ["slow"]\n'
        f'[[node]]\nname = "down-too"\nlisten = "127.0.0.1:{down_too}"\n'
        '[[router]]\nname = "elsewhere"\nnode = "down-too"\ninstances = ["live/celery"]\n'
    )
    config = load_cluster(path)
    node = config.node("live")
    actors = hosted_actors(node.actors, node=node, cluster=config)
    reach = 4.0
    async with open_node("live", actors, port=live, insecure=True):
        # When a caller connects, then it is connected within the one bound for
        # all nodes (one per node would be twice that), and work on the live
        # node succeeds
        with trio.fail_after(reach + 3.0):
            async with app.aconnect(path, reach_timeout=reach):
                assert await (await add.adelay(2, 3)).aget(timeout=3.0) == 5
    # And the caller's log says which nodes it did not reach
    [unreached] = logs.of_type("actorctl:client:unreached")
    assert sorted(unreached["nodes"]) == sorted(
        f"amqp://127.0.0.1:{port}/_node" for port in (down, down_too)
    )
