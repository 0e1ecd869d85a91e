"""``host up`` stops a busy node warm (issue 34), with real processes.

etcd runs on 127.0.0.1 (tests/support/etcd_server.py), and ``actorctl host up FILE
--host a`` runs a cluster of tests/apps/shutdown_app.py (mutual TLS, signed
messages, development certificates) registered in it: a services node and a
worker node whose tasks record each run (``begin:LABEL``, then ``LABEL``) and
end only when the test lets them. Signals go only to processes the test
started, by PID; nothing sleeps: each step waits for the record, the output
line or the exit it expects, under a timeout.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import trio

from actorctl.cli.run._host import LEAVE_TIMEOUT
from actorctl.cluster import load_cluster
from actorctl.ops import ensure_dev_secrets
from actorctl.tasks import cluster_app
from tests.apps.shutdown_app import RUNS, app, hold
from tests.support.cli import ROOT
from tests.support.cluster_up import Output, Records, records_env
from tests.support.etcd_server import running_etcd
from tests.support.harness import free_port
from tests.support.shutdown import WAIT, Cluster

#: The worker's shutdown_grace (s): far longer than any bound this test waits
#: out, so that only a stop that kills could end the node's tasks sooner.
GRACE = 60.0
#: Seconds past LEAVE_TIMEOUT the busy node must outlive its stop by: a node
#: killed a few seconds into its stop (the issue's 5 s) would be gone by then.
PAST = 5.0

CLUSTER = """\
[cluster]
name = "hoststop"
dev = true

[etcd]
endpoints = ["{etcd}"]
ttl = 3

[[node]]
name = "services"
listen = "127.0.0.1:{}"
host = "a"
actors = "tests.apps.shutdown_app:app"
services = true

[[node]]
name = "worker-1"
listen = "127.0.0.1:{}"
host = "a"
actors = "tests.apps.shutdown_app:app"
pools = ["work"]
shutdown_grace = {grace}
"""


async def _wait_gone(pid: int, timeout: float) -> bool:
    """Wait (at most ``timeout`` s) until ``pid`` has exited; whether it has.

    The node is the host runner's child, not the test's: its pidfd (which any
    process may open) becomes readable when it exits."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        with trio.move_on_after(timeout):
            await trio.lowlevel.wait_readable(fd)
            return True
        return False
    finally:
        os.close(fd)


async def test_host_up_stops_a_busy_node_warm_its_running_tasks_finish_and_it_exits_itself(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    (tmp_path / "etcd").mkdir()
    with running_etcd(tmp_path / "etcd") as etcd:
        # Given host a's services and worker node under `host up`, registered in etcd
        path = tmp_path / "cluster.toml"
        path.write_text(
            CLUSTER.replace("{etcd}", etcd.url).format(free_port(), free_port(), grace=GRACE)
        )
        ensure_dev_secrets(load_cluster(path, cluster_app()))
        records = tmp_path / "records"
        records.mkdir()
        process: trio.Process = await nursery.start(
            functools.partial(
                trio.run_process,
                [sys.executable, "-m", "actorctl", "host", "up", str(path), "--host", "a"],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                check=False,
                env=records_env(records),
            )
        )
        assert process.stdout is not None
        assert process.stderr is not None
        cluster = Cluster(
            path, process, Output(process.stdout), Records(records), err=Output(process.stderr)
        )
        try:
            await cluster.out.until("host 'a' ready", timeout=WAIT)
            said = [line for line in cluster.out.lines if "node worker-1 ready at" in line]
            one = int(said[0].rpartition("(pid ")[2].partition(")")[0])
            cluster.pids["worker-1"] = one
            # and the worker running RUNS tasks, held back by the test
            cluster.hold("worker-1")
            labels = [f"t{i}" for i in range(RUNS)]
            async with app.aconnect(path):
                with trio.fail_after(WAIT):
                    results = [await hold.aapply_async((label,)) for label in labels]
                assert await cluster.records.wait_until(lambda: len(cluster.runs(one)) == RUNS), (
                    f"worker-1 began {cluster.runs(one)}"
                )
                # When the host runner gets SIGTERM (systemd's stop, say)
                stopped_at = trio.current_time()
                process.send_signal(signal.SIGTERM)
                await cluster.out.until("stopping", timeout=WAIT)
                # Then the busy node is still running its tasks well past the
                # time it leaves etcd (no kill a few seconds into its stop)
                gone = await _wait_gone(one, LEAVE_TIMEOUT + PAST)
                assert not gone, "worker-1 ended while its tasks still ran (killed?)"
                assert sorted(cluster.runs(one)) == [f"begin:{label}" for label in labels]
                # And once the tasks may end, they end there, their results
                # reach the caller, and the node exits by itself within its grace
                cluster.release("worker-1")
                with trio.fail_after(WAIT):
                    assert [await r.aget(timeout=WAIT) for r in results] == labels
            with trio.fail_after(GRACE):
                code = await process.wait()
            took = trio.current_time() - stopped_at
        finally:
            cluster.release("worker-1")
            cluster.records.close()
            if process.returncode is None:  # the host runner this test started: it
                process.send_signal(signal.SIGTERM)  # stops its nodes, then itself
                with trio.move_on_after(WAIT):
                    await process.wait()
            if process.returncode is None:
                process.kill()
        out = "\n".join(await cluster.out.rest())
        err = "\n".join(await cluster.err.rest())
        ended = [line for line in cluster.runs(one) if not line.startswith("begin:")]
        lost = sorted(set(labels) - set(ended))
        twice = len(ended) - len(set(ended))
        print(f"{len(labels)} tasks: {len(lost)} lost, {twice} ran twice; host a stopped "
              f"{took:.1f} s after its SIGTERM")  # fmt: skip
        assert code == 0, err
        assert "host 'a' stopped" in out, out
        assert not lost, lost
        assert twice == 0
        assert took < GRACE
        log = (tmp_path / "logs" / "host-a.log").read_text()
        assert "actorctl:foreman:killed" not in log
        exits = [json.loads(line) for line in log.splitlines() if "actorctl:foreman:exited" in line]
        assert {(e["node"], e["code"]) for e in exits} == {("worker-1", 0), ("services", 0)}, exits
