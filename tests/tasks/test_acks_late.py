"""``acks_late=False``: a task that is at-most-once (docs/celery.md,
docs/guarantees.md), against a real cluster.

The cluster is tests/support/running.py's (``actorctl cluster up``: a services
node with the pool's router, and one worker node, so a task can only run where
the test kills), running tests/apps/acks_app.py. A test holds tasks mid-run at a
gate, SIGKILLs the worker node, lets ``cluster up`` start it again, opens the
gate and counts the runs each task recorded: the default task runs again, the
at-most-once one does not.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

import pytest

from actorctl.tasks.protocol._protocol import new_task_id
from tests.apps.acks_app import app, at_most_once, begin
from tests.apps.state_app import runs, shut_gate
from tests.support.running import WAIT, RunningCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    with RunningCluster(tmp_path_factory.mktemp("acks"), app="tests.apps.acks_app:app") as running:
        yield running


def test_an_at_most_once_task_runs_and_answers_as_any_other(cluster: RunningCluster) -> None:
    name = new_task_id()
    with app.connect(cluster.path):
        # An at-most-once task; the same, delayed (through the scheduler); and
        # a default task made at-most-once for one call
        results = [
            at_most_once.delay(name, 7),
            at_most_once.apply_async((name, 8), countdown=0.2),
            begin.apply_async((name, 9), acks_late=False),
        ]
        assert [r.get(timeout=WAIT) for r in results] == [7, 8, 9]
    seen = Counter(runs(cluster.records))
    assert [seen[r.id] for r in results] == [1, 1, 1]


def test_a_worker_killed_mid_run_runs_an_acks_late_task_again_and_an_at_most_once_one_never(
    cluster: RunningCluster,
) -> None:
    name = new_task_id()
    with app.connect(cluster.path), contextlib.ExitStack() as gates:
        # Given a default (acks-late) task and an at-most-once one, both running
        # on the one worker node, held at a gate
        gates.enter_context(shut_gate(cluster.records, name))
        late = begin.delay(name, 1)
        once = at_most_once.delay(name, 2)
        started = {f"{late.id}:start", f"{once.id}:start"}
        cluster.wait_until("both tasks started", lambda: started <= set(runs(cluster.records)))
        # When the worker node is killed mid-run, and started again
        cluster.kill("worker")
        gates.close()  # the gate opens
        # Then the acks-late task runs again and answers (the pool's router
        # sent it again once the node was back)
        assert late.get(timeout=WAIT) == 1
        # And a task sent after that runs: the worker has taken what it was sent again
        after = at_most_once.delay(name, 3)
        assert after.get(timeout=WAIT) == 3
    seen = Counter(runs(cluster.records))
    print(
        f"acks-late: started {seen[f'{late.id}:start']}, finished {seen[late.id]}; "
        f"at-most-once: started {seen[f'{once.id}:start']}, finished {seen[once.id]}"
    )
    assert (seen[f"{late.id}:start"], seen[late.id]) == (2, 1)
    # the at-most-once task ran once, cut short by the kill, and never again
    assert (seen[f"{once.id}:start"], seen[once.id]) == (1, 0)
