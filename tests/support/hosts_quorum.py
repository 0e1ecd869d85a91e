"""Three hosts, an etcd member on each, two services nodes (issue 34): for
tests/hosts/test_hosts_quorum.py.

Hosts are network namespaces (tests/support/netns.py). Each host runs a
member of one etcd cluster of three (so that etcd answers while any one host
is lost) and ``actorctl host up cluster.toml --host NAME``: host a the
services node ``services-a``, host b the services node ``services-b`` and the
worker node ``worker-b``, host c the worker node ``worker-c`` (pool
``celery``, tests/apps/hosts_app.py). The two services nodes take turns
holding the services role in etcd, the holder replicating its store to the
other (docs/deploy.md, "Replication"). Mutual TLS and signed messages
throughout (development certificates, dialled by IP address). With ``periodic_every``,
the file has the periodic task ``tick`` (tests/apps/hosts_app.py's
``beat_tick``, every that many seconds, on the pool ``celery``): every node's
beat is a candidate for the scheduler role in etcd, and each firing it makes
is a task in its node's backlog (on a services node, in its replicated store).

Everything is started by its PID, and :meth:`QuorumHosts.kill_host` kills a
host's processes by theirs (its ``host up``, its nodes, its etcd member);
:meth:`QuorumHosts.stop_host` stops its ``host up`` warm (SIGTERM), as
``systemctl stop`` does. A host's processes, or a caller, may run another
release (``src``: another ``src/`` first on their PYTHONPATH,
tests/support/releases.py), and :meth:`QuorumHosts.code_of` says which one a
node's process imports. Waits are on output lines, and on etcd's directory
and role key (a watch, in a process on a host), each with a timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import actorctl
from actorctl.cluster import load_cluster
from actorctl.ops import ensure_dev_secrets
from actorctl.tasks import cluster_app
from tests.apps.hosts_app import RECORDS, RUNS, runs
from tests.support.etcd_members import RAFT, WAIT_HOLDER, WAIT_NODES, start_members
from tests.support.etcd_server import EtcdServer
from tests.support.filewatch import FileWatch
from tests.support.hosts_cluster import ACTORCTL, READY, ROOT
from tests.support.netns import Network, wait_for_output

__all__ = ["NAME", "NODES", "TTL", "QuorumHosts"]

NAME = "quorum"  # the cluster's
TTL = 3  # seconds a node that died stays registered
#: Each host's nodes, in the cluster file's order.
NODES = {"a": ("services-a",), "b": ("services-b", "worker-b"), "c": ("worker-c",)}

CLUSTER = """\
[cluster]
name = "{name}"
dev = true
dev_public = true  # the test's hosts are network namespaces of this one machine

[etcd]
endpoints = [{endpoints}]
ttl = {ttl}

[[node]]
name = "services-a"
listen = "{a}:5701"
host = "a"
actors = "tests.apps.hosts_app:app"
services = true

[[node]]
name = "services-b"
listen = "{b}:5704"
host = "b"
actors = "tests.apps.hosts_app:app"
services = true

[[node]]
name = "worker-b"
listen = "{b}:5702"
host = "b"
actors = "tests.apps.hosts_app:app"
pools = ["celery"]

