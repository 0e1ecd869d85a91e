"""Circuit breakers: the state machine, the behaviour an actor switches into,
and a task pool of two workers (two nodes behind a router, real sockets,
mutual TLS and signed messages) whose breakers open and close.

Every task records each run; each test counts what was lost (0) and reports
what ran twice.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import eliot
import pytest
import trio
import trio.lowlevel

from actorctl import (
    Actor,
    ActorctlError,
    Address,
    Modified,
    PeerUnavailable,
    Role,
    handler,
    open_node,
)
from actorctl.cluster import Router
from actorctl.supervision import Breaker, BreakerPolicy, CircuitBreaker, Health
from tests.apps import breaker_app
from tests.support.harness import Logs, Secrets, free_port, node_pair
from tests.support.in_process import in_process

WAIT = 30.0


# -- the state machine -----------------------------------------------------------------------


async def test_failures_trip_it_and_half_open_admits_one_probe(
    autojump_clock: trio.abc.Clock, logs: Logs
) -> None:
    # Given a breaker that trips after 3 failures within 10 s, open for 30 s
    breaker = Breaker("db", BreakerPolicy(failures=3, window=10.0, reset=30.0))
    # When two failures are spread wider than the window, then it stays closed
    breaker.failed("refused")
    await trio.sleep(11)
    breaker.failed("refused")
    assert breaker.closed
    assert breaker.admit() is None
    # When a third and a fourth come within it, then it is open and refuses at once
    breaker.failed("refused")
    breaker.failed("refused")
    assert breaker.state == "open"
    why = breaker.admit()
    assert why is not None
    assert "circuit breaker 'db' is open" in why
    assert "in 30.0 s" in why
    [tripped] = logs.of_type("actorctl:breaker:tripped")
    assert tripped["level"] == "warning"
    assert tripped["breaker"] == "db"
    # When the reset period passes, then exactly one probe is let through
    await trio.sleep(30)
    assert breaker.admit() is None
    assert breaker.state == "half-open"
    assert [breaker.admit() is None for _ in range(5)] == [False] * 5
    # And a failed probe opens it again; a successful one closes it
    breaker.failed("still refused")
    assert breaker.state == "open"
    await trio.sleep(30)
    assert breaker.admit() is None
    breaker.succeeded()
    assert breaker.closed
    assert breaker.statistics()["trips"] == 2


async def test_trips_grow_the_open_period_and_repeated_trips_log_errors(
    autojump_clock: trio.abc.Clock, logs: Logs
) -> None:
    policy = BreakerPolicy(failures=1, reset=1.0, growth="exponential", reset_max=3.0)
    breaker = Breaker("api", policy)
    periods = []
    for _ in range(4):  # each probe fails: 1, 2, 4 → 3 (the cap), ...
        breaker.failed("boom")
        periods.append(breaker.reset_at - trio.current_time())
        await trio.sleep(periods[-1])
        assert breaker.admit() is None
    assert periods == [1.0, 2.0, 3.0, 3.0]
    levels = [m["level"] for m in logs.of_type("actorctl:breaker:tripped")]
    assert levels == ["warning", "warning", "error", "error"]  # 3 trips within 5 minutes
    # After 30 quiet minutes a trip is a warning again
    breaker.succeeded()
    await trio.sleep(1801)
    breaker.failed("boom")
    assert logs.of_type("actorctl:breaker:tripped")[-1]["level"] == "warning"
    assert BreakerPolicy(growth="linear", reset=2.0).open_for(3) == 6.0
    assert BreakerPolicy().open_for(5) == 30.0  # the draft's default: no growth


async def test_guard_records_from_a_worker_thread_too(autojump_clock: trio.abc.Clock) -> None:
    # Given a breaker guarding code that runs in a worker thread (a plain handler)
    breaker = Breaker("files", BreakerPolicy(failures=2))

    def write() -> None:
        with breaker.guard():
            raise OSError("disk full")

    # When it fails twice there, then the breaker (trio's) is open
    for _ in range(2):
        with pytest.raises(OSError, match="disk full"):
            await trio.to_thread.run_sync(write)
    assert breaker.state == "open"


def test_a_wrong_policy_is_refused_with_what_to_do() -> None:
    with pytest.raises(ValueError, match=r"'failures': expected a whole number >= 1, got 0"):
        BreakerPolicy(failures=0)
    with pytest.raises(ValueError, match=r"'growth': expected 'none', 'linear' or"):
        BreakerPolicy(growth="quadratic")  # type: ignore[arg-type]
    with pytest.raises(Exception, match=r"breaker 'x'.*its options are: failures"):
        breaker_app.app.breaker("x", failurs=3)


async def test_health_reports_drive_a_breaker(autojump_clock: trio.abc.Clock) -> None:
    breaker = Breaker("store", BreakerPolicy(unhealthy=2, degraded=3, window=10.0, reset=5.0))
    # Degraded twice, Insecure, Unhealthy once: below every threshold
    for health in (Health.DEGRADED, Health.DEGRADED, Health.INSECURE, Health.UNHEALTHY):
        breaker.report("disk", health)
    assert breaker.closed
    # A second Unhealthy within the window trips it
    breaker.report("disk", Health.UNHEALTHY, "not writable")
    assert not breaker.closed
    assert "health check 'disk' reports unhealthy" in breaker.reason
    # Permanently Unavailable holds it open past its reset, until a Healthy report
    await trio.sleep(6)
    assert breaker.admit() is None
    assert breaker.state == "half-open"
    breaker.report("disk", Health.PERMANENTLY_UNAVAILABLE)
    await trio.sleep(60)
    assert breaker.admit() is not None
    breaker.report("disk", Health.HEALTHY)
    assert breaker.admit() is None  # the probe
    breaker.succeeded()
    assert breaker.closed
    assert breaker.statistics()["health"] == {"disk": "healthy"}


# -- an actor's behaviour ---------------------------------------------------------------------


class Payments(Actor):
    """Charges through a downstream that the test turns off and on."""

    def __init__(self, reset: float = 0.5) -> None:
        self.breaker = Breaker("payments", BreakerPolicy(failures=3, reset=reset))
        self.down = True
        self.runs: list[int] = []

    async def on_start(self) -> None:
        CircuitBreaker.attach(self, self.breaker)

    @handler
    async def charge(self, n: int) -> int:
        self.runs.append(n)
        with self.breaker.guard():
            if self.down:
                raise ConnectionError("payments service refused the connection")
            return n


async def test_an_actor_switches_into_its_breaker_and_back(secrets: Secrets) -> None:
    payments = Payments()
    async with node_pair({"payments": payments}, secrets=secrets) as (server, client):
        ref = client.ref(server.address_of("payments"))
        with trio.fail_after(WAIT):
            # Given three failed charges
            for n in range(3):
                with pytest.raises(Exception, match="refused the connection"):
                    await ref.ask("charge", n)
            # When a fourth comes, then it is answered modified at once (not run)
            with pytest.raises(Modified, match=r"circuit breaker 'payments' is open"):
                await ref.ask("charge", 3)
            assert payments.runs == [0, 1, 2]
            # When the service is back and the reset period has passed, then
            # the probe runs, succeeds, and the actor is itself again
            payments.down = False
            await trio.sleep_until(payments.breaker.reset_at)
            assert await ref.ask("charge", 4) == 4
            assert await ref.ask("charge", 5) == 5
    assert payments.runs == [0, 1, 2, 4, 5]
    assert payments.breaker.closed


class Ledger(Actor):
    """An operator's handler behind a breaker: its half-open probe is a message
    like any other, so the caller's role is checked before it runs."""

    def __init__(self) -> None:
        self.breaker = Breaker("ledger", BreakerPolicy(failures=1, reset=0.5))
        self.runs: list[int] = []

    async def on_start(self) -> None:
        CircuitBreaker.attach(self, self.breaker)

    @handler(roles=Role.OPERATOR)
    def close_books(self, n: int) -> int:  # plain def: a worker thread
        self.runs.append(n)
        return n


