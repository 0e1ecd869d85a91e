"""``actorctl cluster down``: each node's log ends with what it logged as it stopped.

A real cluster (``actorctl cluster up``, node processes, mutual TLS): a services
node and a worker node whose pool is served by boxed processes (the POSIX shell
worker of examples/boxed). ``cluster down`` stops the nodes with SIGTERM; each
stops gracefully, and the Foreman that ran it copies its log to
``logs/<node>.log`` to the end: the boxed processes' exits, then
``actorctl:node:stopped`` as the file's last line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.harness import free_port
from tests.support.running import RunningCluster

BOXED = Path(__file__).resolve().parents[2] / "examples" / "boxed"

CLUSTER = f"""\
[cluster]
name = "down"
dev = true
controller = "127.0.0.1:{{controller}}"

[[node]]
name = "services"
listen = "127.0.0.1:{{services}}"
actors = "examples.boxed.app:app"
services = true

[[node]]
name = "worker"
listen = "127.0.0.1:{{worker}}"
actors = "examples.boxed.app:app"
pools = ["sh"]

[[boxed]]
name = "sh"
node = "worker"
pool = "sh"
command = ["sh", "worker.sh"]
cwd = "{BOXED}"
instances = 2
"""


def _events(path: Path) -> list[dict[str, Any]]:
    """The eliot lines of a node's log file (cluster up's own lines are not there)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def test_cluster_down_leaves_each_node_log_ending_with_its_stop(tmp_path: Path) -> None:
    # Given a cluster up with a services node and a worker node with boxed processes
    cluster = RunningCluster(tmp_path)
    ports = {name: free_port() for name in ("controller", "services", "worker")}
    cluster.path.write_text(CLUSTER.format(**ports))
    try:
        cluster.start()
        # When `cluster down` stops it (and cluster up has exited)
        down = cluster.down()
    finally:
        cluster.stop()  # (it has exited: unless a step above failed)
    assert down.returncode == 0, down.stderr
    assert "stopping" in down.stdout, down.stdout
    logs = tmp_path / "logs"
    for node in ("services", "worker"):
        events = _events(logs / f"{node}.log")
        kinds = [event.get("message_type") for event in events]
        # Then each node's log ends with its stop: told by SIGTERM, not killed
        assert kinds[-1] == "actorctl:node:stopped", (node, kinds[-5:])
        assert events[-1]["node"] == node
        assert "actorctl:node:signal" in kinds, node
    # And the worker's log has each of its boxed processes' exit before it
    worker = _events(logs / "worker.log")
    started = {e["pid"] for e in worker if e.get("message_type") == "actorctl:boxed:started"}
    exited = {e["pid"] for e in worker if e.get("message_type") == "actorctl:boxed:exited"}
    assert len(started) == 2
    assert exited == started
    # (stopped by SIGTERM: no Foreman had to kill its node)
    cluster_log = _events(logs / "cluster.log")
    assert "actorctl:node:killed" not in [e.get("message_type") for e in cluster_log]
