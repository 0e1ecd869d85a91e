"""The testing kit: examples/testing_app.py tested only with ``actorctl.testing``.

The same assertions run twice (the ``shop`` fixture): on an in-process
cluster of real nodes (a services node, and two worker nodes, ``orders`` on
one and ``mail`` on the other, so that a chain crosses nodes), and in eager
mode, where ``delay()`` runs the task inline and nothing is sent. Then eager
mode's error cases, the kit under trio's autojump clock, with TLS, and its
pytest fixture.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import trio
import trio.testing
from examples import testing_app as shop_app
from examples.testing_app import (
    COUNTS,
    PaymentDown,
    add,
    app,
    charge,
    divide,
    later,
    notify_failure,
    price,
    receipt,
    record,
    total,
)

from actorctl import (
    ActorctlError,
    BadArguments,
    ConfigError,
    TaskFailed,
    WireFormatError,
    chord,
    group,
)
from actorctl.testing import TestCluster, open_cluster

WAIT = 20.0
LAYOUT = {"w1": ["orders"], "w2": ["mail"]}


@pytest.fixture(params=["cluster", "eager"])
async def shop(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[TestCluster | None]:
    """The app on an in-process cluster (yields it), or in eager mode (None)."""
    COUNTS.clear()
    if request.param == "eager":
        app.conf.task_always_eager = True
        try:
            yield None
        finally:
            app.conf.task_always_eager = False
        return
    async with open_cluster(app, workers=LAYOUT, directory=tmp_path) as cluster:
        yield cluster


async def idle(cluster: TestCluster | None) -> None:
    if cluster is not None:
        await cluster.wait_idle(timeout=WAIT)


# -- the same assertions, on a cluster and in eager mode ---------------------------------


async def test_a_task_gives_its_result_and_state(shop: TestCluster | None) -> None:
    result = await add.adelay(2, 3)
    assert await result.aget(timeout=WAIT) == 5
    assert result.state == "SUCCESS"
    # a tuple comes back a list: arguments and results go through JSON either way
    echoed = await price.adelay({"a": 1})
    assert await echoed.aget(timeout=WAIT) == 250


async def test_a_chain_runs_across_both_pools(shop: TestCluster | None) -> None:
    # Given a chain whose first step runs in `orders` (w1) and second in `mail` (w2)
    result = await (price.s({"tea": 2, "cake": 2}) | receipt.s("ada@example.com")).adelay()
    # Then its result is the last step's
    assert await result.aget(timeout=WAIT) == "ada@example.com: 10.00 EUR"
    assert result.task == receipt.name


async def test_wait_idle_after_a_burst_sees_every_task_counted(shop: TestCluster | None) -> None:
    # When 60 tasks are sent without waiting for any result
    for i in range(60):
        await record.adelay(f"burst-{i % 3}")
    # Then once idle every one has run, exactly once
    await idle(shop)
    assert COUNTS == {"burst-0": 20, "burst-1": 20, "burst-2": 20}
    if shop is not None:
        assert shop.busy() == []
        assert shop.router("orders").held == 0


async def test_a_failing_task_reports_its_error_and_state(shop: TestCluster | None) -> None:
    result = await divide.aapply_async((1, 0), link_error=notify_failure.s())
    with pytest.raises(ZeroDivisionError, match="division by zero") as raised:
        await result.aget(timeout=WAIT)
    assert isinstance(raised.value, TaskFailed)
    assert result.state == "FAILURE"
    assert isinstance(await result.aget(timeout=WAIT, propagate=False), TaskFailed)
    await idle(shop)
    assert COUNTS["failed:ZeroDivisionError"] == 1  # its errback ran


async def test_a_retried_task_succeeds_once_its_service_answers(shop: TestCluster | None) -> None:
    result = await charge.adelay(500, 2)
    assert await result.aget(timeout=WAIT) == "charged 500 after 2 retries"
    assert result.retries == 2
    # and past its policy's three retries it fails, saying so
    spent = await charge.adelay(500, 9)
    with pytest.raises(TaskFailed, match=r"PaymentDown: .*\(gave up after 3 retries\)"):
        await spent.aget(timeout=WAIT)


async def test_groups_and_chords_give_every_result(shop: TestCluster | None) -> None:
    results = await group(add.s(i, i) for i in range(5)).adelay()
    assert await results.aget(timeout=WAIT) == [0, 2, 4, 6, 8]
    # a chord's body gets the list of its header's results as its first argument
    summed = await chord([price.s({"a": 1}), price.s({"b": 2})], total.s()).aapply_async()
    assert await summed.aget(timeout=WAIT) == 750
    # one that does not fit fails the body with BadArguments, as any call
    wrong = await chord([price.s({"a": 1})], add.s(0)).aapply_async()
    with pytest.raises(TaskFailed, match=r"BadArguments: .*'x': expected int, got list"):
        await wrong.aget(timeout=WAIT)


async def test_arguments_that_do_not_fit_fail_with_bad_arguments(shop: TestCluster | None) -> None:
    result = await add.adelay(1)
    with pytest.raises(TaskFailed, match=r"BadArguments: .*missing a required argument: 'y'"):
        await result.aget(timeout=WAIT)
    assert result.state == "FAILURE"


# -- eager mode ---------------------------------------------------------------------------


@pytest.fixture
def eager() -> Iterator[None]:
    app.conf.task_always_eager = True
    try:
        yield None
    finally:
        app.conf.update(task_always_eager=False, task_eager_propagates=False)


def test_eager_mode_runs_a_task_from_plain_code_and_opens_no_connection(
    eager: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given no network at all
    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("eager mode opened a connection")

    monkeypatch.setattr(trio, "open_tcp_stream", no_network)
    # When tasks are sent from plain code, as a unit test of Celery code would
    assert add.delay(1, 2).get() == 3
    assert (price.s({"a": 4}) | receipt.s("x@example.com")).delay().get() == (
        "x@example.com: 10.00 EUR"
    )
    assert group(add.s(1, 1), add.s(2, 2)).delay().get() == [2, 4]
    assert later.delay(0.01).get() == 0.01  # an async task runs in a trio run of its own
    result = app.AsyncResult(add.delay(4, 4).id)
    assert (result.state, result.get()) == ("SUCCESS", 8)


def test_eager_mode_refuses_what_a_cluster_refuses(eager: None) -> None:
    with pytest.raises(ConfigError, match=r"unknown option\(s\) \['countdwn'\]"):
        add.apply_async((1, 2), countdwn=5)
    with pytest.raises(ConfigError, match="a task runs in its own pool"):
        add.apply_async((1, 2), queue="mail")
    with pytest.raises(WireFormatError, match="cannot be sent as JSON"):
        add.delay(object(), 1)


def test_eager_mode_propagates_a_tasks_own_error_when_asked(eager: None) -> None:
    # By default delay() returns the failed result; get() raises
    result = divide.delay(1, 0)
    assert result.failed()
    assert "ZeroDivisionError" in (result.traceback or "")
    with pytest.raises(ZeroDivisionError):
        result.get()
    # With task_eager_propagates, delay() raises the task's own exception (Celery's rule)
    app.conf.task_eager_propagates = True
    with pytest.raises(ZeroDivisionError) as raised:
        divide.delay(1, 0)
    assert not isinstance(raised.value, TaskFailed)
    with pytest.raises(BadArguments, match="missing a required argument"):
        add.delay(1)
    with pytest.raises(PaymentDown):
        charge.delay(1, 9)


def test_eager_retries_are_bounded_by_the_call_and_report_retry_first(eager: None) -> None:
    states: list[str] = []
    result = charge.apply_async((1, 5), max_retries=1)
    states.append(result.state)
    assert result.state == "FAILURE"
    assert result.retries == 1
    with pytest.raises(TaskFailed, match=r"gave up after 1 retries"):
        result.get()


def test_a_revoked_id_never_runs_in_eager_mode(eager: None) -> None:
    pending = app.AsyncResult("order-1")
    pending.revoke()
    result = add.apply_async((1, 2), task_id="order-1")
    assert result.state == "REVOKED"
    with pytest.raises(ActorctlError, match="revoked"):
        result.get()


async def test_eager_mode_from_trio_code_needs_the_awaitable_form(eager: None) -> None:
    with pytest.raises(ActorctlError, match="use the awaitable form"):
        add.delay(1, 2)
    assert await (await add.adelay(1, 2)).aget() == 3


def test_app_eager_is_the_setting() -> None:
    from actorctl import App

    assert App("x", eager=True).conf.task_always_eager is True
    with pytest.raises(ConfigError, match="give True or False"):
        App("y").conf.task_always_eager = "yes"


# -- the kit itself -----------------------------------------------------------------------


async def test_a_delayed_task_runs_at_once_under_the_autojump_clock(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    # Given the cluster under the autojump clock (its nodes' wall clock follows it)
    async with open_cluster(app, directory=tmp_path) as cluster:
        start = trio.current_time()
        # When a task is sent a minute ahead, and another sleeps two
        # (the nodes' periodic timers still fire: each simulated second costs ~1 ms)
        ahead = await add.aapply_async((1, 1), countdown=60)
        sleeper = await later.adelay(120)
        # Then both finish in an instant of real time, at the clock's times
        assert await ahead.aget(timeout=10_000) == 2
        assert await sleeper.aget(timeout=10_000) == 120
        assert trio.current_time() - start >= 120
        await cluster.wait_idle()
        assert cluster.scheduler.holding == 0


async def test_a_secure_cluster_runs_with_a_throwaway_ca_and_keys(tmp_path: Path) -> None:
    async with open_cluster(app, secure=True, directory=tmp_path) as cluster:
        assert cluster.services.url.startswith("amqps://")
        assert (tmp_path / "certs" / "ca.pem").is_file()
        assert await (await add.adelay(20, 22)).aget(timeout=WAIT) == 42
        await cluster.wait_idle(timeout=WAIT)


async def test_wait_idle_names_what_is_still_busy(tmp_path: Path) -> None:
    async with open_cluster(app, directory=tmp_path) as cluster:
        # Given a task that runs for an hour, started
        running = await later.aapply_async((3600,), track_started=True)
        assert await running.await_state("STARTED", timeout=WAIT) == "STARTED"
        # Then waiting for idle gives up, naming the worker, its router's backlog, the result
        busy = r"not idle within 0\.2 s: .*w1/orders: 1 unsettled"
        with pytest.raises(ActorctlError, match=busy):
            await cluster.wait_idle(timeout=0.2)
        cluster.nodes["w1"].stop(0)


@pytest.mark.actorctl_cluster("examples.testing_app:app", workers=LAYOUT)
async def test_the_pytest_fixture_runs_the_marked_app(actorctl_cluster: TestCluster) -> None:
    assert set(actorctl_cluster.nodes) == {"services", "w1", "w2"}
    assert [w.pool for w in actorctl_cluster.workers("mail")] == ["mail"]
    assert await (await receipt.adelay(250, "b@example.com")).aget(timeout=WAIT) == (
        "b@example.com: 2.50 EUR"
    )
    await actorctl_cluster.wait_idle(timeout=WAIT)
    assert shop_app.app is app
