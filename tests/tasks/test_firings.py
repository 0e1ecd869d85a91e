"""Every firing runs: a due time the beat fired before a SIGKILL of its node
runs once the node is back with its store (issue 34, item 2).

The cluster (``actorctl cluster up``, real processes) is tests/tasks/test_task_state.py's
with the app tests/apps/firings_app.py: a services node (the beat and the pool's
router) and one worker node whose worker runs one task at a time, each taking
``SLOW`` seconds, with one message of credit. A schedule due every ``EVERY``
seconds fires faster than the worker runs, so the router's backlog grows.
The test waits until the router holds a backlog, kills the services node with
SIGKILL right after a firing (it waits for the beat's ``fired`` log line
itself), lets ``cluster up`` start it again on the same store, and waits until
every due time the beat said it fired before the kill has run. Nothing may be
lost; what ran twice is reported.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from tests.apps.firings_app import SLOW
from tests.apps.state_app import runs
from tests.support.filewatch import FileWatch
from tests.support.running import WAIT, RunningCluster

EVERY = 0.2  # seconds between due times: faster than the worker runs them
BACKLOG = 4  # firings not yet run when the services node is killed, at least
PERIODIC = f"""
[[periodic]]
name = "often"
task = "f.tick"
every = {EVERY}
args = [1]
"""


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    running = RunningCluster(tmp_path_factory.mktemp("firings"))
    text = running.path.read_text()
    text = text.replace("tests.apps.state_app:app", "tests.apps.firings_app:app")
    running.path.write_text(text.replace('pools = ["celery"]', 'pools = ["slow"]') + PERIODIC)
    try:
        running.start()
        yield running
    finally:
        running.stop()


def fired(cluster: RunningCluster) -> list[str]:
    """The firings the services node's log says its beat made (task ids, in order)."""
    path = cluster.directory / "logs" / "services.log"
    found = []
    for line in path.read_text().splitlines() if path.exists() else []:
        if '"actorctl:beat:fired"' not in line:
            continue
        try:
            found.append(str(json.loads(line)["task_id"]))
        except ValueError:
            continue  # a line cut short: the node was writing it
    return found


def wait_on(watch: FileWatch, check: Callable[[], bool], timeout: float) -> bool:
    """Look again at each write to the watched directory until ``check`` holds
    (True) or ``timeout`` seconds have passed (False)."""
    deadline = time.monotonic() + timeout
    while not check():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        watch.wait_changed(left)
    return True


def test_every_due_time_fired_before_a_sigkill_of_its_node_runs(cluster: RunningCluster) -> None:
    logs = cluster.directory / "logs"
    # Given a schedule firing faster than its worker runs: its router holds a backlog
    with FileWatch(logs) as watch:

        def backlog() -> bool:  # the worker runs firings, and more wait
            ran = len(runs(cluster.records))
            return ran > 0 and len(fired(cluster)) - ran >= BACKLOG

        assert wait_on(watch, backlog, WAIT), f"no backlog of {BACKLOG} firings in {WAIT:g} s"
        # When the services node is killed right after its next firing
        before = len(fired(cluster))
        assert wait_on(watch, lambda: len(fired(cluster)) > before, WAIT), "no firing"
        fired_before: list[str] = []
        waiting: list[str] = []

        def dead() -> None:  # what it fired, and what of it had not run
            fired_before.extend(fired(cluster))
            ran = set(runs(cluster.records))
            waiting.extend(i for i in fired_before if i not in ran)

        killed = time.monotonic()
        cluster.kill("services", dead=dead)
    assert waiting, "the router held no backlog at the kill: the test would prove nothing"
    # (kill returned once cluster up had started it again, on the same store)
    # Then every due time it fired before the kill runs
    with FileWatch(cluster.records) as watch:
        done = wait_on(
            watch,
            lambda: set(fired_before) <= set(runs(cluster.records)),
            WAIT + SLOW * len(waiting),
        )
    recovery = f"{time.monotonic() - killed:.2f} s" if done else "never"
    ran = Counter(runs(cluster.records))
    lost = [i for i in fired_before if ran[i] == 0]
    twice = {i: n for i, n in ran.items() if n > 1}
    print(
        f"firings before the kill: {len(fired_before)}, not yet run at the kill: "
        f"{len(waiting)}, lost: {len(lost)} {lost}, ran twice: {len(twice)} {twice}, "
        f"all run after the kill: {recovery}"
    )
    assert lost == []
