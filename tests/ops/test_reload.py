"""``actorctl cluster reload`` (and SIGHUP to ``cluster up``): a changed
cluster.toml applied to a running cluster of real processes, under load,
counted: every task records its run (tests/apps/state_app.py), none may be lost,
and what ran twice is reported.

The cluster starts as a services node, one worker node (one instance of
the pool ``celery``, 8 tasks at once) and another worker node. 2,000 tasks
are sent while the task is suspended (its router holds them), then let go;
while they run, one reload adds a worker node, removes the other (it is
drained, then stopped), gives the first two instances (it is drained and
restarted) and sets a ``[[task]]`` rate limit. SIGHUP applies a changed
limit. A wrong file is refused by name, and the cluster runs on as it was.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from actorctl import ConfigError
from actorctl.cluster import load_cluster, open_node, plan_reload
from actorctl.ops import CLI_NAME
from actorctl.tasks import cluster_app
from tests.apps.state_app import app, runs, steady
from tests.support.cli import run_cli
from tests.support.harness import free_port
from tests.support.running import WAIT, RunningCluster, counted, poll_until

CLUSTER = """\
[cluster]
name = "reload"
dev = true
controller = "127.0.0.1:{controller}"

[[node]]
name = "services"
listen = "127.0.0.1:{services}"
actors = "tests.apps.state_app:app"
services = true

[[node]]
name = "worker-1"
listen = "127.0.0.1:{worker1}"
actors = "tests.apps.state_app:app"
pools = ["celery"]
instances = {instances}
"""
WORKER = """
[[node]]
name = "{name}"
listen = "127.0.0.1:{port}"
actors = "tests.apps.state_app:app"
pools = ["celery"]
"""
LIMIT = """
[[task]]
name = "s.total"
rate_limit = "{rate}"
"""


class Files:
    """The versions of the test's cluster.toml, on fixed free ports."""

    def __init__(self, path: Path) -> None:
        self.path = path
        names = ("controller", "services", "worker1", "worker-2", "worker-3")
        self.ports = {name: free_port() for name in names}

    def write(
        self, *, instances: int = 1, others: tuple[str, ...] = (), rate: str | None = None
    ) -> None:
        text = CLUSTER.format(instances=instances, **self.ports)
        for name in others:
            text += WORKER.format(name=name, port=self.ports[name])
        if rate is not None:
            text += LIMIT.format(rate=rate)
        self.path.write_text(text)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningCluster, Files]]:
    running = RunningCluster(tmp_path_factory.mktemp("reload"))
    files = Files(running.path)
    files.write(others=("worker-3",))
    with running:
        yield running, files


def reload(cluster: RunningCluster, *options: str) -> subprocess.CompletedProcess[str]:
    return run_cli("cluster", "reload", cluster.path, *options, env=cluster.env, timeout=180)


def control(cluster: RunningCluster, what: str) -> None:
    """``actorctl control suspend|resume`` the test's task."""
    run_cli("control", what, cluster.path, steady.name, env=cluster.env, timeout=60, check=True)


def received(cluster: RunningCluster, port: int) -> dict[str, Any]:
    """Each actor's mailbox statistics, asked of the ``_node`` of the node at ``port``."""
    config = load_cluster(cluster.path, cluster_app())

    async def ask() -> dict[str, Any]:
        async with open_node(CLI_NAME, host=None, security=config.security(CLI_NAME)) as client:
            ref = client.ref(f"amqps://127.0.0.1:{port}/_node").with_options(timeout=WAIT)
            answer: dict[str, Any] = await ref.ask("statistics")
            return answer

    return trio.run(ask)


def send(count: int, offset: int) -> list[str]:
    """``count`` tasks of 50 ms each, sent and accepted by the pool."""
    return [steady.apply_async((offset + i,), ignore_result=True).id for i in range(count)]


