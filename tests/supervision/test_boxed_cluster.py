"""Boxed workers in a real cluster started by ``cluster up`` (docs/boxed.md).

One cluster for the module (examples/boxed/boxed.toml, plus a pool served by
tests/apps/boxed_faults.py): Node.js, C (built here with the system compiler), POSIX
shell and the Python reference worker each answer tasks sent with
``delay().get()`` (or ``app.send_task`` for the handlers that exist only in
their process), and an error raised in each reaches the caller with its type
and message. The fault pool's processes crash under tasks (exit 1, SIGKILL
from the test) and hang past a task's time limit: each task records its
execution in a file, and the tests count what was lost (0) and what ran twice.
A language whose program is not installed (node, cc) is skipped, naming it.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from examples.boxed.app import add, app, call_every_pool, cluster_text, fail

from actorctl import TaskFailed
from tests.support.cli import run_cli
from tests.support.running import RunningCluster

ROOT = Path(__file__).resolve().parents[2]
FAULTS = Path(__file__).parents[1] / "apps" / "boxed_faults.py"
WAIT = 30.0  # seconds any one result may take on a loaded 2-core machine

FAULT_POOL = f"""
[[boxed]]
name = "faults"
node = "worker"
pool = "faults"
command = ["{sys.executable}", "{FAULTS}"]
grace = 0.5
backoff = 0.01
max_restarts = 20
within = 30.0

