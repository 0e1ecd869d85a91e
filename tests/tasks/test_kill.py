"""Nothing lost when a process is killed: fault tests that count.

Each test brings up its own task cluster with ``actorctl cluster up`` (a services
node, two worker nodes of tests/apps/kill_app.py; mutual TLS and signed messages with
development certificates; written into its tmp_path), sends tasks that record
each of their runs in a file, kills a process it started (SIGKILL, by its PID)
while tasks are in flight, and counts: every task whose send returned has run
(0 lost); some ran twice (at-least-once), which is reported and bounded.

No test sleeps to let things happen: each waits for the records it expects (a
datagram wakes it at each one) under a timeout, and what is missing then is
what was lost. Node logs are in ``<tmp_path>/logs/``.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path

import attrs
import pytest
import trio

from actorctl import chain, chord
from tests.apps.kill_app import (
    HOLD,
    app,
    gather,
    record,
    starts,
    tight_record,
    tight_step,
)
from tests.support.cli import ROOT
from tests.support.cluster_up import (
    START,
    WAIT,
    ClusterUp,
    Output,
    Records,
    records_env,
    start_cluster_up,
)
from tests.support.harness import free_port

#: Tasks the killed caller sends: the issue says 10,000, which take 25 s to send
#: and run on an idle 2-core machine, and over 80 s on a loaded one.
CALLER_TASKS = 5_000

CLUSTER = """\
[cluster]
name = "kill"
dev = true
controller = "127.0.0.1:{}"

[[node]]
name = "services"
listen = "127.0.0.1:{}"
actors = "tests.apps.kill_app:app"
services = true

[[node]]
name = "worker-1"
listen = "127.0.0.1:{}"
actors = "tests.apps.kill_app:app"
pools = ["work", "tight"]

