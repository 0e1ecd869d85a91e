"""Boxed workers' processes under supervision, driven for real (docs/boxed.md).

Each test runs a :class:`Boxed` worker whose processes are
tests/apps/boxed_faults.py (a worker of the standard library only, fast to start),
and breaks them the ways the protocol page lists: a crash (exit 1, SIGKILL from
the test), a hang past the hard time limit, a missed heartbeat, garbage and an
oversize record on stdout, an exceeded memory limit, and more failures than
the supervisor's intensity allows. Every request records its execution in a
file (one line: key and pid); a test counts what was lost (0) and reports what
ran twice. Intervals are short settings of the spec, not a mocked clock: the
processes are real.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import attrs
import eliot
import pytest
import trio

from actorctl import RemoteError
from actorctl.supervision import Boxed, BoxedSpec, ChildSpec, Supervisor, SupervisorGaveUp
from actorctl.supervision._boxed_process import BoxedFailed
from tests.support.harness import Logs, Secrets, node_pair

FAULTS = str(Path(__file__).parents[1] / "apps" / "boxed_faults.py")
WAIT = 20.0  # seconds any one wait may take on a loaded 2-core machine


def spec(records: Path, **options: Any) -> BoxedSpec:
    settings: dict[str, Any] = {
        "heartbeat": 0,
        "grace": 0.5,
        "backoff": 0.01,
        "max_restarts": 10,
        "within": 30.0,
        "env": {"BOXED_RECORDS": str(records)},
        **options,
    }
    return BoxedSpec("faults", (sys.executable, FAULTS), **settings)


@asynccontextmanager
async def running(boxed_spec: BoxedSpec) -> AsyncIterator[Boxed]:
    boxed = Boxed(boxed_spec)
    async with trio.open_nursery() as nursery:
        await nursery.start(boxed.supervise)
        yield boxed
        nursery.cancel_scope.cancel()


def runs(records: Path) -> list[tuple[str, int]]:
    if not records.exists():
        return []
    lines = [line.split() for line in records.read_text().splitlines() if line]
    return [(key, int(pid)) for key, pid in lines]


@contextmanager
def heard(message_type: str, match: Callable[[dict[str, Any]], bool]) -> Iterator[trio.Event]:
    """An event set when a log message of ``message_type`` that ``match``es is
    written (eliot calls its destinations as each message is logged)."""
    event = trio.Event()

    def destination(message: dict[str, Any]) -> None:
        if message.get("message_type") == message_type and match(message):
            event.set()

    eliot.add_destinations(destination)
    try:
        yield event
    finally:
        eliot.remove_destination(destination)


def restarted(boxed: Boxed) -> int:
    assert boxed.supervisor is not None
    return int(boxed.supervisor.which_children()[0]["restarts"])


async def test_a_process_that_exits_mid_task_is_restarted_and_its_tasks_run_again(
    tmp_path: Path, logs: Logs
) -> None:
    # Given a boxed worker whose requests crash their process (exit 1) the
    # first time each key is seen, several at once in flight
    records = tmp_path / "records"
    keys = [f"k{i}" for i in range(8)]
    results: dict[str, Any] = {}
    async with running(spec(records, max_restarts=20)) as boxed:
        first_pid = boxed.runs[1].pid

        async def call(key: str) -> None:
            results[key] = await boxed.call("crash", [key], {})

        # When they are all sent
        with trio.fail_after(WAIT):
            async with trio.open_nursery() as nursery:
                for key in keys:
                    nursery.start_soon(call, key)
        # Then every one was answered, having run again on a restarted process
        assert results == {key: key for key in keys}
        assert restarted(boxed) >= 1
    ran = Counter(key for key, _ in runs(records))
    lost = [key for key in keys if ran[key] == 0 or key not in results]
    twice = sorted(key for key in keys if ran[key] > 1)
    print(f"lost: {len(lost)}, ran twice or more: {len(twice)} of {len(keys)}")
    assert lost == []
    pids = {pid for _, pid in runs(records)}
    assert len(pids) >= 2
    assert first_pid in pids
    exits = [m for m in logs.of_type("actorctl:boxed:exited") if "code 1" in str(m["reason"])]
    assert exits


async def test_a_process_killed_by_sigkill_mid_task_is_restarted_and_the_task_runs_again(
    tmp_path: Path, logs: Logs
) -> None:
    # Given a request in flight on a process (it holds there until killed)
    records = tmp_path / "records"
    async with running(spec(records)) as boxed:
        async with trio.open_nursery() as nursery:
            answer: list[Any] = []

            async def call() -> None:
                answer.append(await boxed.call("hold", ["held"], {}))

            with heard("actorctl:boxed:stderr", lambda m: m["line"] == "holding held") as held:
                nursery.start_soon(call)
                with trio.fail_after(WAIT):
                    await held.wait()
            [(_, pid)] = runs(records)
            # When the test kills its process with SIGKILL
            os.kill(pid, signal.SIGKILL)
        # Then the process was restarted and the request ran again there
        assert answer == ["held"]
        assert [key for key, _ in runs(records)] == ["held", "held"]
        assert runs(records)[1][1] != pid
        assert restarted(boxed) == 1
    [exit] = [m for m in logs.of_type("actorctl:boxed:exited") if m["pid"] == pid]
    assert "SIGKILL" in exit["reason"]
    print("lost: 0, ran twice: 1 of 1 (the one in flight when it was killed)")


async def test_past_its_restart_intensity_the_supervisor_escalates(
    tmp_path: Path, logs: Logs
) -> None:
    # Given a boxed worker whose processes die right after their hello, with
    # an intensity of one restart, under a parent that allows none
    dying = (
        "sh",
        "-c",
        'echo \'{"type":"hello","protocol":1,"handlers":[]}\'; echo dying >&2; exit 1',
    )
    boxed = Boxed(
        attrs.evolve(spec(tmp_path / "records"), command=dying, max_restarts=1, within=30.0)
    )
    parent = Supervisor("node", [ChildSpec("faults", boxed.supervise)], max_restarts=0)
    # When they run, Then the boxed worker's supervisor gives up and its
    # parent gives up in turn: the failure goes up the tree
    with trio.fail_after(WAIT), pytest.raises(SupervisorGaveUp) as raised:
        await parent.run()
    assert raised.value.supervisor == "node"
    assert "faults" in raised.value.last
    gave_up = [m["supervisor"] for m in logs.of_type("actorctl:supervisor:gave-up")]
    assert gave_up == ["faults", "node"]
    stderr = [m for m in logs.of_type("actorctl:boxed:stderr") if m["line"] == "dying"]
    assert stderr
    assert all(m["boxed"] == "faults/1" and m["pid"] for m in stderr)
    # And a caller then hears that it stopped, rather than waiting for ever
    with pytest.raises(Exception, match="stopped"):
        await boxed.call("note", ["late"], {})


async def test_a_hang_past_the_hard_time_limit_is_killed_and_restarted_within_the_grace(
    tmp_path: Path, logs: Logs
) -> None:
    # Given a request that never ends, with a hard time limit of 0.5 s
    records = tmp_path / "records"
    async with running(spec(records, grace=0.5)) as boxed:
        pid = boxed.runs[1].pid
        with heard("actorctl:boxed:hello", lambda m: m["pid"] != pid) as again:
            started = trio.current_time()
            # When it runs, Then its caller gets a time-limit error at the limit
            with pytest.raises(RemoteError) as raised:
                await boxed.call("spin", [], {}, time_limit=0.5)
            assert raised.value.type_name == "TimeLimitExceeded"
            assert "0.5 s" in raised.value.message
            # And the process was killed and a new one said hello, within the
            # grace period (and a new process's start) of the limit
            with trio.fail_after(WAIT):
                await again.wait()
        took = trio.current_time() - started
        print(f"from the request to a new process's hello: {took:.2f} s")
        assert took < 0.5 + 0.5 + 2.0  # limit + grace + a start on a loaded machine
        [killed] = logs.of_type("actorctl:boxed:killed")
        assert killed["pid"] == pid
        assert "time limit (0.5 s)" in killed["reason"]
        # And the new process serves
        assert await boxed.call("note", ["after"], {}) == "after"


async def test_a_redelivered_request_gets_its_time_limit_from_when_a_process_takes_it(
    tmp_path: Path, logs: Logs
) -> None:
    # Given a worker whose restart backoff (1.5 s) is longer than a request's
    # hard time limit (1.0 s), and a request that crashes its process (exit 1)
    # the first time it runs
    records = tmp_path / "records"
    async with running(spec(records, backoff=1.5)) as boxed:
        first = boxed.runs[1].pid
        started = trio.current_time()
        # When it is sent
        with trio.fail_after(WAIT):
            value = await boxed.call("crash", ["late"], {}, time_limit=1.0)
        took = trio.current_time() - started
        # And, once redelivered, its record's deadline is the new run's
        before = time.time()
        record = await boxed.call("request", [], {}, time_limit=1.0)
    # Then it ran again on the restarted process and was answered: the wait
    # for that process (the backoff) did not count against its time limit
    assert value == "late"
    assert took >= 1.5
    ran = runs(records)
    assert [key for key, _ in ran] == ["late", "late"]
    assert ran[0][1] == first
    assert ran[1][1] != first
    assert logs.of_type("actorctl:boxed:redeliver")
    assert not logs.of_type("actorctl:boxed:killed")
    assert before + 1.0 <= record["deadline"] <= time.time() + 1.0
    print(f"lost: 0, ran twice: 1 of 1; answered after {took:.2f} s (limit 1.0 s per run)")


async def test_a_missed_heartbeat_counts_as_a_hang(tmp_path: Path, logs: Logs) -> None:
    # Given a process that stops reading and writing, with heartbeats every 0.2 s
    # and no second chance for the request it took
    records = tmp_path / "records"
    async with running(spec(records, heartbeat=0.2, redeliveries=0)) as boxed:
        pid = boxed.runs[1].pid
        # When it goes silent, Then it is killed as hung and its request fails
        with trio.fail_after(WAIT), pytest.raises(RemoteError) as raised:
            await boxed.call("mute", [], {})
        assert raised.value.type_name == "BoxedProcessError"
        assert "hung" in raised.value.message
        [killed] = [m for m in logs.of_type("actorctl:boxed:killed") if m["pid"] == pid]
        assert "heartbeat every 0.2 s" in killed["reason"]
        # And it was restarted: the new process answers (and its heartbeats)
        assert await boxed.call("note", ["after"], {}) == "after"
        assert boxed.runs[1].pid != pid


@pytest.mark.parametrize(
    ("handler", "args", "options", "said"),
    [
        ("garbage", [], {}, "wrote garbage on stdout"),
        ("big", [4096], {"max_record": 1024}, "longer than max_record (1024 bytes)"),
        ("hog", [], {"memory_limit": 256}, "out of memory (its memory limit is 256 MiB)"),
    ],
)
async def test_garbage_an_oversize_record_or_too_much_memory_kills_with_a_clear_log_line(
    tmp_path: Path, logs: Logs, handler: str, args: list[Any], options: dict[str, Any], said: str
) -> None:
    # Given a process that breaks the protocol or its memory limit
    records = tmp_path / "records"
    async with running(spec(records, redeliveries=0, **options)) as boxed:
        pid = boxed.runs[1].pid
        # When it does, Then the request fails naming why
        with trio.fail_after(WAIT), pytest.raises(RemoteError) as raised:
            await boxed.call(handler, args, {})
        assert raised.value.type_name == "BoxedProcessError"
        assert said in raised.value.message
        # And the log says why it ended, with the worker's name and pid
        [ended] = [m for m in logs.of_type("actorctl:boxed:exited") if m["pid"] == pid]
        assert said in ended["reason"]
        if handler == "hog":  # and what it said on stderr before it died
            assert "its last stderr line: 'out of memory'" in ended["reason"]
        assert ended["boxed"] == "faults/1"
        # And it was restarted: the new process serves
        assert await boxed.call("note", ["after"], {}) == "after"
        assert boxed.runs[1].pid != pid


async def test_exit_code_3_reads_as_out_of_memory_with_or_without_a_memory_limit(
    tmp_path: Path, logs: Logs
) -> None:
    # Given a worker with no memory limit that exits 3 when it cannot allocate
    command = (
        "sh",
        "-c",
        """echo '{"type":"hello","protocol":1,"handlers":["eat"]}'; read line; """
        """echo 'cannot allocate' >&2; exit 3""",
    )
    boxed_spec = attrs.evolve(spec(tmp_path / "records", redeliveries=0), command=command)
    assert boxed_spec.memory_limit is None
    async with running(boxed_spec) as boxed:
        pid = boxed.runs[1].pid
        # When it does, Then the request and the log both say "out of memory"
        with trio.fail_after(WAIT), pytest.raises(RemoteError) as raised:
            await boxed.call("eat", [], {})
    said = "exited with code 3: out of memory (its last stderr line: 'cannot allocate')"
    assert raised.value.type_name == "BoxedProcessError"
    assert said in raised.value.message
    [ended] = [m for m in logs.of_type("actorctl:boxed:exited") if m["pid"] == pid]
    assert ended["reason"] == said


async def test_a_handler_the_worker_does_not_serve_is_refused_at_once(tmp_path: Path) -> None:
    async with running(spec(tmp_path / "records")) as boxed:
        with pytest.raises(RemoteError) as raised:
            await boxed.call("nothing", [], {})
        assert raised.value.type_name == "UnknownHandler"
        listed = "big, block, crash, garbage, hog, hold, mute, note, request, spin"
        assert raised.value.message == (
            f"boxed worker 'faults' serves no handler 'nothing' (its hello listed: {listed})"
        )


async def test_a_process_that_does_not_say_hello_fails_to_start_with_its_reason(
    tmp_path: Path,
) -> None:
    # Given a command that writes something other than a hello first
    command = ("sh", "-c", """echo '{"type":"heartbeat"}'; exit 0""")
    boxed = Boxed(attrs.evolve(spec(tmp_path / "records"), command=command))
    # When it starts, Then it fails to start, saying what it said instead
    failed = pytest.RaisesExc(BoxedFailed, match="first: expected a hello record")
    with trio.fail_after(WAIT), pytest.RaisesGroup(failed, flatten_subgroups=True):
        await boxed.supervise()


async def test_a_boxed_worker_is_an_actor_answering_signed_asks(
    tmp_path: Path, secrets: Secrets, logs: Logs
) -> None:
    # Given a node (mutual TLS, signed messages) hosting a boxed worker
    records = tmp_path / "records"
    boxed_spec = attrs.evolve(spec(records), name="faults")
    async with node_pair([boxed_spec], secrets=secrets) as pair:
        ref = pair.client.ref(f"{pair.server.url}/faults")
        # When a client asks its handlers, Then the process answers
        assert await ref.ask("note", "signed") == "signed"
        assert runs(records)[0][0] == "signed"
        # And all it gets is the request: no message, signature or key
        request = await ref.ask("request", 1, x=2)
        assert list(request) == ["type", "id", "handler", "args", "kwargs", "deadline", "trace"]
        assert (request["handler"], request["args"], request["kwargs"]) == (
            "request",
            [1],
            {"x": 2},
        )
        # And a handler's error reaches the client with its type and message
        with pytest.raises(RemoteError) as raised:
            await ref.ask("nothing")
        assert raised.value.type_name == "UnknownHandler"
        assert "serves no handler 'nothing'" in raised.value.message
        # And the node's tree shows it: a boxed child with its process
        tree = pair.server.tree.describe() if pair.server.tree is not None else []
        [boxed] = [child for child in tree if child["name"] == "faults"]
        assert boxed["kind"] == "boxed"
        [process] = boxed["children"]
        assert process["name"] == "faults/1"
        assert process["pid"]
        assert process["in_flight"] == 0
    # And when its node stops, the process is asked to shut down, and does
    [ended] = logs.of_type("actorctl:boxed:exited")
    assert (ended["pid"], ended["code"], ended["reason"]) == (process["pid"], 0, "stopped")
    assert logs.of_type("actorctl:boxed:killed") == []


async def test_a_per_call_boxed_task_runs_in_a_process_of_its_own_over_the_same_protocol() -> None:
    # Given a Python task run with boxed="per-call" (a process for this call:
    # the reference worker gets one request, then a shutdown)
    from actorctl.tasks.limits._limits import TaskFailure, run_boxed
    from tests.apps.task_app import boxed_square

    # When it runs, Then its value comes back; And a bad argument's error too
    with trio.fail_after(WAIT):
        assert await run_boxed(boxed_square.name, boxed_square.fn, [7], {}) == 49
        with pytest.raises(TaskFailure) as raised:
            await run_boxed(boxed_square.name, boxed_square.fn, ["x"], {})
    assert raised.value.type_name == "TypeError"


CLUSTER = """
[cluster]
name = "c"
[[node]]
name = "worker"
listen = "127.0.0.1:5999"