def test_a_reload_under_load_adds_restarts_and_removes_nodes_and_loses_nothing(
    cluster: tuple[RunningCluster, Files],
) -> None:
    running, files = cluster
    with app.connect(running.path):
        # Given 2,000 tasks in flight: accepted by the pool, held by its
        # router while the task is suspended, then let go to two worker nodes
        control(running, "suspend")
        first = send(2000, 0)
        assert len(running.rows("services", "held")) == 2000
        control(running, "resume")
        poll_until(
            "worker-3 took some",  # (asked of the node over the network: nothing signals)
            lambda: received(running, files.ports["worker-3"])["celery"]["received"] > 0,
        )
        worker_3 = running.pids["worker-3"]
        # When one reload adds a worker node, removes another, gives the
        # first two instances and sets a task's rate limit
        files.write(instances=2, others=("worker-2",), rate="50/s")
        ran_at_start, began = len(set(runs(running.records))), time.monotonic()
        done = reload(running)
        took = time.monotonic() - began
        print(done.stdout, done.stderr)
        # Then it printed the plan and applied it, without a warning
        assert done.returncode == 0, done.stdout + done.stderr
        out = done.stdout
        assert "+ node worker-2: start it" in out
        assert "- node worker-3: drain it, then stop it" in out
        assert "~ node worker-1: drain it, restart it (instances 1 -> 2)" in out
        assert "~ task s.total: limits added" in out
        assert "node worker-2 started" in out
        assert "node worker-3 drained and stopped" in out
        assert "node worker-1 drained and restarted" in out
        assert "task s.total: rate_limit None -> 50/s" in out  # each node set it
        assert "router celery: instances 3" in out  # worker-1, worker-1's second, worker-2
        # and every task ran, none lost; the removed node's process is gone
        running.wait_until("all 2,000 ran", lambda: set(first) <= set(runs(running.records)), 60)
        lost, twice = counted(running, first)
        print(f"reload took {took:.1f} s, begun with {2000 - ran_at_start} tasks to run; "
              f"lost {len(lost)}, ran twice {len(twice)}")  # fmt: skip
        assert lost == []
        assert ran_at_start < 1000, "most tasks had run before the reload began: not under load"
        with pytest.raises(ProcessLookupError):
            os.kill(worker_3, 0)

    # When the file changes again and cluster up gets SIGHUP
    files.write(instances=2, others=("worker-2",), rate="20/s")
    assert running._process is not None
    running._process.send_signal(signal.SIGHUP)
    # Then it reloads it, and says what it changed
    running._until(lambda line: "task s.total: rate_limit 50/s -> 20/s" in line, WAIT)


def test_a_wrong_file_is_refused_and_the_cluster_runs_on_unchanged(
    cluster: tuple[RunningCluster, Files],
) -> None:
    running, _ = cluster
    before = running.path.read_text()
    pids = dict(running.pids)
    # Given a file with a misspelt key, one naming no such task, and one that
    # renames the cluster
    wrong = [
        (before.replace("pools =", "pols =", 1), "no such key 'node[1].pols'"),
        (before + LIMIT.format(rate="5/s").replace("s.total", "s.totl"), "did you mean 's.total'"),
        (before.replace('"reload"', '"other"'), "key 'cluster.name' changed"),
    ]
    try:
        for text, said in wrong:
            running.path.write_text(text)
            # When it is reloaded
            done = reload(running)
            # Then it is refused, naming what is wrong
            assert done.returncode != 0
            assert "reload refused, the cluster runs on unchanged" in done.stderr, done.stderr
            assert said in done.stderr, done.stderr
    finally:
        running.path.write_text(before)
    # and nothing changed: the same nodes, the same processes, working
    dry = reload(running, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "no change" in dry.stdout
    assert running.pids == pids
    with app.connect(running.path):
        assert steady.delay("after").get(timeout=WAIT) is None


def test_a_plan_names_each_change(tmp_path: Path) -> None:
    files = Files(tmp_path / "cluster.toml")
    files.write()
    old = load_cluster(files.path, cluster_app())
    files.write(instances=3, others=("worker-2",), rate="5/s")
    plan = plan_reload(old, load_cluster(files.path, cluster_app()), {})
    assert plan.lines() == [
        "+ node worker-2: start it",
        "~ node worker-1: drain it, restart it (instances 1 -> 3)",
        "~ task s.total: limits added",
    ]
    files.write()
    assert plan_reload(old, load_cluster(files.path, cluster_app()), {}).lines() == ["no change"]
    files.path.write_text(files.path.read_text().replace('name = "reload"', 'name = "other"'))
    with pytest.raises(ConfigError, match=r"key 'cluster.name' changed \('reload' -> 'other'\)"):
        plan_reload(old, load_cluster(files.path, cluster_app()), {})