async def test_a_breakers_probe_is_run_as_any_message_is_roles_checked(
    secrets: Secrets,
) -> None:
    ledger = Ledger()
    async with node_pair({"ledger": ledger}, secrets=secrets) as (server, client):
        ref = client.ref(server.address_of("ledger"))
        with trio.fail_after(WAIT):
            # Given its breaker open, then half-open (the reset period passed)
            ledger.breaker.failed("the books are locked")
            assert not ledger.breaker.closed
            await trio.sleep_until(ledger.breaker.reset_at)
            # When a client's key (not an operator's) sends the probe
            with pytest.raises(ActorctlError, match="needs the operator role"):
                await ref.ask("close_books", 1)
    # Then it was refused before it ran, and it said nothing of the resource
    assert ledger.runs == []
    assert not ledger.breaker.closed


# -- a task pool ---------------------------------------------------------------------------


@asynccontextmanager
async def pool_cluster(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """Services (the pool's router, durable backlog) and two worker nodes, in-process."""
    ports = [free_port() for _ in range(3)]
    path = tmp_path / "cluster.toml"
    path.write_text(
        '[cluster]\nname = "breakers"\ndev = true\n'
        f'[[node]]\nname = "services"\nlisten = "127.0.0.1:{ports[0]}"\n'
        'actors = "tests.apps.breaker_app:app"\nservices = true\n'
        f'[[node]]\nname = "w1"\nlisten = "127.0.0.1:{ports[1]}"\n'
        'actors = "tests.apps.breaker_app:app"\npools = ["celery"]\n'
        f'[[node]]\nname = "w2"\nlisten = "127.0.0.1:{ports[2]}"\n'
        'actors = "tests.apps.breaker_app:app"\npools = ["celery"]\n'
    )
    async with (
        in_process(path, "w1", "w2", "services") as cluster,
        breaker_app.app.aconnect(path),
    ):
        hosted, w1, services = cluster.hosted, cluster.nodes["w1"], cluster.nodes["services"]
        yield {
            "w1": hosted["w1"]["celery"].breakers["downstream"],  # type: ignore[attr-defined]
            "w2": hosted["w2"]["celery"].breakers["downstream"],  # type: ignore[attr-defined]
            "services": services,
            "w1-health": w1.address_of("_health"),
        }


async def _run_all(keys: list[str]) -> dict[str, str]:
    """Send a task per key at once; each one's final state."""
    states: dict[str, str] = {}

    async def one(key: str) -> None:
        result = await breaker_app.charge.adelay(key)
        await result.aget(timeout=WAIT, propagate=False)
        states[key] = result.state

    async with trio.open_nursery() as nursery:
        for key in keys:
            nursery.start_soon(one, key)
    return states


def _opened(breaker: Breaker) -> trio.Event:
    event = trio.Event()

    def change(state: str) -> None:
        if state == "open":
            event.set()

    breaker.on_change = change
    if breaker.state == "open":
        event.set()
    return event


async def test_a_pool_sends_work_past_an_open_breaker_and_keeps_it_while_all_are_open(
    tmp_path: Path, logs: Logs
) -> None:
    breaker_app.RUNS.clear()
    breaker_app.DOWN.clear()
    async with pool_cluster(tmp_path) as cluster:
        w1, w2 = cluster["w1"], cluster["w2"]
        with trio.fail_after(WAIT):
            # Given the downstream of worker w1 is down: its breaker trips
            breaker_app.DOWN.add("w1")
            w1_open = _opened(w1)
            first = await _run_all([f"a{i}" for i in range(12)])
            await w1_open.wait()
            # Then every task ended: the ones that ran on w1 failed, the others succeeded on w2
            for key, state in first.items():
                assert state == ("FAILURE" if breaker_app.RUNS[key][-1] == "w1" else "SUCCESS")
            assert 3 <= sum(s == "FAILURE" for s in first.values()) <= 4
            # When more come while w1's breaker is open, then all of them run on w2
            second = await _run_all([f"b{i}" for i in range(20)])
            assert set(second.values()) == {"SUCCESS"}
            assert {breaker_app.RUNS[key][0] for key in second} == {"w2"}
            # When w2's downstream goes down too, its breaker trips: both are open
            breaker_app.DOWN.add("w2")
            w2_open = _opened(w2)
            await _run_all([f"c{i}" for i in range(3)])
            await w2_open.wait()
            assert not w1.closed
            assert not w2.closed
            # (which is the state of w1's `_health` actor, as cluster status shows it)
            services = cluster["services"]
            report = await services.ref(cluster["w1-health"]).ask("report")
            assert report["breakers"]["downstream"][0]["state"] == "open"
            # And tasks sent now are refused by both workers, and wait in the
            # router's backlog (its node's store); none runs
            outcome: dict[str, str] = {}
            keys = [f"d{i}" for i in range(30)]
            with _refused_by_both(len(keys)) as refused:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(functools.partial(_collect, keys, outcome))
                    await refused.wait()
                    assert len(services.outbox.backlog) == len(keys)
                    assert not any(key in breaker_app.RUNS for key in keys)
                    # When both downstreams are back, then after the reset every task runs
                    breaker_app.DOWN.clear()
    assert outcome == dict.fromkeys(keys, "SUCCESS")
    lost = [k for k in keys if k not in breaker_app.RUNS]
    ran_twice = [k for k in keys if len(breaker_app.RUNS[k]) > 1]
    print(f"lost={len(lost)} ran_twice={len(ran_twice)}")
    assert lost == []
    assert w1.closed
    assert w2.closed
    assert logs.of_type("actorctl:backlog:retry") or logs.of_type("actorctl:router:rerouted")


@contextmanager
def _refused_by_both(count: int) -> Iterator[trio.Event]:
    """Set once ``count`` messages were each refused by two instances (breaker open)."""
    refusals: dict[str, int] = {}
    done = trio.Event()

    def watch(message: dict[str, Any]) -> None:
        if message.get("message_type") != "actorctl:router:rerouted":
            return
        if "circuit-open" not in str(message.get("reason")):
            return
        message_id = str(message.get("message_id"))
        refusals[message_id] = refusals.get(message_id, 0) + 1
        if sum(1 for n in refusals.values() if n >= 2) >= count:
            done.set()

    eliot.add_destinations(watch)
    try:
        yield done
    finally:
        eliot.remove_destination(watch)


async def test_an_unhealthy_app_check_opens_every_workers_breaker_and_the_pool_waits(
    tmp_path: Path,
) -> None:
    breaker_app.RUNS.clear()
    breaker_app.DOWN.clear()
    async with pool_cluster(tmp_path) as cluster:
        w1, w2 = cluster["w1"], cluster["w2"]
        with trio.fail_after(WAIT):
            # Given the app's health check of the downstream reports Unhealthy
            # (it runs on each worker node and feeds the "downstream" breakers)
            opened = [_opened(w1), _opened(w2)]
            breaker_app.HEALTH[0] = Health.UNHEALTHY
            for event in opened:
                await event.wait()
            assert "health check 'downstream' reports unhealthy" in w1.reason
            # When tasks are sent, then both workers refuse them and none runs
            keys = [f"h{i}" for i in range(10)]
            outcome: dict[str, str] = {}
            with _refused_by_both(len(keys)) as refused:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(functools.partial(_collect, keys, outcome))
                    await refused.wait()
                    assert not any(key in breaker_app.RUNS for key in keys)
                    # When it reports Healthy again, then after the reset all of them run
                    breaker_app.HEALTH[0] = Health.HEALTHY
    assert outcome == dict.fromkeys(keys, "SUCCESS")
    lost = [k for k in keys if k not in breaker_app.RUNS]
    ran_twice = [k for k in keys if len(breaker_app.RUNS[k]) > 1]
    print(f"lost={len(lost)} ran_twice={len(ran_twice)}")
    assert lost == []


async def _collect(keys: list[str], outcome: dict[str, str]) -> None:
    outcome.update(await _run_all(keys))


# -- a publisher's breaker per destination peer ----------------------------------------------


class Tally(Actor):
    def __init__(self) -> None:
        self.values: list[int] = []
        self.arrived = trio.Event()

    @handler
    async def note(self, value: int) -> None:
        self.values.append(value)
        self.arrived.set()


async def test_a_senders_breaker_fails_fast_on_a_dead_peer_and_recovers_with_it(
    tmp_path: Path, logs: Logs
) -> None:
    secrets = Secrets.make(tmp_path, "sender", "receiver")
    port = free_port()
    dead = Address("127.0.0.1", port, "tally", "amqps")
    policy = BreakerPolicy(failures=3, reset=0.5, growth="exponential", reset_max=2.0)
    async with open_node(
        "sender", host=None, connect_timeout=0.3, peer_breaker=policy, **secrets.options("sender")
    ) as sender:
        ref = sender.ref(dead)
        with trio.fail_after(WAIT):
            # Given a peer that is not there: the first send waits the connect timeout
            with pytest.raises(PeerUnavailable, match=r"within 0\.3 s"):
                await ref.tell("note", 0)
            breaker = sender.outbox.peer_breaker(dead)
            assert breaker is not None
            # When the node has failed to connect 3 times past that timeout
            await _opened(breaker).wait()
            # Then a send fails at once, naming the breaker and when it tries again
            started = trio.current_time()
            with pytest.raises(PeerUnavailable, match=rf"'peer 127\.0\.0\.1:{port}' is open.*"):
                await ref.tell("note", 1)
            assert trio.current_time() - started < 0.1
            # And a durable send waits in the backlog
            await ref.with_options(durable=True).tell("note", 2)
            # When the peer comes back, then the half-open probe reconnects, the
            # breaker closes, and what waited is delivered
            tally = Tally()
            async with open_node(
                "receiver", {"tally": tally}, port=port, **secrets.options("receiver")
            ):
                await tally.arrived.wait()
                assert breaker.closed
                assert await ref.ask("note", 3) is None
    assert tally.values == [2, 3]  # 0 and 1 failed to their sender; 2 waited; nothing lost
    # (a probe that found the peer still down opened it again, for longer)
    tripped = [m for m in logs.of_type("actorctl:breaker:tripped") if "peer" in m["breaker"]]
    assert "cannot connect" in tripped[0]["reason"]
    assert all("the probe failed" in m["reason"] for m in tripped[1:])
    assert [m["open_for"] for m in tripped] == [0.5, 1.0, 2.0, 2.0, 2.0][: len(tripped)]
    assert logs.of_type("actorctl:breaker:closed")


async def test_a_peer_known_to_be_back_is_dialled_at_once_not_at_its_breakers_next_probe(
    tmp_path: Path,
) -> None:
    secrets = Secrets.make(tmp_path, "sender", "receiver")
    port = free_port()
    dead = Address("127.0.0.1", port, "tally", "amqps")
    policy = BreakerPolicy(failures=1, reset=60.0)  # no probe during the test
    async with open_node(
        "sender", host=None, connect_timeout=0.3, peer_breaker=policy, **secrets.options("sender")
    ) as sender:
        ref = sender.ref(dead)
        with trio.fail_after(WAIT):
            # Given a peer that was not there long enough for its breaker to open,
            # and a durable send waiting for it in the backlog
            with pytest.raises(PeerUnavailable):
                await ref.tell("note", 0)
            breaker = sender.outbox.peer_breaker(dead)
            assert breaker is not None
            await _opened(breaker).wait()
            await ref.with_options(durable=True).tell("note", 1)
            tally = Tally()
            async with open_node(
                "receiver", {"tally": tally}, port=port, **secrets.options("receiver")
            ):
                # When the peer starts and the sender is told it is back (as a
                # node that registers in etcd is announced to every other)
                sender.outbox.peer_back(dead)
                # Then it is dialled at once: what waited arrives long before
                # the breaker's minute is up
                await tally.arrived.wait()
                assert breaker.closed
    assert tally.values == [1]


async def test_a_router_skips_an_open_instance_and_answers_modified_when_all_are(
    secrets: Secrets,
) -> None:
    # Given two instances of an actor behind a router, each with its own breaker
    one, two = Payments(reset=60.0), Payments(reset=60.0)  # no probe during the test
    async with (
        open_node("server", {"one": one, "two": two}, **secrets.options("server")) as server,
        open_node(
            "client",
            {"pool": Router([server.address_of("one"), server.address_of("two")])},
            **secrets.options("client"),
        ) as client,
    ):
        pool = client.ref(client.address_of("pool"))
        with trio.fail_after(WAIT):
            # When one's downstream fails three times, its breaker opens
            for n in range(3):
                with pytest.raises(Exception, match="refused the connection"):
                    await client.ref(server.address_of("one")).ask("charge", n)
            assert not one.breaker.closed
            # Then everything asked of the pool runs on the other
            two.down = False
            assert [await pool.ask("charge", n) for n in range(10, 20)] == list(range(10, 20))
            assert two.runs == list(range(10, 20))
            # When the other's breaker opens too, then the pool answers modified
            two.down = True
            for n in range(3):
                with pytest.raises(Exception, match="refused the connection"):
                    await client.ref(server.address_of("two")).ask("charge", n)
            with pytest.raises(Modified, match=r"no instance took.*circuit-open.*circuit-open"):
                await pool.ask("charge", 99)
    assert 99 not in one.runs + two.runs