[[node]]
name = "worker-c"
listen = "{c}:5703"
host = "c"
actors = "tests.apps.hosts_app:app"
pools = ["celery"]
"""

#: A periodic task fired every EVERY seconds by whichever beat holds the
#: scheduler role in etcd, run by the workers' pool ``celery`` (behind the
#: tasks waiting there).
PERIODIC = """
[[periodic]]
name = "tick"
task = "hosts.beat_tick"
every = {every}
queue = "celery"
"""

_READY_LINE = re.compile(r"^node (\S+) ready at \S+ \(pid (\d+)\)", re.MULTILINE)


def _kill_and_wait(pid: int, timeout: float = 10.0) -> None:
    """SIGKILL ``pid`` (a node, a child of its ``host up``: not this
    process's to reap) and wait (bounded) until it has ended: its pidfd
    becomes readable then, so that nothing it had under way writes after."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # gone already
    try:
        os.kill(pid, signal.SIGKILL)
        ready, _, _ = select.select([fd], [], [], timeout)
        assert ready, f"pid {pid} still runs {timeout} s after SIGKILL"
    finally:
        os.close(fd)


class QuorumHosts:
    """The three hosts' etcd members, ``host up`` processes and cluster file.

    A context manager: it stops everything it started on the way out.
    """

    def __init__(
        self, network: Network, directory: Path, *, periodic_every: float | None = None
    ) -> None:
        self.network = network
        self.directory = directory
        self.records = directory / "records"
        self.records.mkdir()
        peers = ",".join(f"{h}=http://{network[h].address}:2380" for h in NODES)
        self.members = {
            host: EtcdServer(
                directory / f"etcd-{host}",
                host=network[host].address,
                name=host,
                initial_cluster=peers,
                raft=RAFT,
            )
            for host in NODES
        }
        for host in NODES:
            (directory / f"etcd-{host}").mkdir()
        endpoints = ", ".join(f'"{m.url}"' for m in self.members.values())
        addresses = {host: network[host].address for host in NODES}
        self.path = directory / "cluster.toml"
        text = CLUSTER.format(name=NAME, endpoints=endpoints, ttl=TTL, **addresses)
        if periodic_every is not None:
            text += PERIODIC.format(every=periodic_every)
        self.path.write_text(text)
        # Made once, before any host starts (as on real hosts: made on one, copied).
        ensure_dev_secrets(load_cluster(self.path, cluster_app()))
        self.env = {**os.environ, RECORDS: str(self.records)}
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT), self.env.get("PYTHONPATH", "")) if p
        )
        self.etcd: dict[str, subprocess.Popen[bytes]] = {}
        self.ups: dict[str, subprocess.Popen[bytes]] = {}
        self.pids: dict[str, int] = {}  # node name to the pid of its process

    def __enter__(self) -> QuorumHosts:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- etcd ----------------------------------------------------------------------------

    def start_etcd(self) -> None:
        """Start the three members, each on its host, and wait (bounded) until
        each answers (they answer once they have elected a leader)."""
        self.etcd.update(start_members(self.network, self.members))

    def urls(self, *, but: str = "") -> str:
        """The members' client URLs, comma-separated (but host ``but``'s)."""
        return ",".join(m.url for host, m in self.members.items() if host != but)

    # -- hosts ---------------------------------------------------------------------------

    def env_of(self, src: Path | None = None) -> dict[str, str]:
        """The environment of the hosts' processes: with ``src`` (another
        release's ``src/``, tests/support/releases.py) first on PYTHONPATH,
        so that they import actorctl from there, not from this checkout."""
        if src is None:
            return self.env
        return {**self.env, "PYTHONPATH": os.pathsep.join((str(src), self.env["PYTHONPATH"]))}

    def start_host(self, host: str, src: Path | None = None) -> None:
        """Start ``host``'s ``host up`` (on the release in ``src``: this
        checkout's by default) and wait (bounded) until it says its nodes are
        ready (registered in etcd)."""
        self.ups[host] = self.network.run(
            host,
            [*ACTORCTL, "host", "up", str(self.path), "--host", host],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env_of(src),
            cwd=ROOT,
        )
        said = wait_for_output(self.ups[host], f"host {host!r} ready", timeout=READY)
        self.pids.update((node, int(pid)) for node, pid in _READY_LINE.findall(said))

    def stop_host(self, host: str, timeout: float = READY) -> str:
        """Stop ``host``'s ``host up`` warm (SIGTERM, as ``systemctl stop``):
        wait (bounded) until it said it stopped and exited; what it said."""
        up = self.ups[host]
        up.send_signal(signal.SIGTERM)
        out, _ = up.communicate(timeout=timeout)
        said = out.decode(errors="replace")
        assert f"host {host!r} stopped" in said, said[-3000:]
        assert up.returncode == 0, said[-3000:]
        for node in NODES[host]:  # gone with it: not this object's to kill any more
            del self.pids[node]
        return said

    def kill_host(self, host: str) -> None:
        """The host loses power: SIGKILL its ``host up``, its nodes and its
        etcd member, each by its PID."""
        os.kill(self.ups[host].pid, signal.SIGKILL)
        for node in NODES[host]:
            _kill_and_wait(self.pids.pop(node))
        os.kill(self.etcd[host].pid, signal.SIGKILL)
        for process in (self.ups[host], self.etcd[host]):
            process.wait(timeout=10)

    def code_of(self, node: str) -> Path:
        """Where ``node``'s process imports actorctl from: the first entry of
        the PYTHONPATH in its environment (/proc) that holds the package."""
        environ = Path(f"/proc/{self.pids[node]}/environ").read_bytes().split(b"\0")
        [path] = [v[len(b"PYTHONPATH=") :] for v in environ if v.startswith(b"PYTHONPATH=")]
        for entry in path.decode().split(os.pathsep):
            if (Path(entry) / "actorctl" / "__init__.py").exists():
                return Path(entry).resolve()
        # None on its PYTHONPATH: the install this process imports (its environment is ours).
        return Path(actorctl.__file__).resolve().parents[1]

    def data(self, node: str) -> Path:
        """``node``'s data directory (its store, its replicas)."""
        return self.directory / "data" / node

    # -- what etcd says ------------------------------------------------------------------

    def wait_holder(self, want: str, timeout: float, *, on: str = "c") -> None:
        """Wait (at most ``timeout`` seconds, and a process start) until etcd
        says ``want`` holds the services role: told by a watch of its key, in
        a process on host ``on`` asking that host's member."""
        argv = [self.members[on].url, NAME, "services", str(timeout), want]
        waiter = self.network.run(
            on, [sys.executable, "-c", WAIT_HOLDER, *argv], stdout=subprocess.PIPE
        )
        wait_for_output(waiter, f"holder {want}", timeout=timeout + READY)
        waiter.wait(timeout=READY)

    def wait_nodes(self, nodes: Sequence[str], want: str, timeout: float, *, on: str = "c") -> None:
        """Wait (bounded) until every node of ``nodes`` is registered in etcd's
        directory (``want="present"``), or none is (``"absent"``): told by the
        directory's watch, in a process on host ``on``."""
        argv = [self.urls(), NAME, str(timeout), want, *nodes]
        waiter = self.network.run(
            on, [sys.executable, "-c", WAIT_NODES, *argv], stdout=subprocess.PIPE
        )
        wait_for_output(waiter, f"nodes {want}", timeout=timeout + READY)
        waiter.wait(timeout=READY)

    def cli(self, host: str, *args: str) -> str:
        """What ``actorctl ARGS...`` prints, run on ``host``; it must succeed."""
        run = self.network.run(
            host,
            [*ACTORCTL, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=ROOT,
        )
        out: bytes = run.communicate(timeout=READY)[0]
        said = out.decode(errors="replace")
        assert run.returncode == 0, said[-3000:]
        return said

    def logged(self, node: str, event: str) -> list[dict[str, Any]]:
        """Every ``event`` line of ``node``'s log."""
        path = self.directory / "logs" / f"{node}.log"
        lines = path.read_text().splitlines() if path.exists() else []
        return [json.loads(line) for line in lines if f'"{event}"' in line]

    def wait_logged(
        self, node: str, event: str, timeout: float = READY, *, count: int = 1
    ) -> dict[str, Any]:
        """Wait (at most ``timeout`` seconds) until ``node``'s log has
        ``count`` ``event`` lines (its log is appended to across restarts),
        woken by the writes to the logs; the ``count``-th such line."""
        logs = self.directory / "logs"
        logs.mkdir(exist_ok=True)
        deadline = time.monotonic() + timeout
        with FileWatch(logs) as written:  # made before the first look
            while len(found := self.logged(node, event)) < count:
                left = deadline - time.monotonic()
                assert left > 0, f"{node} logged {len(found)} {event}, not {count}, in {timeout} s"
                written.wait_changed(left)
        return found[count - 1]

    def fired(self, *nodes: str) -> list[str]:
        """The task ids of the firings the logs of ``nodes`` say their beats
        made (a line a SIGKILL cut short is left out: its firing was not done)."""
        found = []
        for node in nodes:
            path = self.directory / "logs" / f"{node}.log"
            for line in path.read_text().splitlines() if path.exists() else []:
                if '"actorctl:beat:fired"' in line:
                    with contextlib.suppress(ValueError):
                        found.append(str(json.loads(line)["task_id"]))
        return found

    def wait_fired(self, nodes: Sequence[str], count: int, timeout: float) -> list[str]:
        """Wait (at most ``timeout`` seconds) until the beats of ``nodes``
        logged ``count`` firings in all, woken by the writes to the logs;
        their firings."""
        logs = self.directory / "logs"
        logs.mkdir(exist_ok=True)
        deadline = time.monotonic() + timeout
        with FileWatch(logs) as written:  # made before the first look
            while len(found := self.fired(*nodes)) < count:
                left = deadline - time.monotonic()
                assert left > 0, f"{nodes} fired {len(found)}, not {count}, in {timeout} s"
                written.wait_changed(left)
        return found

    def wait_run(self, ids: Collection[str], timeout: float, name: str = RUNS) -> None:
        """Wait (at most ``timeout`` seconds) until every task of ``ids`` has
        run at least once (recorded in ``name``: PERIODIC_RUNS for ``tick``),
        woken by the writes to the records."""
        deadline = time.monotonic() + timeout
        with FileWatch(self.records) as written:  # made before the first look
            while True:
                ran = {task for task, _ in runs(self.records, name)}
                if not (left := [i for i in ids if i not in ran]):
                    return
                wait = deadline - time.monotonic()
                assert wait > 0, f"{len(left)} of {len(ids)} tasks never ran: {left[:5]}"
                written.wait_changed(wait)

    # -- callers -------------------------------------------------------------------------

    def caller(
        self,
        host: str,
        *argv: str,
        stdin: int = subprocess.DEVNULL,
        src: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        """tests/apps/hosts_mixed_caller.py on ``host`` with ``argv`` after the
        mode's cluster file (its ids file is named relative to it), on the
        release in ``src`` (this checkout's by default)."""
        mode, *rest = argv
        return self.network.run(
            host,
            [sys.executable, "-m", "tests.apps.hosts_mixed_caller", mode, str(self.path), *rest],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env_of(src),
            cwd=ROOT,
        )

    def plain_caller(
        self, host: str, count: int, timeout: float, seconds: float
    ) -> subprocess.Popen[bytes]:
        """tests/apps/hosts_caller.py on ``host``: ``count`` tasks of
        ``seconds`` each, their ids written to ``sent.txt`` beside the cluster file."""
        argv = [str(self.path), str(count), str(timeout), str(seconds), "sent.txt"]
        return self.network.run(
            host,
            [sys.executable, "-m", "tests.apps.hosts_caller", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=ROOT,
        )

    @staticmethod
    def finish(caller: subprocess.Popen[bytes], timeout: float) -> str:
        """Wait (at most ``timeout`` seconds) until ``caller`` printed its
        ``results`` line, then until it exited; everything it wrote since it
        was last read."""
        said = wait_for_output(caller, "results ", timeout=timeout)
        caller.wait(timeout=READY)
        assert caller.stdout is not None
        return said + caller.stdout.read().decode(errors="replace")

    def sent(self, ids: str) -> list[str]:
        """The task ids a caller wrote to ``ids``, beside the cluster file."""
        return (self.directory / ids).read_text().split()

    def stop(self) -> None:
        """SIGTERM each ``host up`` still running and wait (bounded) until it
        stopped its nodes; SIGKILL any node left over, by pid, then etcd's members."""
        running = [up for up in self.ups.values() if up.poll() is None]
        for up in running:
            up.send_signal(signal.SIGTERM)
        for up in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                up.wait(timeout=30)
        for pid in self.pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for member in self.etcd.values():
            if member.poll() is None:
                os.kill(member.pid, signal.SIGKILL)
                member.wait(timeout=10)
