"""Three hosts of one cluster, each running ``actorctl host up``, and etcd on
host a (issue 18): for tests/hosts/test_hosts.py and bench/hosts.py.

Hosts are network namespaces (tests/support/netns.py): etcd runs on host a, and each
host runs ``actorctl host up cluster.toml --host NAME``: a the services node
(the pool's router), b and c a worker node of the pool each; mutual TLS and
signed messages throughout (development certificates, dialled by IP address:
checked against the cluster CA). With ``loopback=True`` the same three nodes
all run on host a at 127.0.0.1 (the same cluster, no veth in between: the
benchmark's reference). etcd is started by its PID, so that it can be killed
(SIGKILL) and started again on its data; with ``etcd_quorum=True``, etcd is
three members instead, one on each host (tests/support/etcd_members.py).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from actorctl.cluster import load_cluster
from actorctl.ops import ensure_dev_secrets
from actorctl.tasks import cluster_app
from tests.apps.hosts_app import PERIODIC_RUNS, RECORDS, runs
from tests.support.etcd_members import (
    LIST_NODES,
    READ_HOLDER,
    WAIT_ETCD,
    WAIT_HOLDER,
    WAIT_NODES,
    EtcdMembers,
)
from tests.support.etcd_server import EtcdServer
from tests.support.filewatch import wait_written
from tests.support.netns import Network, wait_for_output

ROOT = Path(__file__).resolve().parents[2]
ACTORCTL = [sys.executable, "-m", "actorctl"]
TTL = 3  # seconds a node that died stays registered
READY = 60.0  # seconds etcd, or a host's nodes, may take to start on a loaded 2-core machine
PORTS = {"a": 5701, "b": 5702, "c": 5703}

CLUSTER = """\
[cluster]
name = "hosts"
dev = true
dev_public = true  # the test's hosts are network namespaces of this one machine

[etcd]
endpoints = [{endpoints}]
ttl = {ttl}

[[node]]
name = "services"
listen = "{a}:{pa}"
host = "a"
actors = "tests.apps.hosts_app:app"
services = true

{services_b}[[node]]
name = "worker-b"
listen = "{b}:{pb}"
host = "b"
actors = "tests.apps.hosts_app:app"
pools = {pools_b}

[[node]]
name = "worker-c"
listen = "{c}:{pc}"
host = "c"
actors = "tests.apps.hosts_app:app"
pools = {pools_c}
"""

#: A second services node, on host b (``Hosts(..., services_b=True)``): the
#: two take turns holding the services role in etcd.
SERVICES_B = """[[node]]
name = "services-b"
listen = "{b}:{ps}"
host = "b"
actors = "tests.apps.hosts_app:app"
services = true