[[node]]
name = "worker-2"
listen = "127.0.0.1:{}"
actors = "tests.apps.kill_app:app"
pools = ["work", "tight"]
"""


@attrs.define
class Cluster(ClusterUp):
    """A task cluster of tests/apps/kill_app.py run by ``actorctl cluster up``."""

    def hold(self, what: str = HOLD) -> None:
        """Hold every task back before it runs (HOLD), or a node from starting
        (``starts(NODE)``), until :meth:`release` (see tests/apps/kill_app.py)."""
        self.lock(what, what)

    async def pause(self) -> None:
        """Hold the tasks back again (once those past the hold have recorded)."""
        await trio.to_thread.run_sync(self.hold, abandon_on_cancel=True)

    def release(self, what: str = HOLD) -> None:
        """Let the tasks run (HOLD), or the node start (``starts(NODE)``)."""
        ClusterUp.release(self, what)


@pytest.fixture
async def cluster(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[Cluster]:
    path = tmp_path / "cluster.toml"
    path.write_text(CLUSTER.format(*(free_port() for _ in range(4))))
    records = tmp_path / "records"
    records.mkdir()
    process = await start_cluster_up(nursery, path, records)
    assert process.stdout is not None
    running = Cluster(path, process, Output(process.stdout), Records(records))
    try:
        await running.wait_started(("services", "worker-1", "worker-2"))
        yield running
    finally:
        running.release_all()
        running.records.close()
        await _down(running)


async def _down(cluster: Cluster) -> None:
    """SIGTERM to cluster up (it stops its nodes warm, as ``cluster down``
    asks it to), a second one (its cold stop) if that has not ended it, and
    SIGKILL to it only if that fails too."""
    for _ in range(2):
        if cluster.process.returncode is not None:
            return
        cluster.process.terminate()
        with trio.move_on_after(START):
            await cluster.process.wait()
            return
    cluster.process.kill()


async def _caller(
    nursery: trio.Nursery, cluster: Cluster, *args: str
) -> tuple[trio.Process, Output]:
    """A caller process of tests/apps/kill_app.py (see its docstring for ``args``)."""
    command = [sys.executable, "-m", "tests.apps.kill_app", str(cluster.path), *args]
    process: trio.Process = await nursery.start(
        functools.partial(
            trio.run_process,
            command,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            check=False,
            env=records_env(cluster.records.directory),
        )
    )
    assert process.stdout is not None
    return process, Output(process.stdout)


def _sent(lines: list[str]) -> set[str]:
    """The labels (or ids) of the tasks whose send returned in a caller, as it printed them."""
    return {line.split()[1] for line in lines if line.startswith("sent ") and line != "sent all"}


# -- callers killed ---------------------------------------------------------------------


async def test_a_caller_killed_with_thousands_of_tasks_in_flight_loses_none(
    cluster: Cluster, nursery: trio.Nursery
) -> None:
    tasks = CALLER_TASKS
    # Given a caller that sent thousands of recording tasks, 100 at a time,
    # none of which has run yet (the test holds them back)
    cluster.hold()
    caller, out = await _caller(nursery, cluster, "many", str(tasks), "100")
    started = trio.current_time()
    await out.until("sent all", timeout=WAIT)
    sent_in = trio.current_time() - started
    # When it is killed as soon as its last send returned
    caller.kill()
    await caller.wait()
    sent = _sent(await out.rest())
    print(f"{len(sent)} sent in {sent_in:.1f} s, {len(cluster.records.read())} of them run")
    assert len(sent) == tasks
    assert not cluster.records.counts  # all of them in flight
    cluster.release()
    started = trio.current_time()
    # Then another caller's tasks still run, and their results come back
    async with app.aconnect(cluster.path):
        with trio.fail_after(WAIT):
            results = [await record.aapply_async((f"t{i}",)) for i in range(200)]
            values = [await result.aget(timeout=WAIT) for result in results]
    assert values == [f"t{i}" for i in range(200)]
    # And every task of the killed caller whose send returned has run
    count = await cluster.records.wait_for(sent)
    print(f"run in {trio.current_time() - started:.1f} s")
    count.check("the killed caller's tasks", cluster.logs, max_duplicates=tasks // 10)


async def test_a_caller_killed_right_after_delay_returned_still_gets_its_task_run(
    cluster: Cluster, nursery: trio.Nursery
) -> None:
    # Given a caller (plain code) that sends one task with delay()
    caller, out = await _caller(nursery, cluster, "one", "only")
    await out.until("sent ", timeout=START)
    # When it is killed the moment delay() returned
    caller.kill()
    await caller.wait()
    # Then the task runs all the same
    count = await cluster.records.wait_for(["only"])
    count.check("the one task", cluster.logs, max_duplicates=1)


# -- more work than the pools hold ------------------------------------------------------


async def test_callbacks_and_chains_beyond_what_routers_and_mailboxes_hold_all_run(
    cluster: Cluster,
) -> None:
    parents, chains, steps = 1000, 200, 3
    expected = [f"p{i}" for i in range(parents)] + [f"l{i}" for i in range(parents)]
    expected += [f"s{c}-{s}" for c in range(chains) for s in range(steps)]
    async with app.aconnect(cluster.path):
        # Given 1,000 tasks with a callback each and 200 chains, sent to a pool
        # of two workers that each run 2 tasks at once and hold 20 (held back
        # until all are sent: the router holds the rest)
        cluster.hold()
        with trio.fail_after(WAIT):
            async with trio.open_nursery() as senders:
                for sender in range(10):
                    senders.start_soon(_send_linked, range(sender, parents, 10))
            results = [await _chain(f"s{c}", steps).aapply_async() for c in range(chains)]
        # When they run (each parent sends a callback, each step the next one,
        # through the full router to the full workers)
        cluster.release()
        # Then each chain's result comes back
        with trio.fail_after(WAIT):
            values = [await result.aget(timeout=WAIT) for result in results]
        assert values == [f"s{c}-{steps - 1}" for c in range(chains)]
    # And every parent, every callback and every chain step ran
    count = await cluster.records.wait_for(expected)
    count.check("parents, callbacks, chain steps", cluster.logs, max_duplicates=len(expected) // 10)


def _chain(label: str, steps: int) -> chain:
    """A chain of ``steps`` recording tasks, labelled ``LABEL-0``, ``LABEL-1``..."""
    return chain(
        tight_record.s(f"{label}-0"), *(tight_step.s(f"{label}-{s}") for s in range(1, steps))
    )


async def _send_linked(indexes: Iterable[int]) -> None:
    """Tasks ``pI`` with a callback ``lI`` each."""
    for i in indexes:
        await tight_record.aapply_async((f"p{i}",), link=tight_step.s(f"l{i}"))


# -- nodes killed -----------------------------------------------------------------------


async def test_a_worker_node_killed_with_a_thousand_tasks_in_flight_loses_none(
    cluster: Cluster,
) -> None:
    tasks = 1000
    labels = [f"w{i}" for i in range(tasks)]
    # Given 1,000 tasks sent (held back until all are sent)
    cluster.hold()
    async with app.aconnect(cluster.path), trio.open_nursery() as senders:
        for sender in range(10):
            senders.start_soon(_send, labels[sender::10])
    # When worker-1 is killed while it runs them
    victim = cluster.pids["worker-1"]
    await _kill_mid_flight(cluster, "worker-1", tasks, lambda: cluster.records.of_process(victim))
    # Then it is restarted, and every task ran (some twice: those it ran and
    # could not settle)
    await cluster.wait_ready("worker-1")
    count = await cluster.records.wait_for(labels)
    count.check("tasks", cluster.logs, max_duplicates=tasks // 4)


async def test_a_worker_node_that_stays_down_has_its_tasks_moved_to_the_other_one(
    cluster: Cluster,
) -> None:
    tasks = 1000
    labels = [f"d{i}" for i in range(tasks)]
    # Given 1,000 tasks sent (held back until all are sent)
    cluster.hold()
    async with app.aconnect(cluster.path), trio.open_nursery() as senders:
        for sender in range(10):
            senders.start_soon(_send, labels[sender::10])
    # When worker-1 is killed while it runs them, and kept from starting again
    cluster.hold(starts("worker-1"))
    victim = cluster.pids["worker-1"]
    await _kill_mid_flight(cluster, "worker-1", tasks, lambda: cluster.records.of_process(victim))
    killed = trio.current_time()
    # Then every task runs while it is down: those it held, on worker-2 (the
    # router moves them once worker-1 has been unreachable for the connect
    # timeout)
    count = await cluster.records.wait_for(labels)
    print(f"all run {trio.current_time() - killed:.1f} s after the kill")
    count.check("tasks", cluster.logs, max_duplicates=tasks // 4)
    # And worker-1 starts again once it may
    cluster.release(starts("worker-1"))
    await cluster.wait_ready("worker-1")


async def _send(labels: Iterable[str]) -> None:
    with trio.fail_after(WAIT):
        for label in labels:
            await record.aapply_async((label,))


async def test_the_services_node_killed_with_chains_and_callbacks_in_flight_loses_none(
    cluster: Cluster,
) -> None:
    chains, steps, linked = 100, 5, 100
    expected = [f"s{c}-{s}" for c in range(chains) for s in range(steps)]
    expected += [f"p{i}" for i in range(linked)] + [f"l{i}" for i in range(linked)]
    # Given 100 five-step chains and 100 tasks with a callback, sent (held
    # back until all are sent)
    cluster.hold()
    async with app.aconnect(cluster.path):
        with trio.fail_after(WAIT):
            for c in range(chains):
                await _chain(f"s{c}", steps).aapply_async()
            await _send_linked(range(linked))
    # When the services node (the pools' routers) is killed while they run
    await _kill_mid_flight(cluster, "services", len(expected), lambda: len(cluster.records.counts))
    await cluster.wait_ready("services")
    # Then, once it is restarted, every chain step and every callback ran
    count = await cluster.records.wait_for(expected)
    count.check("chain steps and callbacks", cluster.logs, max_duplicates=len(expected) // 4)


async def test_the_services_node_killed_with_chords_in_flight_loses_none(
    cluster: Cluster,
) -> None:
    chords, members = 20, 5
    expected = [f"m{c}-{m}" for c in range(chords) for m in range(members)]
    expected += [f"b{c}" for c in range(chords)]
    # Given 20 chords of 5 tasks each, sent (held back until all are sent)
    cluster.hold()
    async with app.aconnect(cluster.path):
        with trio.fail_after(WAIT):
            for c in range(chords):
                header = [tight_record.si(f"m{c}-{m}") for m in range(members)]
                await chord(header, gather.s(f"b{c}")).aapply_async()
    # When the services node (the routers and the chord barrier) is killed
    # while they run
    await _kill_mid_flight(cluster, "services", len(expected), lambda: len(cluster.records.counts))
    await cluster.wait_ready("services")
    # Then, once it is restarted, every chord's body ran
    count = await cluster.records.wait_for(expected)
    count.check("chord members and bodies", cluster.logs, max_duplicates=len(expected) // 4)


async def _kill_mid_flight(
    cluster: Cluster, node: str, expected: int, ran: Callable[[], int]
) -> None:
    """Let the held work go until ``ran()`` says 10 tasks ran, hold it again,
    kill ``node`` (by then, only the tasks that were past the hold have run),
    and let the work go again."""
    records = cluster.records
    cluster.release()
    assert await records.wait_until(lambda: ran() >= 10)
    paused = trio.current_time()
    await cluster.pause()
    paused = trio.current_time() - paused
    cluster.kill(node)
    done = len(records.read())
    print(f"{node} killed with {expected - done} of {expected} tasks not yet run")
    print(f"(the work was held again within {paused:.2f} s)")
    assert done < expected, "the work ended before the kill: nothing was in flight"
    cluster.release()
