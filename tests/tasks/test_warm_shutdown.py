"""A stop that loses and repeats nothing (warm shutdown), with real processes.

Each test runs ``actorctl cluster up`` on a cluster of tests/apps/shutdown_app.py
(mutual TLS, signed messages, development certificates, in its tmp_path),
whose task records each run in a file of its process (``begin:LABEL`` when it
begins, ``LABEL`` when it ends) and runs only while the test lets the tasks
of its process go (tests/apps/shutdown_app.py). Signals go only to processes the
test started, by PID. No test sleeps to let things happen: each waits for the
records, the output lines or the answers it expects, under a timeout.
"""

from __future__ import annotations

import collections
import os
import signal
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from tests.apps.shutdown_app import RUNS, app, hold
from tests.support.cluster_up import Output, Records, start_cluster_up
from tests.support.harness import free_port
from tests.support.shutdown import WAIT, Cluster

#: The workers' shutdown_grace (s): long, so that only a stop that waits for
#: nothing (or that kills) ends sooner than the test lets it.
GRACE = 40.0

CLUSTER = """\
[cluster]
name = "warm"
dev = true
controller = "127.0.0.1:{}"

[[node]]
name = "services"
listen = "127.0.0.1:{}"
actors = "tests.apps.shutdown_app:app"
services = true

[[node]]
name = "worker-1"
listen = "127.0.0.1:{}"
actors = "tests.apps.shutdown_app:app"
pools = ["work"]
shutdown_grace = {grace}

[[node]]
name = "worker-2"
listen = "127.0.0.1:{}"
actors = "tests.apps.shutdown_app:app"
pools = ["work"]
shutdown_grace = {grace}
"""

#: One worker node, reached directly (no services node, no router).
ALONE = """\
[cluster]
name = "cold"
dev = true
controller = "127.0.0.1:{}"

[[node]]
name = "worker-1"
listen = "127.0.0.1:{}"
actors = "tests.apps.shutdown_app:app"
pools = ["work"]
shutdown_grace = {grace}
"""


@asynccontextmanager
async def cluster_up(
    tmp_path: Path, nursery: trio.Nursery, text: str, nodes: tuple[str, ...]
) -> AsyncIterator[Cluster]:
    """``actorctl cluster up`` of ``text``, ready; stopped (if still running) after."""
    path = tmp_path / "cluster.toml"
    ports = [free_port() for _ in range(len(nodes) + 1)]
    path.write_text(text.format(*ports, grace=GRACE))
    records = tmp_path / "records"
    records.mkdir()
    process = await start_cluster_up(nursery, path, records, stderr=True)
    assert process.stdout is not None
    assert process.stderr is not None
    out, err = Output(process.stdout), Output(process.stderr)
    running = Cluster(path, process, out, Records(records), err=err)
    try:
        await running.wait_started(nodes, timeout=WAIT)
        yield running
    finally:
        running.release_all()
        running.records.close()
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)  # the cluster up this test started
            with trio.move_on_after(WAIT):
                await process.wait()
            if process.returncode is None:
                process.kill()


async def _reserved(cluster: Cluster, nodes: Iterable[str]) -> dict[str, int | None]:
    """How many tasks each of ``nodes`` holds and has not begun (``inspect reserved``)."""
    answers = await cluster.ask_controller("broadcast", "_tasks", "reserved", [], WAIT)
    held = {node: answers.get(node) for node in nodes}
    return {node: len(tasks) if isinstance(tasks, list) else None for node, tasks in held.items()}


async def _wait_taken(cluster: Cluster, taken: dict[str, int]) -> None:
    """Wait until each worker node took ``taken[node]`` tasks: their
    ``task_received`` receivers record each (``took:LABEL``)."""
    pids = {node: cluster.pids[node] for node in taken}
    took = await cluster.records.wait_until(
        lambda: all(cluster.took(pids[node]) == count for node, count in taken.items())
    )
    assert took, {node: cluster.took(pid) for node, pid in pids.items()}