"""
SERVICES_B_PORT = 5704

#: A router on the services node over the pool's two workers that does not
#: take tasks over (``Hosts(..., forwarding_router=True)``): it forwards each
#: and settles it once the worker settled it, after running it; its sender
#: keeps the task meanwhile (bench/hosts.py's ``end_to_end_router``).
FORWARD = """
[[router]]
name = "forward"
node = "services"
instances = ["worker-b/celery", "worker-c/celery"]
"""

#: A periodic task fired every EVERY seconds by whichever node's beat holds
#: the scheduler role in etcd, run by the pool ``ticks``.
PERIODIC = """
[[periodic]]
name = "tick"
task = "hosts.beat_tick"
every = {every}
queue = "ticks"
"""

_READY_LINE = re.compile(r"^node (\S+) ready at \S+ \(pid (\d+)\)", re.MULTILINE)


class Hosts:
    """etcd on host a and ``host up`` on each host, with what they said.

    With ``periodic_every``, the file has the periodic task ``tick`` (every
    that many seconds), run by the pool ``ticks``, which the worker nodes of
    the hosts ``ticks_on`` serve besides ``celery``. With
    ``forwarding_router``, the services node hosts the router ``forward``
    (FORWARD) besides the pool's. With ``etcd_quorum``,
    etcd is three members, one on each host (``etcd`` is host a's), not one
    on host a. A context manager: it stops everything on the way out.
    """

    def __init__(
        self,
        network: Network,
        directory: Path,
        *,
        loopback: bool = False,
        periodic_every: float | None = None,
        ticks_on: Sequence[str] = (),
        services_b: bool = False,
        etcd_quorum: bool = False,
        forwarding_router: bool = False,
    ) -> None:
        self.network = network
        self.directory = directory
        self.records = directory / "records"
        self.records.mkdir()
        self.quorum = EtcdMembers(network, directory, tuple(PORTS)) if etcd_quorum else None
        self.etcd = (
            self.quorum.members["a"]
            if self.quorum is not None
            else EtcdServer(directory, host=network["a"].address)
        )
        #: The client URLs of etcd's members.
        self.etcd_urls = self.quorum.urls if self.quorum is not None else [self.etcd.url]
        #: Host name to the namespace its nodes run in, and their address.
        self.where = {name: "a" if loopback else name for name in PORTS}
        addresses = {name: "127.0.0.1" if loopback else network[name].address for name in PORTS}
        ports = {f"p{name}": port for name, port in PORTS.items()}
        self.path = directory / "cluster.toml"
        pools = {
            f"pools_{host}": json.dumps(["celery", *(["ticks"] if host in ticks_on else [])])
            for host in ("b", "c")
        }
        second = SERVICES_B.format(ps=SERVICES_B_PORT, **addresses) if services_b else ""
        text = CLUSTER.format(
            endpoints=", ".join(f'"{url}"' for url in self.etcd_urls),
            ttl=TTL,
            services_b=second,
            **addresses,
            **ports,
            **pools,
        )
        if periodic_every is not None:
            text += PERIODIC.format(every=periodic_every)
        if forwarding_router:
            text += FORWARD
        self.path.write_text(text)
        # Made once, before any host starts (as on real hosts: made on one, copied).
        ensure_dev_secrets(load_cluster(self.path, cluster_app()))
        self.env = {**os.environ, RECORDS: str(self.records)}
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT), self.env.get("PYTHONPATH", "")) if p
        )
        self.ups: dict[str, subprocess.Popen[bytes]] = {}
        self.pids: dict[str, int] = {}  # node name to the pid of its process
        self.etcd_process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Hosts:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self, order: Sequence[str] = (), only: Sequence[str] = tuple(PORTS)) -> None:
        """Start etcd, then the ``host up`` of each host of ``only``: at once, or
        one after another in ``order``, each once the one before it is ready
        (so that the first one's beat takes the scheduler role)."""
        self.start_etcd()
        for host in order:
            self.start_host(host)
        for host in only:
            if host not in self.ups:
                self._host_up(host)
        for host in only:
            if host not in order:
                self._wait_ready(host)

    def start_host(self, host: str) -> None:
        """Start ``host``'s ``host up`` and wait (bounded) until it is ready."""
        self._host_up(host)
        self._wait_ready(host)

    def _host_up(self, host: str) -> None:
        self.ups[host] = self.network.run(
            self.where[host],
            [*ACTORCTL, "host", "up", str(self.path), "--host", host],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=ROOT,
        )

    def _wait_ready(self, host: str) -> None:
        said = wait_for_output(self.ups[host], f"host {host!r} ready", timeout=READY)
        self.pids.update((node, int(pid)) for node, pid in _READY_LINE.findall(said))

    def start_etcd(self) -> None:
        """Start etcd on host a (on its data directory: again after :meth:`kill_etcd`,
        with what it held), and wait (bounded) until it answers; with
        ``etcd_quorum``, start its three members, once."""
        if self.quorum is not None:
            self.quorum.start()
            return
        assert self.etcd_process is None or self.etcd_process.poll() is not None
        with (self.directory / "etcd.log").open("ab") as log:
            self.etcd_process = self.network.run(
                "a", self.etcd.command(), stdout=log, stderr=subprocess.STDOUT
            )
        waiter = self.network.run(
            "a", [sys.executable, "-c", WAIT_ETCD, self.etcd.url], stdout=subprocess.PIPE
        )
        wait_for_output(waiter, "etcd up", timeout=READY)

    def kill_etcd(self) -> None:
        """SIGKILL the etcd :meth:`start_etcd` started, by its PID, and reap it."""
        assert self.etcd_process is not None
        os.kill(self.etcd_process.pid, signal.SIGKILL)
        self.etcd_process.wait(timeout=10)

    def holder(self, role: str = "scheduler") -> str:
        """The address of the beat that holds the scheduler role now (the name
        of the node that holds ``role``, for ``services``), read from etcd on
        host a ("" when none holds it)."""
        reader = self.network.run(
            "a",
            [sys.executable, "-c", READ_HOLDER, self.etcd.url, "hosts", role],
            stdout=subprocess.PIPE,
        )
        out, _ = reader.communicate(timeout=30)
        lines = out.decode().strip().splitlines()
        return lines[-1].strip() if lines else ""

    def wait_holder(self, role: str, want: str, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds, and a process start) until etcd
        says ``want`` holds ``role``: told by a watch of its key, on host a."""
        argv = [self.etcd.url, "hosts", role, str(timeout), want]
        waiter = self.network.run(
            "a", [sys.executable, "-c", WAIT_HOLDER, *argv], stdout=subprocess.PIPE
        )
        wait_for_output(waiter, f"holder {want}", timeout=timeout + READY)
        waiter.wait(timeout=READY)

    def wait_nodes(self, nodes: Sequence[str], want: str, timeout: float) -> None:
        """Wait (bounded) until every node of ``nodes`` is registered in etcd's
        directory (``want="present"``), or none is (``"absent"``): told by the
        directory's watch, in a process on host a."""
        argv = [self.etcd.url, "hosts", str(timeout), want, *nodes]
        waiter = self.network.run(
            "a", [sys.executable, "-c", WAIT_NODES, *argv], stdout=subprocess.PIPE
        )
        wait_for_output(waiter, f"nodes {want}", timeout=timeout + READY)
        waiter.wait(timeout=READY)

    def status(self) -> str:
        """What ``actorctl cluster status FILE`` prints, run on host a."""
        return self.cli("cluster", "status", str(self.path))

    def cli(self, *args: str) -> str:
        """What ``actorctl ARGS...`` prints, run on host a; it must succeed."""
        run = self.network.run(
            "a",
            [*ACTORCTL, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=ROOT,
        )
        out, _ = run.communicate(timeout=60)
        assert run.returncode == 0, out.decode(errors="replace")
        return out.decode(errors="replace")

    def host_of(self, address: str) -> str:
        """The host whose nodes listen at ``address`` (an actor's URL)."""
        for host, port in [*PORTS.items(), ("b", SERVICES_B_PORT)]:
            if f":{port}/" in address:
                return host
        raise AssertionError(f"no host listens at {address!r}")

    def wait_ran(self, count: int, timeout: float = READY) -> None:
        """Wait (at most ``timeout`` seconds) until ``work`` has run ``count`` times in all."""
        wait_written(
            lambda: f"{len(runs(self.records))} runs of work, not {count}",
            lambda: len(runs(self.records)) >= count,
            [self.records],
            timeout,
        )

    def wait_runs(self, pids: dict[int, int], timeout: float = READY) -> None:
        """Wait (at most ``timeout`` seconds) until each pid of ``pids`` (a
        node's process) made that many runs of ``work`` at least."""

        def made() -> Counter[int]:
            return Counter(pid for _, pid in runs(self.records))

        wait_written(
            lambda: f"runs by pid: {made()}, wanted {pids}",
            lambda: all(made()[pid] >= n for pid, n in pids.items()),
            [self.records],
            timeout,
        )

    # -- the periodic task ``tick`` (with ``periodic_every``) --------------------------

    def due_times(self) -> Counter[float]:
        """How many times each due time of ``tick`` ran (its task id names it)."""
        found: Counter[float] = Counter()
        for task_id, _ in runs(self.records, PERIODIC_RUNS):
            when = task_id.rpartition("@")[2]
            due = datetime.datetime.strptime(when, "%Y-%m-%dT%H:%M:%S.%fZ")
            found[due.replace(tzinfo=datetime.UTC).timestamp()] += 1
        return found

    def ticks(self) -> int:
        """How many times ``tick`` has run in all."""
        return sum(self.due_times().values())

    def wait_ticks(self, count: int, timeout: float = READY) -> None:
        """Wait (bounded) until ``tick`` has run ``count`` times in all: this
        returns just after a run was recorded, a due time away from the next."""
        wait_written(
            lambda: f"tick ran {self.ticks()} times, not {count}",
            lambda: self.ticks() >= count,
            [self.records],
            timeout,
        )

    def logged(self, event: str) -> list[dict[str, Any]]:
        """Every ``event`` line of every node's log, in the order they were written."""
        found = []
        for path in sorted((self.directory / "logs").glob("*.log")):
            for line in path.read_text().splitlines():
                if f'"{event}"' in line:
                    found.append(json.loads(line))
        return sorted(found, key=lambda line: float(line["timestamp"]))

    def ticks_skipped_and_twice(self, every: float) -> tuple[list[float], list[float]]:
        """The due times of ``tick``, every ``every`` seconds from the first
        that ran to the last, that neither ran nor were stood for by a catch-up
        firing (its log line says how many it stands for); and those that ran
        more than once."""
        ran = self.due_times()
        stood_for: set[float] = set()
        for line in self.logged("actorctl:beat:catching-up"):
            latest, missed = float(line["fires_once"]), int(line["missed"])
            stood_for.update(latest - every * i for i in range(1, missed))
        first, last = min(ran), max(ran)
        every_due = [first + every * i for i in range(round((last - first) / every) + 1)]
        skipped = [due for due in every_due if due not in ran and due not in stood_for]
        return skipped, [due for due, n in ran.items() if n > 1]

    def registered(self) -> dict[str, int]:
        """Node name to the lease its record in etcd lives under, read from host a."""
        lister = self.network.run(
            "a", [sys.executable, "-c", LIST_NODES, self.etcd.url, "hosts"], stdout=subprocess.PIPE
        )
        out, _ = lister.communicate(timeout=30)
        found: dict[str, int] = json.loads(out.decode().strip().splitlines()[-1])
        return found

    def caller(
        self, count: int, timeout: float, seconds: float = 0.1, ids: str = "sent.txt"
    ) -> subprocess.Popen[bytes]:
        """tests/apps/hosts_caller.py on host a, sending ``count`` tasks of ``seconds``
        each (their ids written to ``ids`` beside the cluster file)."""
        argv = [str(self.path), str(count), str(timeout), str(seconds), ids]
        return self.network.run(
            "a",
            [sys.executable, "-m", "tests.apps.hosts_caller", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=ROOT,
        )

    def kill_host(self, host: str) -> None:
        """SIGKILL every process of ``host``: its ``host up``, then its nodes (by pid)."""
        os.kill(self.ups[host].pid, signal.SIGKILL)
        for node, pid in self.pids.items():
            if node.endswith(f"-{host}") or (host == "a" and node == "services"):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM each ``host up`` still running, and wait (bounded) until it
        stopped its nodes; SIGKILL any node left over, by pid, then etcd."""
        for process in self.ups.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.ups.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=20)
        for pid in self.pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.etcd_process is not None and self.etcd_process.poll() is None:
            self.kill_etcd()
        if self.quorum is not None:
            self.quorum.kill()
