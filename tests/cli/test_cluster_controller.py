"""``actorctl cluster controller``: the Controller of nodes it does not start.

Real processes on 127.0.0.1, mutual TLS and signed messages with the
development CA and keys that ``actorctl certs init`` and ``keys gen`` make. The
test starts the nodes itself (``actorctl node run ... --cluster FILE``, as a
systemd unit or a StatefulSet pod would), then the controller command, and
drives them as an operator does. It waits on what the controller prints as a
node goes down and comes back (the controller's own events), with a bound.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import pytest
import trio

from tests.support.cli import Watched, run_cli_async, start_watched
from tests.support.harness import free_port

#: Where each node listens: n2 under a DNS name (as a StatefulSet's pod is
#: reached), which the controller's TLS checks against the node's certificate.
HOSTS = {"n1": "127.0.0.1", "n2": "localhost"}
#: The bound on any one wait here (s): a step that takes longer has failed.
WAIT = 30.0

CLUSTER = """
[cluster]
name = "outside"
dev = false
controller = "127.0.0.1:{controller}"
certs = "certs"
keys = "keys"

[[node]]
name = "n1"
listen = "127.0.0.1:{n1}"
actors = "tests.apps.limits_app:app"
services = true

[[node]]
name = "n2"
listen = "localhost:{n2}"
actors = "tests.apps.limits_app:app"
pools = ["limited", "ordered"]
"""


async def actorctl(*args: str) -> subprocess.CompletedProcess[str]:
    done = await run_cli_async(*args, timeout=WAIT)
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


@attrs.define
class Cluster:
    path: Path
    nursery: trio.Nursery
    ports: dict[str, int]
    nodes: dict[str, Watched] = attrs.field(factory=dict)
    controller: Watched | None = None

    async def start_node(self, name: str) -> Watched:
        listen = self.ports[name]
        node = await start_watched(
            self.nursery, "node", "run", "tests.apps.limits_app:app", "--cluster", str(self.path),
            "--name", name, "--listen", f"{HOSTS[name]}:{listen}", "--grace", "1",
            "--certs", str(self.path.parent / "certs"), "--keys", str(self.path.parent / "keys"),
        )  # fmt: skip
        await node.output.wait_for('"actorctl:node:ready"')
        self.nodes[name] = node
        return node

    async def status(self) -> str:
        shown = await actorctl("cluster", "status", str(self.path))
        assert shown.returncode == 0, shown.stderr
        return shown.stdout


def node_line(status: str, node: str) -> str:
    """The line of ``cluster status`` (a tree) for the node called ``node``."""
    [line] = [line for line in status.splitlines() if f" {node}  node  " in line]
    return line


@pytest.fixture
async def cluster(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[Cluster]:
    # Given certificates and keys made with the CLI, and a cluster file
    names = ["n1", "n2", "cli", "controller"]
    made = await actorctl("certs", "init", str(tmp_path / "certs"), *(f"--node={n}" for n in names))
    assert made.returncode == 0, made.stderr
    for name in names:
        # outside development mode the CLI's key is an operator only when granted
        role = ["--role", "operator"] if name == "cli" else []
        made = await actorctl("keys", "gen", name, "--dir", str(tmp_path / "keys"), *role)
        assert made.returncode == 0, made.stderr
    ports = {name: free_port() for name in ("controller", "n1", "n2")}
    path = tmp_path / "cluster.toml"
    path.write_text(CLUSTER.format(**ports))
    running = Cluster(path, nursery, ports=ports)
    # And its two nodes, started by the test (as systemd or Kubernetes would)
    async with trio.open_nursery() as starting:
        for name in ("n1", "n2"):
            starting.start_soon(running.start_node, name)
    # And the controller of the file
    running.controller = await start_watched(
        nursery, "cluster", "controller", str(path), "--lost-after", "1",
        "--log", str(tmp_path / "controller.log"),
    )  # fmt: skip
    await running.controller.output.wait_for("cluster 'outside' ready")
    yield running
    for node in running.nodes.values():
        if node.process.returncode is None:
            node.process.send_signal(signal.SIGTERM)  # our own children, by their pids
    if running.controller.process.returncode is None:
        running.controller.process.send_signal(signal.SIGTERM)
    with trio.fail_after(WAIT):
        for process in [running.controller, *running.nodes.values()]:
            await process.process.wait()


async def test_status_shows_the_nodes_it_did_not_start_and_control_goes_through_it(
    cluster: Cluster,
) -> None:
    assert cluster.controller is not None
    # When the operator asks for the cluster's status
    status = await cluster.status()
    # Then both nodes are running at their addresses, with their pids
    for name, node in cluster.nodes.items():
        line = node_line(status, name)
        assert "running" in line, status
        assert f"amqps://{HOSTS[name]}:{cluster.ports[name]}" in line, status
        assert str(node.process.pid) in line, status
    # And it serves its web page
    assert "web page: https://127.0.0.1:" in cluster.controller.output.text()  # TLS, as the inbox
    # And `control limits` reaches both through this Controller's broadcast
    shown = await actorctl("control", "limits", str(cluster.path), "--json")
    assert shown.returncode == 0, shown.stderr
    answers = json.loads(shown.stdout)
    assert set(answers) == {"n1", "n2"}, answers
    assert all("unanswered" not in answer for answer in answers.values()), answers
    # And SIGTERM stops the controller cleanly, and only it
    cluster.controller.process.send_signal(signal.SIGTERM)
    with trio.fail_after(WAIT):
        code = await cluster.controller.process.wait()
    assert code == 0, cluster.controller.output.text()
    said = cluster.controller.output.text()
    assert "controller of cluster 'outside' stopped (its nodes go on)" in said
    assert all(node.process.returncode is None for node in cluster.nodes.values())


async def test_a_killed_node_is_down_then_running_again_with_one_restart(
    cluster: Cluster,
) -> None:
    assert cluster.controller is not None
    seen = len(cluster.controller.output.data)
    # When node n2 is killed (SIGKILL, by the pid of the process the test started)
    killed = cluster.nodes["n2"]
    killed.process.kill()
    with trio.fail_after(WAIT):
        await killed.process.wait()
    # Then the controller says it is down (its connection lost for --lost-after)
    seen = await cluster.controller.output.wait_for("node n2 down:", seen)
    status = await cluster.status()
    assert "down" in node_line(status, "n2"), status
    assert "running" in node_line(status, "n1"), status
    # When it is started again
    again = await cluster.start_node("n2")
    # Then the controller has reached the new process: running, one restart
    at = f"amqps://localhost:{cluster.ports['n2']} (pid {again.process.pid}) (restart 1)"
    await cluster.controller.output.wait_for(f"node n2 running at {at}", seen)
    status = await cluster.status()
    line = node_line(status, "n2")
    assert "running" in line, status
    assert str(again.process.pid) in line, status
    assert "restarts 1" in line, status
