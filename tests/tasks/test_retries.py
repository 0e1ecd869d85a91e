"""Retries by default, the retry scopes, and dead letters, on a cluster of two
nodes in this process (a services node with the scheduler and the pool's
router, and a worker node) and a downstream TCP service the test runs: it
fails a set number of times, then answers. Each test counts the calls the
downstream service saw: the number of attempts is exact.
"""

from __future__ import annotations

import base64
import itertools
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import eliot
import pytest
import trio

from actorctl import (
    ActorctlError,
    ConfigError,
    Envelope,
    Outcome,
    Rejected,
    RetryPolicy,
    TaskFailed,
    TaskRevoked,
    chain,
    group,
    open_node,
)
from actorctl.actors import Actor, Address
from actorctl.cluster import DeadLetterBounds, DeadLetters, load_cluster
from actorctl.mailbox import decode, encode
from actorctl.store import Store
from tests.apps.retry_app import (
    POLICY,
    RECORDS,
    add,
    app,
    awaits_inside,
    blocks_in_trio,
    enrich,
    fetch,
    fetch_scoped,
    parse,
    retry_later,
    sends_blocking_in_trio,
    waits_inside,
    wrong_call,
)
from tests.support.harness import Logs, Secrets, free_port, node_pair
from tests.support.in_process import InProcess, in_process

WAIT = 20.0


class Downstream:
    """A TCP service on 127.0.0.1: answers ``fail`` to its first ``fails``
    connections, then ``ok``; connection ``hold`` (1-based) waits for
    ``release`` before it answers."""

    def __init__(self, fails: int, hold: int = 0) -> None:
        self.fails = fails
        self.hold = hold
        self.calls = 0
        self.times: list[float] = []  # when each connection came (trio's clock)
        self.holding = trio.Event()
        self.release = trio.Event()
        self.port = 0
        self._called = trio.Event()

    async def reached(self, calls: int) -> None:
        """Wait until it has had ``calls`` connections."""
        with trio.fail_after(WAIT):
            while self.calls < calls:
                await self._called.wait()

    async def serve(self, stream: trio.SocketStream) -> None:
        self.calls += 1
        self.times.append(trio.current_time())
        call = self.calls
        self._called.set()
        self._called = trio.Event()
        if call == self.hold:
            self.holding.set()
            await self.release.wait()
        async with stream:
            await stream.send_all(b"fail\n" if call <= self.fails else b"ok\n")


@asynccontextmanager
async def downstream(fails: int, hold: int = 0) -> AsyncIterator[Downstream]:
    service = Downstream(fails, hold)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, service.serve, 0)
        service.port = listeners[0].socket.getsockname()[1]
        yield service
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def cluster(tmp_path: Path, *, services: bool = True) -> AsyncIterator[InProcess]:
    """The two nodes (or the worker alone: no scheduler), in this process, and
    a client connected to them."""
    path = tmp_path / "cluster.toml"
    path.write_text(
        "[cluster]\ninsecure = true\n"
        + (
            f'[[node]]\nname = "services"\nlisten = "127.0.0.1:{free_port()}"\n'
            'actors = "tests.apps.retry_app:app"\nservices = true\ndurable = false\n'
            if services
            else ""
        )
        + f'[[node]]\nname = "worker"\nlisten = "127.0.0.1:{free_port()}"\n'
        'actors = "tests.apps.retry_app:app"\npools = ["celery"]\ndurable = false\n'
    )
    names = ("services", "worker") if services else ("worker",)
    async with in_process(path, *names, grace=0.5) as running, app.aconnect(path):
        yield running