[[boxed]]
name = "slowback"
node = "worker"
pool = "slowback"
command = ["{sys.executable}", "{FAULTS}"]
grace = 0.5
backoff = 2.0
max_restarts = 20
within = 30.0
"""
#: The fault worker's handlers, as its hello lists them.
FAULT_HANDLERS = "big, block, crash, garbage, hog, hold, mute, note, request, spin"

MISSING = {
    "js": None if shutil.which("node") else "node (Node.js) is not installed",
    "c": None if shutil.which("cc") else "cc (a C compiler) is not installed",
}


def without(text: str, pool: str) -> str:
    """``text`` without the [[boxed]] table of ``pool``."""
    head, *tables = text.split("[[boxed]]")
    kept = [t for t in tables if f'pool = "{pool}"' not in t]
    return "[[boxed]]".join([head, *kept])


class Cluster:
    def __init__(self, path: Path, records: Path, holding: Path) -> None:
        self.path = path
        self.records = records
        self.holding = holding  # a named pipe: tests/apps/boxed_faults.py `hold` writes there

    def runs(self) -> list[tuple[str, int]]:
        if not self.records.exists():
            return []
        lines = [line.split() for line in self.records.read_text().splitlines() if line]
        return [(key, int(pid)) for key, pid in lines]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("boxed")
    records = directory / "boxed-runs"  # (RunningCluster's records/ is the state app's)
    records.touch()
    holding = directory / "holding"
    os.mkfifo(holding)
    env = {"BOXED_RECORDS": str(records), "BOXED_HOLDING": str(holding)}
    text = cluster_text().replace('"python"]', '"python", "faults", "slowback"]') + FAULT_POOL
    for pool, missing in MISSING.items():
        if missing is not None:
            text = without(text, pool)
    if MISSING["c"] is None:  # build the C worker here, with the system compiler
        binary = directory / "worker-c"
        source = ROOT / "examples" / "boxed" / "worker.c"
        subprocess.run(["cc", "-O2", "-o", str(binary), str(source)], check=True)
        env["BOXED_C_WORKER"] = str(binary)
    with RunningCluster(directory, text=text, env=env) as running, app.connect(running.path):
        yield Cluster(running.path, records, holding)


def needs(pool: str) -> None:
    missing = MISSING.get(pool)
    if missing is not None:
        pytest.skip(missing)


@pytest.mark.parametrize("pool", ["js", "c", "sh"])
def test_a_foreign_worker_answers_tasks_through_delay_get(cluster: Cluster, pool: str) -> None:
    needs(pool)
    # Given handlers that exist only in the foreign process, known by name
    adding = app.by_name("add", pool)
    # When tasks are sent, several at once, Then each gets its answer
    results = [adding.delay(i, 2 * i) for i in range(10)]
    assert [r.get(timeout=WAIT) for r in results] == [3 * i for i in range(10)]
    assert app.send_task("greet", ["world"], pool=pool).get(timeout=WAIT) == "hello, world"


def test_the_python_reference_worker_answers_boxed_tasks_through_delay_get(
    cluster: Cluster,
) -> None:
    results = [add.delay(i, 2 * i) for i in range(10)]
    assert [r.get(timeout=WAIT) for r in results] == [3 * i for i in range(10)]


@pytest.mark.parametrize(
    ("pool", "type_name"),
    [("js", "RangeError"), ("c", "CError"), ("sh", "ShellError"), ("python", "ValueError")],
)
def test_an_error_raised_in_the_worker_reaches_the_caller_with_its_type_and_message(
    cluster: Cluster, pool: str, type_name: str
) -> None:
    needs(pool)
    # When the handler raises (throws, or answers an error)
    result = fail.delay("on purpose") if pool == "python" else None
    if result is None:
        result = app.send_task("fail", ["on purpose"], pool=pool)
    # Then the caller's get() raises it, with its type name and message
    with pytest.raises(TaskFailed) as raised:
        result.get(timeout=WAIT)
    assert raised.value.type_name == type_name
    assert raised.value.message == "on purpose"
    if pool == "python":
        assert isinstance(raised.value, ValueError)


def test_tasks_whose_process_exits_run_again_on_the_restarted_process(cluster: Cluster) -> None:
    # Given tasks whose process exits 1 the first time each runs
    keys = [f"exit-{i}" for i in range(6)]
    results = [app.send_task("crash", [key], pool="faults") for key in keys]
    # Then every one is answered: it ran again, on a restarted process
    assert [r.get(timeout=WAIT) for r in results] == keys
    ran = Counter(key for key, _ in cluster.runs())
    lost = [key for key in keys if ran[key] == 0]
    twice = [key for key in keys if ran[key] > 1]
    print(f"lost: {len(lost)}, ran twice or more: {len(twice)} of {len(keys)}")
    assert lost == []
    assert len({pid for key, pid in cluster.runs() if key in keys}) >= 2


def test_a_task_whose_process_is_killed_with_sigkill_runs_again(cluster: Cluster) -> None:
    # Given a task in flight on a process (it holds there the first time, and
    # says so on a named pipe: the test waits for that, not on the clock)
    # (read and write ends both held here: no end-of-file before the worker writes)
    pipe = os.open(cluster.holding, os.O_RDWR)
    try:
        result = app.send_task("hold", ["killed"], pool="faults")
        readable, _, _ = select.select([pipe], [], [], WAIT)
        assert readable, f"the task did not start holding within {WAIT:g} s"
        key, pid_text = os.read(pipe, 256).decode().split()
    finally:
        os.close(pipe)
    pid = int(pid_text)
    assert key == "killed"
    assert [run for run in cluster.runs() if run[0] == "killed"] == [("killed", pid)]
    # When the test kills that process with SIGKILL
    os.kill(pid, signal.SIGKILL)
    # Then the task runs again, on the restarted process, and is answered
    assert result.get(timeout=WAIT) == "killed"
    again = [p for key, p in cluster.runs() if key == "killed"]
    assert len(again) == 2
    assert again[1] != pid
    print("lost: 0, ran twice: 1 of 1")


def test_a_task_that_hangs_past_its_hard_time_limit_fails_and_its_process_is_restarted(
    cluster: Cluster,
) -> None:
    # When a task spins past its hard time limit
    started = time.monotonic()
    result = app.send_task("spin", [], pool="faults", time_limit=1.0)
    # Then its caller gets a time-limit error
    with pytest.raises(TaskFailed) as raised:
        result.get(timeout=WAIT)
    assert raised.value.type_name == "TimeLimitExceeded"
    assert time.monotonic() - started < WAIT
    # And a restarted process serves the next task
    assert app.send_task("note", ["after-spin"], pool="faults").get(timeout=WAIT) == "after-spin"


def test_a_task_redelivered_after_a_restart_backoff_past_its_time_limit_runs_again(
    cluster: Cluster,
) -> None:
    # Given a pool whose processes restart 2 s after a crash, and a task with
    # a 1 s hard time limit that crashes its process the first time it runs
    started = time.monotonic()
    result = app.send_task("crash", ["backoff"], pool="slowback", time_limit=1.0)
    # Then it runs again on the restarted process and is answered: its time
    # limit counts from when a process takes it, not the wait for the restart
    assert result.get(timeout=WAIT) == "backoff"
    took = time.monotonic() - started
    pids = [pid for key, pid in cluster.runs() if key == "backoff"]
    print(f"lost: 0, ran twice: 1 of 1; answered after {took:.2f} s (limit 1.0 s per run)")
    assert took >= 2.0
    assert len(pids) == 2
    assert pids[0] != pids[1]


def test_a_handler_the_boxed_worker_did_not_list_fails_naming_what_it_listed(
    cluster: Cluster,
) -> None:
    # When a task names a handler the pool's worker did not list in its hello
    result = app.send_task("nosuch", [1], pool="faults")
    # Then it fails with UnknownHandler, naming the handlers the hello listed
    with pytest.raises(TaskFailed) as raised:
        result.get(timeout=WAIT)
    assert raised.value.type_name == "UnknownHandler"
    assert raised.value.message == (
        "pool 'faults': boxed worker 'faults' serves no handler 'nosuch' "
        f"(its hello listed: {FAULT_HANDLERS})"
    )
    # And it never reached the process
    assert "nosuch" not in {key for key, _ in cluster.runs()}
    # And a pool whose worker runs the app's own boxed=True tasks names the
    # app's tasks, as any pool does (the app defines them)
    with pytest.raises(TaskFailed) as raised:
        app.send_task("nosuch", [1], pool="python").get(timeout=WAIT)
    assert raised.value.type_name == "UnknownTask"
    assert raised.value.message.startswith("pool 'python' has no task 'nosuch' (it has: ")


def test_cluster_status_shows_the_boxed_processes(cluster: Cluster) -> None:
    shown = run_cli("cluster", "status", cluster.path, timeout=60, check=True).stdout
    [line] = [line for line in shown.splitlines() if "sh/1" in line]
    assert "process  running" in line
    assert " pid " in line
    assert "in flight 0" in line
    assert any("sh  boxed  running" in line for line in shown.splitlines())


def test_the_example_calls_every_pool(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    for pool, missing in MISSING.items():
        if missing is not None:
            pytest.skip(f"examples/boxed/app.py calls {pool}: {missing}")
    call_every_pool()
    said = capsys.readouterr().out
    assert "python: add.delay(1, 2).get() == 3" in said
    for pool, error in (("js", "RangeError"), ("c", "CError"), ("sh", "ShellError")):
        assert f"{pool}: add(1, 2) == 3; greet('world') == 'hello, world'" in said
        assert f"{pool}: fail('on purpose') raised {error}: on purpose" in said
