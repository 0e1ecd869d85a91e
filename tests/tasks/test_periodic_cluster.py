"""Periodic tasks on a real cluster (``actorctl cluster up``, real processes):
a SIGKILL of the services node across a due time neither repeats nor silently
skips a firing, both ways of ``catch_up``; and ``actorctl schedule list``.

The cluster is tests/support/running.py's (a services node, one worker node,
the task app tests/apps/state_app.py whose task ``note`` records the id of every
run), with two ``[[periodic]]`` tables every few seconds: one that catches up,
one that skips. A firing's task id is its schedule's name and due time, so the
records say which due time ran, and how often.
"""

from __future__ import annotations

import datetime
import json
import math
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from actorctl.tasks.services._periodic import firing_id
from tests.apps.state_app import runs
from tests.support.cli import run_cli
from tests.support.running import WAIT, RunningCluster

EVERY = 8.0  # seconds between due times: room for a node's restart between two
PERIODIC = """
[[periodic]]
name = "catch-up"
task = "s.note"
every = {every}
args = [1]

[[periodic]]
name = "skip"
task = "s.note"
every = {every}
args = [2]
catch_up = false
tz = "Europe/Paris"
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    running = RunningCluster(tmp_path_factory.mktemp("periodic"))
    with running.path.open("a") as file:
        file.write(PERIODIC.format(every=EVERY))
    with running:
        yield running


def fired(cluster: RunningCluster, name: str) -> Counter[str]:
    """How often each firing of ``name`` ran (by task id)."""
    return Counter(i for i in runs(cluster.records) if i.startswith(f"periodic:{name}@"))


def grid(first: str, last: str) -> list[str]:
    """Every firing id of one schedule from ``first`` to ``last`` (both run)."""
    name, _, _ = first.removeprefix("periodic:").partition("@")
    start, end = (due_of(first), due_of(last))
    return [firing_id(name, start + i * EVERY) for i in range(round((end - start) / EVERY) + 1)]


def due_of(task_id: str) -> float:
    text = task_id.partition("@")[2].removesuffix("Z")
    return datetime.datetime.fromisoformat(text).replace(tzinfo=datetime.UTC).timestamp()


def test_a_sigkill_across_a_due_time_neither_repeats_nor_silently_skips_a_firing(
    cluster: RunningCluster,
) -> None:
    # Given both schedules firing (each has run at least once)
    cluster.wait_until(
        "both schedules fired", lambda: fired(cluster, "catch-up") and fired(cluster, "skip")
    )
    # When the services node is killed just before a due time, and started again after it
    due = math.ceil(time.time() / EVERY) * EVERY
    if due - time.time() < 2.0:
        due += EVERY
    time.sleep(due - 0.2 - time.time())  # to a deadline: the kill's moment
    cluster.kill("services")
    after = due + EVERY
    cluster.wait_until(
        "a firing after the restart",
        lambda: (
            firing_id("catch-up", after) in fired(cluster, "catch-up")
            and firing_id("skip", after) in fired(cluster, "skip")
        ),
        WAIT + 2 * EVERY,
    )
    # Then catch_up = true: every due time ran exactly once, the missed one included
    caught = fired(cluster, "catch-up")
    expected = grid(min(caught, key=due_of), firing_id("catch-up", after))
    lost = [i for i in expected if caught[i] == 0]
    twice = {i: n for i, n in caught.items() if n > 1}
    assert (lost, twice) == ([], {})
    assert firing_id("catch-up", due) in caught
    # And catch_up = false: the missed due time did not run, every other ran once,
    skipped = fired(cluster, "skip")
    expected = grid(min(skipped, key=due_of), firing_id("skip", after))
    lost = [i for i in expected if skipped[i] == 0]
    twice = {i: n for i, n in skipped.items() if n > 1}
    assert (lost, twice) == ([firing_id("skip", due)], {})
    # and the services node's log says it skipped one
    lines = (cluster.directory / "logs" / "services.log").read_text().splitlines()
    said = [json.loads(line) for line in lines if '"actorctl:beat:skipped"' in line]
    assert [(m["schedule"], m["skipped"], m["last_skipped"]) for m in said] == [("skip", 1, due)]
    # And the last firings are committed in the services node's store
    rows = {k: json.loads(v) for k, v in cluster.rows("services", "beat").items()}
    assert rows["catch-up"]["last"] >= after


def schedule_list(cluster: RunningCluster, *options: str) -> str:
    done = run_cli("schedule", "list", cluster.path, *options, env=cluster.env, timeout=WAIT)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_schedule_list_shows_each_schedule_with_its_last_and_next_firing(
    cluster: RunningCluster,
) -> None:
    cluster.wait_until(
        "both schedules fired", lambda: fired(cluster, "catch-up") and fired(cluster, "skip")
    )
    # When the schedules are listed as JSON
    rows = {row["name"]: row for row in json.loads(schedule_list(cluster, "--json"))}
    # Then each has its kind, expression, timezone, last and next firing
    assert sorted(rows) == ["catch-up", "skip"]
    skip = rows["skip"]
    assert (skip["kind"], skip["schedule"], skip["tz"], skip["catch_up"]) == (
        "every", "every 8s", "Europe/Paris", False,
    )  # fmt: skip
    assert skip["next"] - skip["last"] in (EVERY, 2 * EVERY)
    assert skip["next_text"].endswith(("+01:00", "+02:00"))
    assert rows["catch-up"]["tz"] == "UTC"
    # And as a table, one line per schedule under a header
    lines = schedule_list(cluster).splitlines()
    assert lines[0].split() == ["NAME", "SCHEDULE", "TZ", "LAST", "NEXT", "TASK"]
    assert [line.split()[0] for line in lines[1:]] == ["catch-up", "skip"]
    assert lines[2].split()[1:4] == ["every", "8s", "Europe/Paris"]