class LogWake:
    """Wakes whoever waits each time an eliot message is written (by any
    thread): the tests wait on the log line that says what they wait for."""

    def __init__(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._changed = trio.Event()

    def __call__(self, message: dict[str, Any]) -> None:
        self._token.run_sync_soon(self._wake)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def changed(self) -> None:
        """Wait for the next log line."""
        await self._changed.wait()

    async def until(self, check: Callable[[], bool], timeout: float = WAIT) -> None:
        with trio.fail_after(timeout):
            while not check():
                await self._changed.wait()


async def _succeeded(task_id: str, wake: LogWake) -> Any:
    """The result the cluster keeps for ``task_id``, once it is SUCCESS (it is
    fetched again each time a log line says something happened)."""
    with trio.fail_after(WAIT):
        while True:
            result = app.AsyncResult(task_id)
            await result.aget(timeout=WAIT, propagate=False)
            if result.state == "SUCCESS":
                return result
            with trio.move_on_after(0.1):  # at least each 0.1 s, should nothing be logged
                await wake.changed()


@pytest.fixture
async def wake() -> AsyncIterator[LogWake]:
    waker = LogWake()
    eliot.add_destinations(waker)
    try:
        yield waker
    finally:
        eliot.remove_destination(waker)


# -- retries -----------------------------------------------------------------------


async def test_a_task_retries_with_its_backoff_until_the_downstream_recovers(
    tmp_path: Path, logs: Logs
) -> None:
    # Given a downstream service that fails twice, then answers
    async with downstream(fails=2) as service, cluster(tmp_path):
        # When a task calls it, with no retry option of its own
        result = await fetch.adelay(service.port)
        # Then it succeeds on the third attempt: three calls, exactly
        assert await result.aget(timeout=WAIT) == "ok"
        assert service.calls == 3
    # And each retry waited within the app policy's backoff bound, and said so
    retries = [m for m in logs.of_type("actorctl:task:retry") if m["task_id"] == result.id]
    assert [m["attempt"] for m in retries] == [1, 2]
    for message in retries:
        bound = POLICY.bound(message["attempt"] - 1)
        assert message["bound"] == pytest.approx(bound)
        assert 0.0 <= message["delay"] <= bound
        assert message["error"]["type"] == "DownstreamError"
    # And each retry came at least its logged delay after the attempt before it
    # (the scheduler held it that long: a retry is not sent at once)
    gaps = [later - earlier for earlier, later in itertools.pairwise(service.times)]
    for gap, message in zip(gaps, retries, strict=True):
        assert gap >= message["delay"] - 0.002, (gap, message["delay"])
    assert [b for b in (POLICY.bound(n) for n in range(5))] == pytest.approx(
        [0.01, 0.03, 0.07, 0.15, 0.2]
    )


def test_a_message_cannot_make_retries_unbounded(logs: Logs) -> None:
    # Given a retry_policy header from a foreign client that asks for no bound
    header = '{"max_retries": null, "interval_start": 0.5}'
    # Then the bound stays the task's (its other numbers apply), and it is logged
    policy = POLICY.with_wire(header)
    assert policy.max_retries == POLICY.max_retries == 3
    assert policy.interval_start == 0.5
    [ignored] = logs.of_type("actorctl:retry:unbounded-ignored")
    assert ignored["max_retries"] == 3
    # While a bound given in the header applies
    assert POLICY.with_wire('{"max_retries": 1}').max_retries == 1


async def test_the_state_is_retry_between_attempts_with_the_last_error(tmp_path: Path) -> None:
    # Given a downstream that fails once, then holds the second call
    async with downstream(fails=1, hold=2) as service, cluster(tmp_path):
        result = await fetch.adelay(service.port)
        with trio.fail_after(WAIT):
            await service.holding.wait()
        # Then, while the second attempt runs, the caller sees RETRY and why
        with trio.fail_after(WAIT):  # each document that comes sets _changed
            while result.state != "RETRY":
                await result._changed.wait()
        assert result.retries == 0  # the attempt that failed was the first
        error = result.result
        assert isinstance(error, ActorctlError)
        assert "downstream answered 'fail'" in str(error)
        service.release.set()
        assert await result.aget(timeout=WAIT) == "ok"
        assert result.state == "SUCCESS"


async def test_a_call_overrides_the_policy_and_a_scope_overrides_the_task(
    tmp_path: Path, wake: LogWake
) -> None:
    async with cluster(tmp_path) as running:
        # Given a downstream that never recovers
        async with downstream(fails=10**6) as service:
            # When a call allows one retry only (carried in the message)
            once = await fetch.aapply_async((service.port,), max_retries=1)
            with pytest.raises(TaskFailed, match="gave up after 1 retries"):
                await once.aget(timeout=WAIT)
            assert service.calls == 2
            # And a policy given as a dict, with no retry at all
            never = await fetch.aapply_async((service.port,), retry_policy={"max_retries": 0})
            with pytest.raises(TaskFailed, match="gave up after 0 retries"):
                await never.aget(timeout=WAIT)
            assert service.calls == 3
            # And a task whose call sits in a retry scope of 5 retries
            scoped = await fetch_scoped.adelay(service.port)
            with pytest.raises(TaskFailed, match="gave up after 5 retries"):
                await scoped.aget(timeout=WAIT)
            assert service.calls == 3 + 6
        # Then each ran out of retries into the worker node's dead letters
        await wake.until(lambda: len(running.letters()) == 3)
        letters = {r["trace_id"]: r for r in running.letters()}
        assert {r["reason"] for r in letters.values()} == {"out-of-retries"}
        assert [letters[r.id]["retries"] for r in (once, never, scoped)] == [1, 0, 5]
        assert letters[once.id]["error"]["type"] == "DownstreamError"
        assert letters[once.id]["node"] == "worker"
        # And a bad per-call policy is refused before anything is sent
        with pytest.raises(ConfigError, match="unknown field"):
            await fetch.aapply_async((1,), retry_policy={"retries": 2})


async def test_a_canvas_step_is_retried_per_its_own_policy(tmp_path: Path) -> None:
    async with cluster(tmp_path):
        # Given a downstream that fails 4 times: more than the app's 3 retries
        async with downstream(fails=4) as service:
            # When the second step of a chain allows 5 retries (its own option)
            step = fetch.si(service.port).set(retry_policy={"max_retries": 5})
            result = await chain(add.si(1, 2), step).adelay()
            # Then it is retried per that policy, and succeeds at its fifth run
            assert await result.aget(timeout=WAIT) == "ok"
            assert service.calls == 5
        # And a step that allows one retry only gives up after it
        async with downstream(fails=10**6) as service:
            once = fetch.si(service.port).set(max_retries=1)
            failed = await chain(add.si(1, 2), once).adelay()
            with pytest.raises(TaskFailed, match="gave up after 1 retries"):
                await failed.aget(timeout=WAIT)
            assert service.calls == 2
            # And so does a group's member, given a RetryPolicy
            members = group(fetch.si(service.port).set(retry_policy=RetryPolicy(max_retries=0)))
            [member] = (await members.adelay()).results
            with pytest.raises(TaskFailed, match="gave up after 0 retries"):
                await member.aget(timeout=WAIT)
            assert service.calls == 3
    # And a wrong policy is refused when the signature is made
    with pytest.raises(ConfigError, match="unknown field"):
        fetch.si(1).set(retry_policy={"retries": 2})
    with pytest.raises(ConfigError, match="must be a RetryPolicy"):
        fetch.signature((1,), retry_policy=3)


async def test_optional_goes_on_and_programming_errors_are_never_retried(
    tmp_path: Path, logs: Logs
) -> None:
    async with downstream(fails=1) as service, cluster(tmp_path) as running:
        # An optional call that fails is logged and the task goes on: one call
        assert await (await enrich.adelay(service.port)).aget(timeout=WAIT) == (
            "done (extra: none)"
        )
        assert service.calls == 1
        [warning] = logs.of_type("actorctl:task:optional-failed")
        assert warning["error_type"] == "DownstreamError"
        # A TypeError from a wrong call fails at once: no retry, no dead letter
        wrong = await wrong_call.adelay()
        with pytest.raises(TaskFailed, match="TypeError"):
            await wrong.aget(timeout=WAIT)
        assert not [m for m in logs.of_type("actorctl:task:retry") if m["task_id"] == wrong.id]
        [failed] = [m for m in logs.of_type("actorctl:task:failed") if m["task_id"] == wrong.id]
        assert failed["why"] == "never retried"
        # And bad arguments are not retried either
        with pytest.raises(TaskFailed, match="BadArguments"):
            await (await add.adelay(1)).aget(timeout=WAIT)
        assert not logs.of_type("actorctl:task:retry")
        assert running.letters() == []


async def test_with_no_scheduler_a_failure_is_a_dead_letter_and_a_delayed_retry_says_why(
    tmp_path: Path, logs: Logs, wake: LogWake
) -> None:
    # Given a cluster with no services node: nothing can delay a retry
    async with downstream(fails=10**6) as service, cluster(tmp_path, services=False) as running:
        # Then the worker said so once, as it started, naming the tasks it affects
        [warning] = logs.of_type("actorctl:worker:no-scheduler")
        assert warning["level"] == "warning"
        assert "fetch" in " ".join(warning["tasks"])
        assert "services = true" in warning["why"]
        # When a task fails with an error its policy would retry
        failed = await fetch.adelay(service.port)
        with pytest.raises(TaskFailed, match="DownstreamError"):
            await failed.aget(timeout=WAIT)
        assert service.calls == 1
        # And a task asks for a retry in 5 s
        later = await retry_later.adelay()
        with pytest.raises(TaskFailed, match=r"no scheduler.*add a services node"):
            await later.aget(timeout=WAIT)
        # Then both are dead letters that can be re-driven, with their errors
        await wake.until(lambda: len(running.letters()) == 2)
        letters = {r["trace_id"]: r for r in running.letters()}
        assert letters[failed.id]["reason"] == "not-retried"
        assert letters[failed.id]["error"]["type"] == "DownstreamError"
        assert letters[later.id]["reason"] == "not-retried"
        assert "retry in 5 s" in letters[later.id]["error"]["message"]
    assert len(logs.of_type("actorctl:worker:no-scheduler")) == 1  # once, not per message
    assert not logs.of_type("actorctl:task:unsendable")


async def test_a_poisonous_failure_is_dead_lettered_at_once(
    tmp_path: Path, logs: Logs, wake: LogWake
) -> None:
    async with cluster(tmp_path) as running:
        poisoned = await parse.adelay("not a number")
        with pytest.raises(TaskFailed, match="ValueError"):
            await poisoned.aget(timeout=WAIT)
        assert not logs.of_type("actorctl:task:retry")
        await wake.until(lambda: len(running.letters()) == 1)
        [letter] = running.letters()
        assert (letter["reason"], letter["retries"], letter["trace_id"]) == (
            "poison",
            0,
            poisoned.id,
        )
        assert letter["error"]["type"] == "ValueError"
        # The letter keeps the message as the worker got it
        message = decode(base64.b64decode(letter["message"]))
        assert message.message_id == letter["message_id"]
        assert message.body == [["not a number"], {}]


def _runs(records: Path, task: str) -> list[str]:
    """The ids of the recorded runs of ``task`` (one per run, retries too)."""
    lines = [line.split() for f in records.glob("*.log") for line in f.read_text().splitlines()]
    return [task_id for task_id, name, _ in lines if name == task]


@pytest.mark.parametrize(
    ("misuse", "words", "sends"),
    [
        (waits_inside, "nobody receives its result", 1),
        (awaits_inside, "nobody receives its result", 1),
        (blocks_in_trio, r"get\(\) blocks, and this is trio's thread", 1),
        (sends_blocking_in_trio, "this call blocks, and this is trio's thread", 0),
    ],
    ids=["get-in-a-task", "aget-in-a-task", "get-in-trio", "delay-in-trio"],
)
async def test_a_misuse_of_the_api_in_a_task_is_poison_run_once(
    tmp_path: Path,
    logs: Logs,
    wake: LogWake,
    monkeypatch: pytest.MonkeyPatch,
    misuse: Any,
    words: str,
    sends: int,
) -> None:
    records = tmp_path / "records"
    records.mkdir()
    monkeypatch.setenv(RECORDS, str(records))
    async with cluster(tmp_path) as running:
        # When a task misuses the API (a programming error: another run fails the same way)
        sent = await misuse.adelay(1)
        # Then it fails with the words that say what to do instead
        with pytest.raises(TaskFailed, match=words):
            await sent.aget(timeout=WAIT)
        # And it is one poison dead letter, made as it failed, never a retry
        await wake.until(lambda: len(running.letters()) == 1)
        [letter] = running.letters()
        assert (letter["reason"], letter["retries"], letter["trace_id"]) == (
            "poison",
            0,
            sent.id,
        )
        assert letter["error"]["type"] == "MisuseError"
        # And its subtask, sent before the misuse, was sent once and ran once
        await wake.until(lambda: len(_runs(records, "step")) == sends)
        assert not logs.of_type("actorctl:task:retry")
        [failed] = [m for m in logs.of_type("actorctl:task:failed") if m["task_id"] == sent.id]
        assert failed["why"] == "poison"
    assert _runs(records, misuse.name.rpartition(".")[2]) == [sent.id]
    assert len(_runs(records, "step")) == sends
    assert len(running.letters()) == 1


async def test_an_expired_task_is_dead_lettered_and_a_letter_is_re_driven_once(
    tmp_path: Path, wake: LogWake
) -> None:
    async with downstream(fails=4) as service, cluster(tmp_path) as running:
        # Given a task that expired before it could run
        expired = await add.aapply_async((1, 2), expires=-1.0)
        await wake.until(lambda: len(running.letters()) == 1)
        [letter] = running.letters()
        assert letter["reason"] == "expired"
        assert letter["trace_id"] == expired.id
        assert letter["node"] == "worker"
        # And one that expired while the scheduler held it
        late = await add.aapply_async((1, 2), countdown=0.2, expires=0.05)
        with pytest.raises(TaskRevoked, match="before it was due"):
            await late.aget(timeout=WAIT)
        await wake.until(lambda: len(running.letters()) == 2)
        [letter] = [r for r in running.letters() if r["trace_id"] == late.id]
        assert (letter["reason"], letter["node"]) == ("expired", "services")
        # And a task that ran out of its retries (3: four calls, four failures)
        failed = await fetch.adelay(service.port)
        with pytest.raises(TaskFailed, match="gave up after 3 retries"):
            await failed.aget(timeout=WAIT)
        await wake.until(lambda: len(running.letters()) == 3)
        [letter] = [r for r in running.letters() if r["reason"] == "out-of-retries"]
        assert service.calls == 4
        # When it is re-driven (the downstream now answers)
        agent = running.nodes["worker"].ref(
            f"amqp://127.0.0.1:{running.nodes['worker'].port}/_deadletters"
        )
        done = await agent.ask("retry", letter["id"])
        # (the same message id: the worker, which handled it, runs it again)
        assert (done["message_id"], done["redrive"]) == (letter["message_id"], 1)
        assert letter["trace_id"] == failed.id
        # Then it runs again, with a fresh budget, under the same task id, and
        # succeeds: once (the fifth call, exactly)
        again = await _succeeded(failed.id, wake)
        assert again.result == "ok"
        assert service.calls == 5
        assert running.nodes["worker"].dead_letters.get(letter["id"]) is None
        # And a second re-drive of the same letter finds nothing
        assert await agent.ask("retry", letter["id"]) is None
        assert [r["reason"] for r in running.letters()] == ["expired", "expired"]
        assert await agent.ask("purge", "expired") == 1
        assert [r["node"] for r in running.letters()] == ["services"]


# -- dead letters in the runtime ---------------------------------------------------------


class Refuses(Actor):
    """Never takes a message: answers ``modified`` (another instance may)."""

    async def handle_unmatched(self, envelope: Envelope) -> tuple[Outcome, None]:
        return Outcome("modified", "actorctl:busy", "busy here"), None


async def test_a_backlog_message_refused_until_it_expires_is_a_dead_letter(
    logs: Logs, wake: LogWake
) -> None:
    async with (
        open_node("there", {"refuses": Refuses}, insecure=True) as there,
        open_node("here", insecure=True) as here,
    ):
        address = there.address_of("refuses")
        envelope = Envelope(
            message_id=here.new_message_id(),
            to=str(address),
            subject="work",
            body=[[], {}],
            creation_time=here.now(),
            expiry_time=here.now() + 0.5,
        )
        await here.outbox.send(address, envelope, presettled=False, confirm=False, durable=True)
        await wake.until(lambda: len(here.dead_letters) == 1)
        [letter] = here.dead_letters.records()
        assert (letter["reason"], letter["message_id"], letter["target"]) == (
            "expired",
            envelope.message_id,
            str(address),
        )
        assert "refused" in letter["error"]["message"]
        with trio.fail_after(WAIT):
            await here.outbox.backlog.wait_empty()
    assert logs.of_type("actorctl:backlog:retry")


async def test_a_backlog_message_whose_peer_stays_down_is_dead_lettered_when_it_expires(
    wake: LogWake,
) -> None:
    # Given a node whose peer never comes up (nothing listens on its port)
    async with open_node("here", insecure=True, connect_timeout=0.2) as here:
        address = Address("127.0.0.1", free_port(), "gone", "amqp")

        def message(expiry: float | None) -> Envelope:
            return Envelope(
                message_id=here.new_message_id(),
                to=str(address),
                subject="work",
                body=[[], {}],
                creation_time=here.now(),
                expiry_time=expiry,
            )

        # When it takes on a message without a deadline, then one with a short
        # one, for that peer (both wait in its durable backlog)
        kept, expiring = message(None), message(here.now() + 0.6)
        for envelope in (kept, expiring):
            await here.outbox.send(address, envelope, presettled=False, confirm=False, durable=True)
        # Then, once its deadline passes while it waits, the second is a dead
        # letter, reason expired, saying that it waited for its peer
        await wake.until(lambda: len(here.dead_letters) == 1)
        [letter] = here.dead_letters.records()
        assert (letter["reason"], letter["message_id"], letter["target"]) == (
            "expired",
            expiring.message_id,
            str(address),
        )
        assert "waited for its peer" in letter["error"]["message"]
        assert letter["time"] >= expiring.expiry_time
        # And nothing else is lost: the first still waits for the peer
        assert len(here.outbox.backlog) == 1
        assert here.outbox.backlog.waiting_for(address.endpoint)


async def test_the_bound_evicts_the_oldest_and_logs_once_when_80_percent_full(
    logs: Logs,
) -> None:
    now = [1000.0]
    store = Store(None, name="n", clock=lambda: now[0])
    letters = DeadLetters("n", store, lambda: now[0], DeadLetterBounds(max=5, ttl=60.0))
    ids = []
    for index in range(7):
        envelope = Envelope(message_id=f"m{index}", to="amqp://h:1/a", subject="t", body=[[], {}])
        ids.append(letters.add(reason="poison", target="amqp://h:1/a", envelope=envelope))
        now[0] += 1.0
    # Five kept: the two oldest went, each logged; one error line at 4 of 5
    assert [r["message_id"] for r in letters.records()] == ["m2", "m3", "m4", "m5", "m6"]
    assert [m["id"] for m in logs.of_type("actorctl:deadletter:evicted")] == ids[:2]
    [alarm] = logs.of_type("actorctl:deadletter:nearly-full")
    assert (alarm["held"], alarm["max"]) == (4, 5)
    # And how full it is (what `cluster status` shows)
    assert letters.fill() == {"held": 5, "max": 5, "nearly_full": True}
    # Past the TTL they are gone
    now[0] += 61.0
    assert letters.records() == []
    assert len(letters) == 0
    assert letters.fill() == {"held": 0, "max": 5, "nearly_full": False}
    with pytest.raises(ConfigError, match="max"):
        DeadLetterBounds(max=0)
    with pytest.raises(ConfigError, match="interval_start"):
        RetryPolicy(interval_start=-1)


def test_a_node_sets_its_dead_letter_bounds_in_cluster_toml(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    node = '[cluster]\ninsecure = true\n[[node]]\nname = "n"\nlisten = "127.0.0.1:5999"\n'
    path.write_text(node + "[node.deadletters]\nmax = 50\nttl = 3600\n")
    assert load_cluster(path).nodes[0].deadletters == DeadLetterBounds(max=50, ttl=3600)
    path.write_text(node)
    assert load_cluster(path).nodes[0].deadletters == DeadLetterBounds()
    for table, message in {
        "max = 0": r"key 'node\[0\]\.deadletters': dead letters: max = 0 must be",
        "maximum = 5": r"key 'node\[0\]\.deadletters\.maximum'",
        'ttl = "1d"': r"ttl = '1d' must be seconds",
    }.items():
        path.write_text(node + f"[node.deadletters]\n{table}\n")
        with pytest.raises(ConfigError, match=message):
            load_cluster(path)


async def test_only_the_node_itself_adds_its_dead_letters(secrets: Secrets) -> None:
    # Given two secured nodes: another identity must not plant a letter that the
    # node would later send again under its own signature
    async with node_pair(secrets=secrets) as pair:
        letter = Envelope(message_id="m", to="amqps://127.0.0.1:1/x", subject="t", body=[[], {}])
        fields = {
            "reason": "poison",
            "target": "amqps://127.0.0.1:1/x",
            "message": base64.b64encode(bytes(encode(letter))).decode(),
        }
        agent = pair.client.ref(pair.server.address_of("_deadletters"))
        with pytest.raises(Rejected, match="not-permitted"):
            await agent.deliver("add", **fields)
        assert len(pair.server.dead_letters) == 0
        # While the node's own workers' letters are taken (it signs them itself)
        own = pair.server.ref(pair.server.address_of("_deadletters"))
        await own.deliver("add", **fields)
        assert [r["message_id"] for r in pair.server.dead_letters.records()] == ["m"]


async def test_a_re_drive_that_cannot_be_sent_keeps_the_letter(secrets: Secrets) -> None:
    # Given a letter whose target does not parse
    async with node_pair(secrets=secrets) as pair:
        letter = Envelope(message_id="m", to="x", subject="t", body=[[], {}])
        own = pair.server.ref(pair.server.address_of("_deadletters"))
        await own.deliver(
            "add",
            reason="poison",
            target="nowhere/x",
            message=base64.b64encode(bytes(encode(letter))).decode(),
        )
        [record] = pair.server.dead_letters.records()
        # When it is re-driven, then the re-drive fails, saying why
        with pytest.raises(Exception, match="scheme must be amqp"):
            await own.ask("retry", record["id"])
        # And the letter is still there (taken only once the backlog holds its message)
        assert pair.server.dead_letters.get(record["id"]) is not None


async def test_dead_letters_outlive_their_node_in_its_store(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    bounds = DeadLetterBounds(max=3, ttl=600.0)
    envelope = Envelope(message_id="kept", to="amqp://h:1/a", subject="t", body=[[1], {}])
    store = Store(path, name="n")
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        letter_id = DeadLetters("n", store, time.time, bounds).add(
            reason="poison", target="amqp://h:1/a", envelope=envelope, retries=2
        )
        await store.sync()
        nursery.cancel_scope.cancel()
    # The node starts again: its letter is there, with its message, and counts
    store = Store(path, name="n")
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        letters = DeadLetters("n", store, time.time, bounds)
        assert len(letters) == 1
        record = letters.get(letter_id)
        assert record is not None
        assert (record["reason"], record["retries"], record["message_id"]) == ("poison", 2, "kept")
        assert decode(base64.b64decode(record["message"])).body == [[1], {}]
        nursery.cancel_scope.cancel()