async def test_one_sigterm_to_a_busy_worker_repeats_and_loses_nothing(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    nodes = ("services", "worker-1", "worker-2")
    async with cluster_up(tmp_path, nursery, CLUSTER, nodes) as cluster:
        one, two = cluster.pids["worker-1"], cluster.pids["worker-2"]
        # Given two workers that each run RUNS tasks and hold RUNS more that
        # wait for a run slot, every task held back by the test
        cluster.hold("worker-1")
        cluster.hold("worker-2")
        labels = [f"t{i}" for i in range(4 * RUNS)]
        async with app.aconnect(cluster.path):
            with trio.fail_after(WAIT):
                for label in labels:
                    await hold.aapply_async((label,))
            # (each took its RUNS that run and RUNS that wait for a slot, and
            # says so: a worker takes a task and holds it in one step)
            await _wait_taken(cluster, {"worker-1": 2 * RUNS, "worker-2": 2 * RUNS})
            reserved = await _reserved(cluster, ("worker-1", "worker-2"))
            assert reserved == {"worker-1": RUNS, "worker-2": RUNS}
            begun = await cluster.records.wait_until(
                lambda: sum(line.startswith("begin:") for line in cluster.runs(one)) == RUNS
            )
            assert begun, f"worker-1 began {cluster.runs(one)}"
            running_on_one = {line.removeprefix("begin:") for line in cluster.runs(one)}
            # and worker-2 free to run more at once (its own tasks run and end)
            cluster.release("worker-2")
            assert await cluster.records.wait_until(
                lambda: sum(not line.startswith("begin:") for line in cluster.runs(two)) == 2 * RUNS
            ), f"worker-2 recorded {cluster.runs(two)}"
            # When worker-1 gets one SIGTERM while its RUNS tasks run
            stopped_at = trio.current_time()
            os.kill(one, signal.SIGTERM)
            # Then the RUNS tasks it held and had not begun run on worker-2 at
            # once, while worker-1 still runs its own (held back still)
            assert await cluster.records.wait_until(
                lambda: sum(not line.startswith("begin:") for line in cluster.runs(two)) == 3 * RUNS
            ), f"worker-2 recorded {cluster.runs(two)}"
            began_on_one = cluster.runs(one)
            assert len(began_on_one) == RUNS, f"worker-1 began more after its stop: {began_on_one}"
            # And the tasks it runs finish there, within its grace, and it
            # exits by itself (code 0: not killed), to be started again
            cluster.release("worker-1")
            line = await cluster.err.until("node worker-1 stopped", timeout=GRACE + WAIT)
            took = trio.current_time() - stopped_at
            assert "exited with code 0" in line, line
            assert took < GRACE, f"worker-1 took {took:.1f} s to stop"
            await cluster.wait_ready("worker-1")
            # And after it, more tasks run, each once, as the rest did
            with trio.fail_after(WAIT):
                results = [await hold.aapply_async((f"after{i}",)) for i in range(2)]
                assert [await r.aget(timeout=WAIT) for r in results] == ["after0", "after1"]
        ended = collections.Counter(
            line
            for path in cluster.records.directory.glob("*.log")
            for line in cluster.runs(int(path.stem))
            if not line.startswith("begin:")
        )
        lost = [label for label in labels if not ended[label]]
        twice = {label: n for label, n in ended.items() if n > 1}
        print(
            f"{len(labels)} tasks: {len(lost)} lost, {len(twice)} ran twice; "
            f"worker-1 stopped {took:.1f} s after its SIGTERM"
        )
        assert not lost, f"never ran: {lost} (logs: {cluster.path.parent / 'logs'})"
        assert not twice, f"ran twice: {twice}"
        # The tasks worker-1 ran ended there; all the others, on worker-2.
        ended_on_one = {line for line in cluster.runs(one) if not line.startswith("begin:")}
        ended_on_two = {line for line in cluster.runs(two) if not line.startswith("begin:")}
        assert ended_on_one == running_on_one
        assert set(labels) - running_on_one <= ended_on_two
        log = (cluster.path.parent / "logs" / "cluster.log").read_text()
        assert "actorctl:foreman:killed" not in log


async def test_a_second_sigint_stops_cold_with_exit_130_and_no_traceback(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    async with cluster_up(tmp_path, nursery, ALONE, ("worker-1",)) as cluster:
        one = cluster.pids["worker-1"]
        # Given a worker that runs a task, held back (so a warm stop would wait
        # out its grace for it)
        cluster.hold("worker-1")
        async with app.aconnect(cluster.path):
            await hold.aapply_async(("long",))
            assert await cluster.records.wait_until(lambda: cluster.runs(one) == ["begin:long"])
            # When cluster up gets SIGINT (a warm stop begins), then SIGINT again
            cluster.process.send_signal(signal.SIGINT)
            await cluster.out.until("stopping: nodes in reverse order", timeout=WAIT)
            asked = trio.current_time()
            cluster.process.send_signal(signal.SIGINT)
            with trio.fail_after(WAIT):
                code = await cluster.process.wait()
            took = trio.current_time() - asked
        err = "\n".join(await cluster.err.rest())
        # Then it stops cold (without waiting out the grace), exits 130, and
        # says so in its own words: no traceback, no trio warning, no click abort
        print(f"exit {code} {took:.1f} s after the second SIGINT; stderr:\n{err}")
        assert code == 130, err
        assert took < GRACE
        assert "stopping now (cold)" in err
        assert "stopped cold" in err
        for raw in ("Traceback", "RuntimeWarning", "Aborted!", "deliver_cancel"):
            assert raw not in err, err
        assert "long" not in cluster.runs(one)  # cancelled, never ended
        log = (cluster.path.parent / "logs" / "cluster.log").read_text()
        assert "actorctl:foreman:killed" not in log