[[boxed]]
name = "js"
node = "worker"
command = ["node", "worker.js"]
{boxed}
"""


@pytest.mark.parametrize(
    ("node", "boxed", "said"),
    [
        (
            "",
            "concurrenccy = 2",
            "no such key 'boxed[0].concurrenccy' (= 2): did you mean 'concurrency'?",
        ),
        ("", 'node = "elsewhere"', "key 'boxed[0].node': expected one of the nodes ['worker']"),
        ("", "memory_limit = -1", "key 'boxed[0].memory_limit': expected a number"),
        ("", "instances = 1.5", "key 'boxed[0].instances': expected a whole number"),
        ("", 'pool = "js"', "serves pool 'js', but node 'worker' hosts no task app"),
    ],
)
def test_a_wrong_boxed_table_is_an_error_naming_the_key(
    tmp_path: Path, node: str, boxed: str, said: str
) -> None:
    from actorctl import ConfigError
    from actorctl.cluster import load_cluster

    path = tmp_path / "cluster.toml"
    table = CLUSTER.format(boxed=boxed)
    if 'node = "elsewhere"' in boxed:
        table = table.replace('node = "worker"\ncommand', "command")
    path.write_text(table)
    with pytest.raises(ConfigError) as raised:
        load_cluster(path)
    assert said in str(raised.value)
    assert str(path) in str(raised.value)


def test_a_boxed_table_declares_a_supervised_worker(tmp_path: Path) -> None:
    from actorctl.cluster import load_cluster

    path = tmp_path / "cluster.toml"
    extra = 'args = ["--x"]\ncwd = "sub"\ninstances = 2\ntime_limit = 3\nmemory_limit = 64'
    path.write_text(CLUSTER.format(boxed=extra))
    config = load_cluster(path)
    [boxed] = config.boxed_specs(config.node("worker"))
    assert boxed.command == ("node", "worker.js", "--x")
    assert boxed.cwd == str(tmp_path / "sub")
    assert (boxed.instances, boxed.time_limit, boxed.memory_bytes) == (2, 3.0, 64 << 20)
    assert config.boxed_specs(config.node("worker"), pools=True) == []


async def test_a_command_that_does_not_exist_fails_to_start_naming_it(tmp_path: Path) -> None:
    boxed = Boxed(attrs.evolve(spec(tmp_path / "records"), command=("no-such-program-here",)))
    failed = pytest.RaisesExc(
        BoxedFailed, match=r"cannot run \['no-such-program-here'\]: No such file or directory"
    )
    with trio.fail_after(WAIT), pytest.RaisesGroup(failed, flatten_subgroups=True):
        await boxed.supervise()
