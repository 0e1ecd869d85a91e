"""Rate limits, concurrency limits and tokens, suspend and resume, priorities
and elastic budgets.

The gate and the budget are tested alone under trio's autojump clock; the rest
on a cluster in this process (a services node with the pools' routers, and one
or two worker nodes, on real sockets), running tests/apps/limits_app.py. Every run
is recorded by the task itself with its start time: the counts and windows
below are read from those records.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from actorctl import ConfigError, RemoteError, open_node
from actorctl.tasks import RateLimit, rate_limit_of
from actorctl.tasks.limits._budget import Budget, Concurrency, concurrency_of
from actorctl.tasks.limits._gate import Gate, GateClosed
from actorctl.testing import TestCluster, open_cluster
from tests.apps import limits_app
from tests.apps.limits_app import app

WAIT = 20.0


# -- the parts alone --------------------------------------------------------------------


def test_rate_limits_take_celerys_syntax_and_refuse_anything_else_by_name() -> None:
    assert rate_limit_of("10/s", what="x") == RateLimit(10, 1.0)
    assert rate_limit_of("100/m", what="x") == RateLimit(100, 60.0)
    assert rate_limit_of("5/h", what="x") == RateLimit(5, 3600.0)
    assert rate_limit_of(3, what="x") == RateLimit(3, 1.0)
    assert rate_limit_of(None, what="x") is None
    assert rate_limit_of("0", what="x") is None
    assert rate_limit_of("0/m", what="x") is None
    assert str(rate_limit_of("100/m", what="x")) == "100/m"
    for bad in ("10/x", "ten/s", "-1/s", "/s", True):
        with pytest.raises(ConfigError, match=r'give one like "10/s"|"10/s", "100/m", "5/h"'):
            rate_limit_of(bad, what="task t: rate_limit")
    with pytest.raises(ConfigError, match=r"task limits\.job: rate_limit: '10/x'"):

        @app.task(name="limits.job", rate_limit="10/x")
        def job() -> None: ...


def test_budgets_and_token_options_are_checked_where_they_are_written() -> None:
    assert concurrency_of(4, what="p") == Concurrency(4, 4)
    assert concurrency_of((2, 16), what="p") == Concurrency(2, 16)
    for bad in (0, (4, 2), "many", (1, "x")):
        with pytest.raises(ConfigError, match="pool 'p': concurrency="):
            concurrency_of(bad, what="pool 'p'")
    with pytest.raises(ConfigError, match="need both concurrency_key="):

        @app.task(name="limits.half", concurrency_per_key=2)
        def half() -> None: ...


async def test_the_gate_runs_the_highest_priority_first_and_passes_over_held_tasks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Given a gate of one slot, held by a first task, and a task type suspended
    gate = Gate(1)
    first = await gate.enter("a")
    gate.suspend("held", True)
    order: list[str] = []

    async def run(task: str, priority: int, label: str) -> None:
        ticket = await gate.enter(task, priority)
        order.append(label)
        await trio.sleep(1)
        gate.leave(ticket)

    async with trio.open_nursery() as nursery:
        # When low, suspended and high priorities queue up in that order
        for i in range(3):
            nursery.start_soon(run, "a", 0, f"low{i}")
            await trio.sleep(0.01)
        nursery.start_soon(run, "held", 9, "held")
        await trio.sleep(0.01)
        for i in range(3):
            nursery.start_soon(run, "a", 9, f"high{i}")
            await trio.sleep(0.01)
        assert gate.waiting == 7
        gate.leave(first)
        # Then the high ones run first (in the order they came), the suspended
        # one holds up nobody, and it runs once resumed
        await trio.sleep(10)
        assert order == ["high0", "high1", "high2", "low0", "low1", "low2"]
        gate.suspend("held", False)
    assert order[-1] == "held"


async def test_the_gate_paces_a_rate_limited_task_without_holding_up_others(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = Gate(100)
    gate.set_rate("paced", RateLimit(4, 1.0))
    starts: dict[str, list[float]] = {"paced": [], "free": []}

    async def run(task: str) -> None:
        ticket = await gate.enter(task)
        starts[task].append(trio.current_time())
        gate.leave(ticket)

    t0 = trio.current_time()
    async with trio.open_nursery() as nursery:
        for _ in range(12):
            nursery.start_soon(run, "paced")
        for _ in range(5):
            nursery.start_soon(run, "free")
    assert [round(t - t0, 6) for t in starts["free"]] == [0.0] * 5
    gaps = [b - a for a, b in zip(starts["paced"], starts["paced"][1:], strict=False)]
    assert len(starts["paced"]) == 12
    assert all(math.isclose(gap, 0.25) for gap in gaps), gaps


async def test_concurrency_tokens_hold_each_key_to_its_count_and_leave_others_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = Gate(10)
    gate.limits("t").per_key = 2
    running: dict[str, int] = {}
    most: dict[str, int] = {}

    async def run(key: str) -> None:
        ticket = await gate.enter("t", key=key)
        running[key] = running.get(key, 0) + 1
        most[key] = max(most.get(key, 0), running[key])
        await trio.sleep(1)
        running[key] -= 1
        gate.leave(ticket)

    async with trio.open_nursery() as nursery:
        for key in "aaaaaabc":
            nursery.start_soon(run, key)
    assert most == {"a": 2, "b": 1, "c": 1}
    assert trio.current_time() == pytest.approx(3.0)  # a's six runs, two at a time


async def test_an_elastic_budget_doubles_under_load_and_halves_once_idle(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = Gate(1)
    threads = trio.CapacityLimiter(1)
    budget = Budget(Concurrency(1, 8, cooldown=5.0), gate, threads, "p")
    gate.on_blocked = budget.blocked
    seen: list[tuple[float, int]] = []
    release = trio.Event()

    async def run() -> None:
        ticket = await gate.enter("t")
        seen.append((trio.current_time(), int(gate.capacity)))
        await release.wait()
        gate.leave(ticket)
        budget.ran()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(budget.run)
        for _ in range(20):
            nursery.start_soon(run)
        await trio.sleep(30)
        # 1 slot, then 2 at once (no change before), 4 after 5 s, 8 after 10 s: the max
        assert gate.capacity == 8
        assert threads.total_tokens == 8
        assert [c for _, c in seen][-1] == 8
        assert sorted({round(t) for t, _ in seen}) == [0, 5, 10]
        release.set()
        await trio.sleep(6)
        # Then a run that ends after a quiet cooldown halves it, and again
        for halved in (4, 2):
            ticket = await gate.enter("t")
            gate.leave(ticket)
            budget.ran()
            assert gate.capacity == halved
            await trio.sleep(6)
        nursery.cancel_scope.cancel()


async def test_a_budget_follows_its_current_function_within_its_bounds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    free = [3]
    gate = Gate(1)
    budget = Budget(
        Concurrency(1, 5, current=lambda: free[0], cooldown=2.0),
        gate,
        trio.CapacityLimiter(1),
        "db",
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(budget.run)
        await trio.sleep(0.5)
        assert gate.capacity == 3
        free[0] = 50
        await trio.sleep(2)
        assert gate.capacity == 5  # the max
        free[0] = 0
        await trio.sleep(2)
        assert gate.capacity == 1  # the min
        nursery.cancel_scope.cancel()


# -- on a cluster in this process --------------------------------------------------------


@asynccontextmanager
async def cluster(tmp_path: Path, workers: int = 1) -> AsyncIterator[TestCluster]:
    """A services node and ``workers`` worker nodes in this process (the
    testing kit's), and the app connected to them."""
    layout = {
        f"w{n}": ["limited", "ordered"] if n == 1 else ["limited"] for n in range(1, workers + 1)
    }
    limits_app.RUNS.clear()
    async with open_cluster(app, workers=layout, directory=tmp_path) as running:
        yield running


async def until(check: Callable[[], bool]) -> None:
    """Wait until ``check()`` holds: checked again each time a task records a
    start or an end."""
    with trio.fail_after(WAIT):
        while not check():
            event = trio.Event()
            limits_app.RAN.append(event)
            try:
                await event.wait()
            finally:
                limits_app.RAN.remove(event)


def runs(task: str) -> list[dict[str, Any]]:
    """The runs of ``task`` recorded so far, oldest first."""
    return sorted((r for r in limits_app.RUNS if r["task"] == task), key=lambda r: r["start"])


async def runs_of(task: str, count: int) -> list[dict[str, Any]]:
    """Wait until ``count`` runs of ``task`` are recorded; they, oldest first."""
    await until(lambda: len(runs(task)) >= count)
    return runs(task)


def most_in_any_window(starts: list[float], window: float) -> int:
    """The most starts in any half-open window [t, t + window) of the run."""
    starts = sorted(starts)
    most, left = 0, 0
    for right, t in enumerate(starts):
        while t - starts[left] >= window:
            left += 1
        most = max(most, right - left + 1)
    return most


def lost_and_doubled(runs: list[dict[str, Any]], sent: list[str]) -> tuple[int, int]:
    labels = [r["label"] for r in runs]
    return len(set(sent) - set(labels)), len(labels) - len(set(labels))


def paced_at(starts: list[float], rate: float) -> bool:
    """Whether starts came at ``rate``: their median gap is within 15 % of its
    interval. (The median, not the mean: a start is never early, and on a busy
    machine a late one delays every later one, so the mean rate reads lower
    than the limit the pacer kept; a pacer that holds starts back too long
    moves the median.)"""
    gaps = sorted(b - a for a, b in itertools.pairwise(starts))
    return gaps[len(gaps) // 2] <= 1.15 / rate


async def test_a_per_worker_rate_limit_is_never_exceeded_and_is_reached(tmp_path: Path) -> None:
    # Given one worker and a task limited to 20/s on each worker
    async with cluster(tmp_path) as c:
        sent = [f"p{i}" for i in range(50)]
        # When 50 are sent at once
        for label in sent:
            await limits_app.per_worker.adelay(label)
        # Then they wait in the pool's router (kept in its store), not at the worker
        assert c.router("limited").held > 0
        ran = await runs_of("per_worker", len(sent))
    starts = [r["start"] for r in ran]
    # Then no second holds more than 20 starts, and the run goes at the limit
    assert most_in_any_window(starts, 1.0) <= 20
    assert paced_at(starts, 20.0)
    assert lost_and_doubled(ran, sent) == (0, 0)
    assert c.router("limited").held == 0


async def test_a_global_rate_limit_holds_across_the_workers_of_a_pool(tmp_path: Path) -> None:
    # Given two workers and a task limited to 20/s across its pool
    async with cluster(tmp_path, workers=2) as c:
        sent = [f"g{i}" for i in range(50)]
        for label in sent:
            await limits_app.pool_wide.adelay(label)
        ran = await runs_of("pool_wide", len(sent))
        started = [c.worker(name, "limited").gate.started for name in ("w1", "w2")]
    starts = [r["start"] for r in ran]
    # Then the pool as a whole stays within 20 in any second, and goes at the limit
    assert most_in_any_window(starts, 1.0) <= 20
    assert paced_at(starts, 20.0)
    assert lost_and_doubled(ran, sent) == (0, 0)
    assert all(started)  # both workers ran some
    assert sum(started) == len(sent)


async def test_concurrency_tokens_bound_each_customer_and_leave_the_others_alone(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path):
        sent = [(customer, f"{customer}{i}") for customer in "abc" for i in range(8)]
        for customer, label in sent:
            await limits_app.per_customer.adelay(customer, label)
        ended = await runs_of("per_customer", len(sent))
        await until(lambda: all("end" in r for r in runs("per_customer")))
    # At no moment do more than 2 runs of one customer overlap; every
    # customer got its 2 at once (the others did not hold it back)
    for customer in "abc":
        mine = [(r["start"], r["end"]) for r in ended if r["key"] == customer]
        most = max(sum(1 for s, e in mine if s <= t < e) for t, _ in mine)
        assert most == 2, (customer, most)
    assert lost_and_doubled(ended, [label for _, label in sent]) == (0, 0)


async def test_suspend_holds_a_task_in_its_router_and_resume_drains_it(tmp_path: Path) -> None:
    async with (
        cluster(tmp_path) as c,
        open_node("operator", host=None, insecure=True) as operator,
    ):
        router = c.router("limited")
        tasks = operator.ref(str(c.nodes["services"].address_of("_tasks")))
        # Given the task suspended on the services node (its router)
        report = await tasks.ask("limit", "limits.pausable", "suspended", True)
        assert report["overrides"]["limits.pausable"] == {"suspended": True}
        # When ten are sent: each send returns (the router keeps them)
        sent = [f"s{i}" for i in range(10)]
        for label in sent:
            await limits_app.pausable.adelay(label)
        assert router.held == 10
        assert not [r for r in limits_app.RUNS if r["task"] == "pausable"]
        # And a task of the same pool that is not suspended runs meanwhile
        assert await (await limits_app.per_worker.adelay("other")).aget(timeout=WAIT) == "other"
        # Then resume drains them, each once
        await tasks.ask("limit", "limits.pausable", "suspended", False)
        drained = await runs_of("pausable", len(sent))
        assert lost_and_doubled(drained, sent) == (0, 0)
        assert router.held == 0
        # A misspelled task, or a rate that is not one, is refused by name
        with pytest.raises(RemoteError, match=r"did you mean 'limits\.pausable'"):
            await tasks.ask("limit", "limits.pausabel", "suspended", True)
        with pytest.raises(RemoteError, match="is not a rate limit"):
            await tasks.ask("limit", "limits.pausable", "rate_limit", "10/x")


async def test_a_task_declared_with_concurrency_zero_waits_until_resumed(tmp_path: Path) -> None:
    async with (
        cluster(tmp_path) as c,
        open_node("operator", host=None, insecure=True) as operator,
    ):
        sent = [f"d{i}" for i in range(5)]
        for label in sent:
            await limits_app.dormant.adelay(label)
        assert c.router("limited").held == 5
        assert runs("dormant") == []
        for node in ("services", "w1"):
            tasks = operator.ref(str(c.nodes[node].address_of("_tasks")))
            await tasks.ask("limit", "limits.dormant", "suspended", False)
        assert lost_and_doubled(await runs_of("dormant", 5), sent) == (0, 0)


async def test_priority_nine_tasks_finish_before_priority_zero_tasks_sent_earlier(
    tmp_path: Path,
) -> None:
    async with (
        cluster(tmp_path) as c,
        open_node("operator", host=None, insecure=True) as operator,
    ):
        tasks = operator.ref(str(c.nodes["services"].address_of("_tasks")))
        # Given a backlog: the task held back while 10 of priority 0, then 10
        # of priority 9 are sent (a pool that runs one at a time)
        await tasks.ask("limit", "limits.ordered", "suspended", True)
        for i in range(10):
            await limits_app.ordered.aapply_async((f"low{i}",), priority=0)
        for i in range(10):
            await limits_app.ordered.aapply_async((f"high{i}",), priority=9)
        assert c.router("ordered").held == 20
        # When it is let go
        await tasks.ask("limit", "limits.ordered", "suspended", False)
        ran = await runs_of("ordered", 20)
    # Then every priority-9 task ran before any priority-0 one, each in the
    # order it was sent among its equals
    labels = [r["label"] for r in ran]
    assert labels == [f"high{i}" for i in range(10)] + [f"low{i}" for i in range(10)]


async def test_a_closed_gate_lets_nothing_more_in_and_tells_each_waiting_task() -> None:
    # Given a gate of one slot, held, with two tasks waiting for it
    gate = Gate(1)
    held = await gate.enter("t")
    refused: list[str] = []

    async def wait(name: str) -> None:
        try:
            await gate.enter(name)
        except GateClosed:
            refused.append(name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait, "a")
        nursery.start_soon(wait, "b")
        await gate.wait_waiting(2)
        # When it is closed (its node stops), then both are told, and nothing
        # that comes later gets in, even once the slot is free
        gate.close()
    assert sorted(refused) == ["a", "b"]
    assert gate.waiting == 0
    gate.leave(held)
    with pytest.raises(GateClosed):
        await gate.enter("c")
    assert gate.running == 0
