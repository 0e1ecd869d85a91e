"""Task state that outlives its node: delayed tasks, revokes, chord barriers and
results are kept in each node's SQLite store (docs/guarantees.md).

The module runs a cluster of its own (tests/support/running.py): ``actorctl
cluster up`` on a cluster.toml in a temporary directory, so that each node's
store is ``data/NODE/store.sqlite`` there. It has a services node (the pool's
router, the scheduler, the chord barrier) and one worker node, so that a task
can only run where the test kills.
A test kills a node with SIGKILL, by its pid, and waits until ``cluster up``
has started it again; then it counts what ran: every task records its id in a
file (tests/apps/state_app.py). Nothing may be lost; what ran twice is reported.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from actorctl import AskTimeout, TaskRevoked, chord
from actorctl.tasks.protocol._protocol import new_task_id
from tests.apps.state_app import app, fails, gated, note, runs, shut_gate, total
from tests.support.cli import ROOT
from tests.support.running import READY, WAIT, RunningCluster, counted

COUNTDOWN = 6.0  # seconds until a delayed task is due: past a node's restart


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    with RunningCluster(tmp_path_factory.mktemp("state")) as running:
        yield running


# -- the scheduler ----------------------------------------------------------------------


def test_delayed_tasks_run_once_although_their_scheduler_node_was_killed(
    cluster: RunningCluster,
) -> None:
    with app.connect(cluster.path):
        # Given delayed tasks that the scheduler holds (each send returns once
        # the scheduler's store has committed it)
        sent = time.time()
        results = [note.apply_async((i,), countdown=COUNTDOWN) for i in range(20)]
        ids = [result.id for result in results]
        held = cluster.rows("services", "delayed")
        assert len(held) == 20
        # When the services node is killed, and started again before they are due
        cluster.kill("services")
        restarted = time.time()
        # Then each runs, once, when due
        values = [result.get(timeout=COUNTDOWN + WAIT) for result in results]
    assert values == list(range(20))
    assert time.time() >= sent + COUNTDOWN
    lost, _ = counted(cluster, ids)
    assert lost == []
    # and the scheduler holds none of them any more
    cluster.wait_until("the held tasks deleted", lambda: not cluster.rows("services", "delayed"))
    print(f"services restarted {restarted - sent:.1f} s after the send ({COUNTDOWN:g} s due)")


# -- revokes ----------------------------------------------------------------------------


def test_a_revoke_outlives_a_sigkill_of_the_nodes_that_recorded_it(
    cluster: RunningCluster,
) -> None:
    with app.connect(cluster.path):
        # Given two task ids revoked before their tasks were sent (recorded by
        # the worker node and by the scheduler when revoke returns)
        plain_id, delayed_id = new_task_id(), new_task_id()
        app.control.revoke([plain_id, delayed_id])
        assert plain_id in cluster.rows("worker", "revoked")
        assert delayed_id in cluster.rows("services", "revoked")
        # When both nodes are killed and started again
        cluster.kill("worker")
        cluster.kill("services")
        # Then neither task runs: a worker and the scheduler still know the revokes
        plain = note.apply_async((1,), task_id=plain_id)
        delayed = note.apply_async((2,), task_id=delayed_id, countdown=0.5)
        other = note.delay(3)
        with pytest.raises(TaskRevoked):
            plain.get(timeout=WAIT)
        with pytest.raises(TaskRevoked):
            delayed.get(timeout=WAIT)
        assert other.get(timeout=WAIT) == 3  # (and a task not revoked runs)
    assert plain_id not in runs(cluster.records)
    assert delayed_id not in runs(cluster.records)


# -- chords -----------------------------------------------------------------------------


def test_a_half_complete_chord_outlives_a_sigkill_of_its_barrier_node(
    cluster: RunningCluster,
) -> None:
    name = new_task_id()
    with app.connect(cluster.path), contextlib.ExitStack() as gates:
        # Given a chord two of whose three header tasks are done, their results
        # committed in the barrier's store, the third waiting at a gate
        gates.enter_context(shut_gate(cluster.records, name))
        result = chord([note.s(1), note.s(2), gated.s(name, 3)])(total.s())

        def two_in() -> bool:
            row = cluster.rows("services", "chords").get(result.id)
            return row is not None and len(json.loads(row)["results"]) == 2

        cluster.wait_until("two results in the chord's barrier", two_in)
        # When the services node is killed and started again, then the third
        # task finishes
        cluster.kill("services")
        gates.close()  # the gate opens
        # Then the chord completes with every result, and its body ran once
        assert result.get(timeout=WAIT) == 6
    lost, _ = counted(cluster, [result.id])
    assert lost == []
    cluster.wait_until(
        "the barrier deleted", lambda: result.id not in cluster.rows("services", "chords")
    )


# -- results ----------------------------------------------------------------------------

FETCH = """\
import json, sys
from actorctl import AsyncResult, TaskFailed
from tests.apps.state_app import app
with app.connect(sys.argv[1]):
    answers = []
    for task_id in sys.argv[3:]:
        try:
            answers.append(["value", AsyncResult(task_id).get(timeout=float(sys.argv[2]))])
        except TaskFailed as exc:
            answers.append(["error", exc.type_name, str(exc)])
        except TimeoutError as exc:
            answers.append(["timeout", str(exc)])
print(json.dumps(answers))
"""


def fetch(cluster: RunningCluster, timeout: float, *ids: str) -> list[list[object]]:
    """Results by id, as another process (``python -c``) connected to the cluster gets them."""
    done = subprocess.run(
        [sys.executable, "-c", FETCH, str(cluster.path), str(timeout), *ids],
        env=cluster.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=READY,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers: list[list[object]] = json.loads(done.stdout.strip().splitlines()[-1])
    return answers


def test_a_result_is_fetched_by_id_from_another_process_after_its_worker_was_killed(
    cluster: RunningCluster,
) -> None:
    # Given a task that succeeded and one that failed
    with app.connect(cluster.path):
        good, bad = note.delay(42), fails.delay("no such key")
        assert good.get(timeout=WAIT) == 42
        with pytest.raises(LookupError):
            bad.get(timeout=WAIT)
    # Then another process gets each by its id (an unknown id times out)
    unknown = new_task_id()
    answers = fetch(cluster, WAIT, good.id, bad.id)
    assert answers[0] == ["value", 42]
    assert answers[1][:2] == ["error", "LookupError"]
    assert "no such key" in str(answers[1][2])
    assert fetch(cluster, 1.0, unknown)[0][0] == "timeout"
    # and so it does after the worker node that keeps them was killed and restarted
    cluster.kill("worker")
    assert fetch(cluster, WAIT, good.id, bad.id) == answers


async def test_a_result_is_fetched_by_id_in_trio_code(cluster: RunningCluster) -> None:
    # Given a task sent by one client, the result fetched by id by another
    async with app.aconnect(cluster.path):
        sent = await note.adelay(7)
        assert await sent.aget(timeout=WAIT) == 7
    async with app.aconnect(cluster.path):
        found = app.AsyncResult(sent.id)
        assert found.state == "PENDING"  # (in trio, only aget() asks the cluster)
        assert await found.aget(timeout=WAIT) == 7
        assert (found.state, found.ready()) == ("SUCCESS", True)
        with pytest.raises(AskTimeout):
            await app.AsyncResult(new_task_id()).aget(timeout=0.5)
