"""``actorctl control`` against a real cluster (``actorctl cluster up``, real
processes, mutual TLS, signed messages), driven as a user drives it.

The cluster runs tests/apps/limits_app.py on a services node and one worker node;
every run writes a line to ``runs.jsonl`` in the records directory, and the
tests count lost and doubled runs from it.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.apps import limits_app
from tests.support.cli import run_cli
from tests.support.harness import free_port
from tests.support.running import WAIT, RunningCluster

CLUSTER = """
[cluster]
name = "control"
dev = true
controller = "127.0.0.1:{controller}"

[[node]]
name = "services"
listen = "127.0.0.1:{services}"
actors = "tests.apps.limits_app:app"
services = true

[[node]]
name = "worker"
listen = "127.0.0.1:{worker}"
actors = "tests.apps.limits_app:app"
pools = ["limited", "ordered"]
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    running = RunningCluster(tmp_path_factory.mktemp("control"))
    ports = {name: free_port() for name in ("controller", "services", "worker")}
    running.path.write_text(CLUSTER.format(**ports))
    running.env[limits_app.RECORDS] = str(running.records)
    with running:
        yield running


def actorctl(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, timeout=WAIT)


def limits(cluster: RunningCluster) -> dict[str, Any]:
    shown = actorctl("control", "limits", str(cluster.path), "--json")
    assert shown.returncode == 0, shown.stderr
    answers: dict[str, Any] = json.loads(shown.stdout)
    return answers


def runs(cluster: RunningCluster, task: str) -> Counter[str]:
    """How often each label of ``task`` ran."""
    path = cluster.records / "runs.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(r["label"] for r in map(json.loads, lines) if r["task"] == task)


def send(cluster: RunningCluster, task: Any, labels: list[str]) -> None:
    with limits_app.app.connect(cluster.path):
        for label in labels:
            task.delay(label)


def test_a_suspended_task_is_held_by_its_router_across_a_sigkill_and_resume_runs_each_once(
    cluster: RunningCluster,
) -> None:
    # Given the task suspended through the CLI
    suspended = actorctl("control", "suspend", str(cluster.path), "limits.pausable")
    assert suspended.returncode == 0, suspended.stderr
    assert "limits.pausable: suspended on 2 node(s)" in suspended.stdout
    # When 20 are sent: each send returns once the router's node keeps it
    labels = [f"kept{i}" for i in range(20)]
    send(cluster, limits_app.pausable, labels)
    assert limits(cluster)["services"]["routers"]["limited"]["held"] == 20
    # And the services node is killed and started again
    cluster.kill("services")
    # Then it still holds them, still suspended (kept in its store), and none ran
    after = limits(cluster)["services"]
    assert after["routers"]["limited"]["held"] == 20
    assert after["overrides"]["limits.pausable"] == {"suspended": True}
    assert runs(cluster, "pausable") == Counter()
    # And resume runs every one of them once
    resumed = actorctl("control", "resume", str(cluster.path), "limits.pausable")
    assert resumed.returncode == 0, resumed.stderr
    cluster.wait_until("20 runs", lambda: sum(runs(cluster, "pausable").values()) >= 20)
    ran = runs(cluster, "pausable")
    lost, twice = set(labels) - set(ran), [label for label, n in ran.items() if n > 1]
    assert (lost, twice) == (set(), [])


def test_rate_limits_and_budgets_change_at_run_time_and_bad_input_is_named(
    cluster: RunningCluster,
) -> None:
    path = str(cluster.path)
    changed = actorctl("control", "rate-limit", path, "limits.per_worker", "5/s")
    assert changed.returncode == 0, changed.stderr
    shown = limits(cluster)
    worker = shown["worker"]["workers"]["limited"]
    assert worker["tasks"]["limits.per_worker"]["rate_limit"] == "5/s"
    # (the pool's router paces it for each worker, so that it waits there)
    assert shown["services"]["routers"]["limited"]["per_worker"] == {"limits.per_worker": "5/s"}
    pooled = actorctl("control", "rate-limit", path, "limits.pool_wide", "30/m", "--global")
    assert pooled.returncode == 0, pooled.stderr
    router = limits(cluster)["services"]["routers"]["limited"]
    assert router["tasks"]["limits.pool_wide"]["rate_limit"] == "30/m"
    # A rate that is not one, and a task that does not exist, are named
    bad = actorctl("control", "rate-limit", path, "limits.per_worker", "10/x")
    assert bad.returncode == 2
    assert "is not a rate limit" in bad.stderr
    assert "Traceback" not in bad.stderr
    typo = actorctl("control", "rate-limit", path, "limits.per_workr", "5/s")
    assert typo.returncode == 1
    assert "did you mean 'limits.per_worker'" in typo.stderr
    assert "Traceback" not in typo.stderr
    assert "did not answer" not in typo.stderr  # the nodes answered: they refused it
    assert typo.stderr.startswith("error: every node refused it: BadArguments: "), typo.stderr
    # The pool's budget moves within its bounds (a fixed 8: 1 to 8)
    shrunk = actorctl("control", "pool-shrink", path, "limited", "3")
    assert shrunk.returncode == 0, shrunk.stderr
    assert "worker limited: budget 5" in shrunk.stdout
    grown = actorctl("control", "pool-grow", path, "limited", "10")
    assert "worker limited: budget 8" in grown.stdout
    nowhere = actorctl("control", "pool-grow", path, "nosuch")
    assert nowhere.returncode == 1
    assert "no running node runs a worker of pool 'nosuch'" in nowhere.stderr
    # And the table shows it all
    table = actorctl("control", "limits", path)
    assert table.returncode == 0, table.stderr
    assert "limits.per_worker: rate 5/s" in table.stdout
    assert "limited (router)" in table.stdout
    # Lifted again, for the other tests of the module
    for args in (("limits.per_worker", "0"), ("limits.pool_wide", "0", "--global")):
        assert actorctl("control", "rate-limit", path, *args).returncode == 0


def test_control_refuses_a_cluster_that_is_not_running(tmp_path: Path) -> None:
    down = tmp_path / "cluster.toml"
    ports = {name: free_port() for name in ("controller", "services", "worker")}
    down.write_text(CLUSTER.format(**ports).replace("dev = true", "insecure = true"))
    answer = actorctl("control", "limits", str(down), "--timeout", "3")
    assert answer.returncode == 1
    assert "is not running" in answer.stderr
    assert "Traceback" not in answer.stderr
