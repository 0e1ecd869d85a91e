"""A cluster on three hosts, its membership in etcd (issue 18): ``actorctl host up``.

Hosts are network namespaces (tests/netns.py): etcd runs on host a, and each
host runs ``actorctl host up cluster.toml --host NAME``: a the services node
(the pool's router), b and c a worker node of the pool each; mutual TLS and
signed messages throughout (development certificates, dialled by IP address:
checked against the cluster CA). Each worker node registers in etcd under a
lease of TTL seconds, and the router follows etcd's directory.

A caller on host a (tests/hosts_caller.py, run in a's namespace) sends tasks
and waits for their results; each run is recorded with the pid of the node
that ran it (tests/hosts_app.py), so that the test counts: none lost, how many
ran twice, and on which hosts. etcd itself is started by its PID, so that a
test kills it (SIGKILL) and starts it again on its data. Skipped, naming the reason, where network
namespaces cannot be made (or etcd is not installed).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from actorctl.cluster import ensure_dev_secrets, load_cluster
from tests.etcd_server import EtcdServer
from tests.hosts_app import RECORDS, runs
from tests.netns import Network, open_network, wait_for_output

ROOT = Path(__file__).resolve().parent.parent
ACTORCTL = [sys.executable, "-m", "actorctl"]
TTL = 3  # seconds a node that died stays registered
CONNECT_TIMEOUT = 5.0  # the services node's: how long a peer is down before what it held moves
READY = 60.0  # seconds etcd, or a host's nodes, may take to start on a loaded 2-core machine
SLACK = 15.0  # seconds the machine's load may add to a bound
PORTS = {"a": 5701, "b": 5702, "c": 5703}

CLUSTER = """\
[cluster]
name = "hosts"
dev = true

[etcd]
endpoints = ["{etcd}"]
ttl = {ttl}

[[node]]
name = "services"
listen = "{a}:{pa}"
host = "a"
actors = "tests.hosts_app:app"
services = true

[[node]]
name = "worker-b"
listen = "{b}:{pb}"
host = "b"
actors = "tests.hosts_app:app"
pools = ["celery"]

[[node]]
name = "worker-c"
listen = "{c}:{pc}"
host = "c"
actors = "tests.hosts_app:app"
pools = ["celery"]
"""

#: Waits (at most 30 s) until the etcd at ARGV[1] answers, then says "etcd up".
WAIT_ETCD = """
import sys, trio
from actorctl.cluster._etcd import EtcdClient
from actorctl.cluster._etcd_wire import EtcdUnavailable

async def main(url):
    client = EtcdClient([url], timeout=1)
    with trio.fail_after(30):
        while True:
            try:
                await client.get("/ready")
                break
            except EtcdUnavailable:
                # etcd on this host is still starting, and nothing tells this
                # process when it is ready: try again shortly.
                await trio.sleep(0.1)
    print("etcd up", flush=True)

trio.run(main, sys.argv[1])
"""

#: Prints, as one JSON object, the node records of the cluster named ARGV[2]
#: in the etcd at ARGV[1]: node name to the lease each lives under.
LIST_NODES = """
import json, sys, trio
from actorctl.cluster._etcd import EtcdClient
from actorctl.cluster._node_record import nodes_prefix

async def main(url, cluster):
    prefix = nodes_prefix(cluster)
    snapshot = await EtcdClient([url], timeout=5).get_prefix(prefix)
    print(json.dumps({kv.key[len(prefix):]: kv.lease for kv in snapshot.kvs}), flush=True)

trio.run(main, sys.argv[1], sys.argv[2])
"""

_READY_LINE = re.compile(r"^node (\S+) ready at \S+ \(pid (\d+)\)", re.MULTILINE)


class Hosts:
    """etcd on host a and ``host up`` on each host, with what they said."""

    def __init__(self, network: Network, directory: Path) -> None:
        self.network = network
        self.directory = directory
        self.records = directory / "records"
        self.records.mkdir()
        self.etcd = EtcdServer(directory, host=network["a"].address)
        addresses = {name: network[name].address for name in PORTS}
        ports = {f"p{name}": port for name, port in PORTS.items()}
        self.path = directory / "cluster.toml"
        self.path.write_text(CLUSTER.format(etcd=self.etcd.url, ttl=TTL, **addresses, **ports))
        # Made once, before any host starts (as on real hosts: made on one, copied).
        ensure_dev_secrets(load_cluster(self.path))
        self.env = {**os.environ, RECORDS: str(self.records)}
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT), self.env.get("PYTHONPATH", "")) if p
        )
        self.ups: dict[str, subprocess.Popen[bytes]] = {}
        self.pids: dict[str, int] = {}  # node name to the pid of its process
        self.etcd_process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.start_etcd()
        for host in PORTS:
            self.ups[host] = self.network.run(
                host,
                [*ACTORCTL, "host", "up", str(self.path), "--host", host],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=ROOT,
            )
        for host, process in self.ups.items():
            said = wait_for_output(process, f"host {host!r} ready", timeout=READY)
            self.pids.update((node, int(pid)) for node, pid in _READY_LINE.findall(said))

    def start_etcd(self) -> None:
        """Start etcd on host a (on its data directory: again after :meth:`kill_etcd`,
        with what it held), and wait (bounded) until it answers."""
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

    def registered(self) -> dict[str, int]:
        """Node name to the lease its record in etcd lives under, read from host a."""
        lister = self.network.run(
            "a", [sys.executable, "-c", LIST_NODES, self.etcd.url, "hosts"], stdout=subprocess.PIPE
        )
        out, _ = lister.communicate(timeout=30)
        found: dict[str, int] = json.loads(out.decode().strip().splitlines()[-1])
        return found

    def caller(self, count: int, timeout: float) -> subprocess.Popen[bytes]:
        """tests/hosts_caller.py on host a, sending ``count`` tasks."""
        return self.network.run(
            "a",
            [sys.executable, "-m", "tests.hosts_caller", str(self.path), str(count), str(timeout)],
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
        stopped its nodes; SIGKILL any node left over, by pid."""
        for process in self.ups.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.ups.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=20)
        for pid in self.pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    with open_network(("a", "b", "c")) as network:
        running = Hosts(network, tmp_path)
        try:
            running.start()
            yield running
        finally:
            running.stop()


def counted(hosts: Hosts, sent: list[str]) -> tuple[list[str], list[str], Counter[int]]:
    """The tasks sent that never ran, those that ran more than once, and how
    many runs each node's pid made."""
    done = runs(hosts.records)
    times = Counter(task for task, _ in done)
    lost = [task for task in sent if task not in times]
    twice = [task for task, n in times.items() if n > 1]
    return lost, twice, Counter(pid for _, pid in done)


def leave_time(hosts: Hosts, node: str) -> float:
    """When the services node saw ``node`` leave etcd's directory (its log's wall clock)."""
    deadline = time.monotonic() + READY
    while time.monotonic() < deadline:
        log = (hosts.directory / "logs" / "services.log").read_text()
        for line in log.splitlines():
            if '"actorctl:membership:leave"' in line and f'"node":"{node}"' in line:
                when: float = json.loads(line)["timestamp"]
                return when
        time.sleep(0.05)  # another process writes the log: polled
    raise AssertionError(f"the services node did not see {node} leave")


def finish(caller: subprocess.Popen[bytes], timeout: float) -> str:
    out, _ = caller.communicate(timeout=timeout)
    return out.decode(errors="replace")


def test_tasks_from_a_caller_on_one_host_run_on_the_workers_of_two_others(hosts: Hosts) -> None:
    # Given the services node on host a and a worker node on each of b and c,
    # registered in etcd
    # When a caller on host a sends 300 tasks and waits for their results
    caller = hosts.caller(300, timeout=30)
    said = finish(caller, timeout=READY + 30)

    # Then every result came back, every task ran, and both b and c ran some
    assert "results 300 0" in said, said[-3000:]
    sent = (hosts.directory / "sent.txt").read_text().split()
    lost, twice, by_pid = counted(hosts, sent)
    assert lost == []
    print(f"ran twice: {len(twice)}")  # reported: at least once, not exactly once
    assert by_pid[hosts.pids["worker-b"]] > 0, by_pid
    assert by_pid[hosts.pids["worker-c"]] > 0, by_pid

    # When host c is stopped gracefully (SIGTERM)
    up = hosts.ups["c"]
    stopped = time.time()
    up.send_signal(signal.SIGTERM)
    said = finish(up, timeout=30)

    # Then it stopped, and its node left etcd on its way out (its lease revoked):
    # the services node saw it leave sooner than its lease could have run out
    # (renewed every third of the TTL, it had two thirds of it left at least)
    assert "host 'c' stopped" in said, said[-2000:]
    left = leave_time(hosts, "worker-c")
    assert left - stopped < TTL * 2 / 3, f"left {left - stopped:.2f} s after SIGTERM"


@pytest.mark.parametrize(
    ("table", "args", "error"),
    [
        ("", ["--host", "z"], "host 'z' runs no node: the file's hosts are a"),
        ("", ["--host", "a"], "no etcd to register in: add an [etcd] table"),
        (
            '[etcd]\nendpoints = ["http://127.0.0.1:9", "http://127.0.0.1:10"]\n',
            ["--host", "a"],
            "etcd does not answer at http://127.0.0.1:9, http://127.0.0.1:10",
        ),
    ],
)
def test_host_up_refuses_a_host_without_nodes_no_etcd_or_an_etcd_that_does_not_answer(
    tmp_path: Path, table: str, args: list[str], error: str
) -> None:
    # Given a cluster file whose one node runs on host a
    path = tmp_path / "cluster.toml"
    path.write_text(
        f'[cluster]\nname = "x"\ninsecure = true\n{table}'
        '[[node]]\nname = "n"\nlisten = "127.0.0.1:9"\nhost = "a"\n'
    )
    # When host up is asked to run it
    done = subprocess.run(
        [*ACTORCTL, "host", "up", str(path), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    # Then it refuses, saying why, and starts nothing
    assert done.returncode != 0
    assert error in done.stderr, done.stderr
    assert "starting host" not in done.stdout


def test_a_host_lost_has_its_tasks_run_on_the_other_within_the_ttl_and_resend_time(
    hosts: Hosts,
) -> None:
    # Given a caller on host a with 400 tasks on their way to b and c
    caller = hosts.caller(400, timeout=60)
    wait_for_output(caller, "sent", timeout=READY)
    deadline = time.monotonic() + READY
    while len(runs(hosts.records)) < 40:  # some have run: the others run or wait
        assert time.monotonic() < deadline, "no task ran"
        time.sleep(0.05)  # another process writes the records: polled

    # When every process of host b is killed with SIGKILL
    hosts.kill_host("b")
    killed = time.monotonic()
    sent = (hosts.directory / "sent.txt").read_text().split()

    # Then every task still runs, on c, within the lease's TTL plus the resend time
    bound = TTL + CONNECT_TIMEOUT + SLACK
    while counted(hosts, sent)[0]:
        assert time.monotonic() - killed < bound, f"{len(counted(hosts, sent)[0])} never ran"
        time.sleep(0.1)  # another process writes the records: polled
    print(f"every task ran {time.monotonic() - killed:.1f} s after host b was lost")
    said = finish(caller, timeout=60)
    assert "results 400 0" in said, said[-3000:]
    lost, twice, by_pid = counted(hosts, sent)
    assert lost == []
    print(f"ran twice: {len(twice)}")  # those b ran but could not settle
    assert by_pid[hosts.pids["worker-c"]] > 0, by_pid
    # ... and what b held unsettled when it died was moved by the services
    # node's backlog once b's node could not be reached (its log says so)
    b = f"{hosts.network['b'].address}:{PORTS['b']}"
    log = (hosts.directory / "logs" / "services.log").read_text()
    moved = [
        line
        for line in log.splitlines()
        if '"actorctl:router:rerouted"' in line and b in line and "peer-unavailable" in line
    ]
    assert moved, "nothing b held was moved"
    print(f"{len(moved)} tasks b held were sent to c")


def wait_logged(hosts: Hosts, node: str, event: str, timeout: float = READY) -> None:
    """Wait (at most ``timeout`` seconds) until ``node``'s log has an ``event`` line."""
    path = hosts.directory / "logs" / f"{node}.log"
    deadline = time.monotonic() + timeout
    while f'"{event}"' not in path.read_text():
        assert time.monotonic() < deadline, f"{node} logged no {event} in {timeout} s"
        time.sleep(0.05)  # another process writes the log: polled


def wait_runs(hosts: Hosts, pids: dict[int, int], timeout: float = READY) -> None:
    """Wait (at most ``timeout`` seconds) until each pid of ``pids`` made that
    many runs at least."""
    deadline = time.monotonic() + timeout
    while True:
        made = Counter(pid for _, pid in runs(hosts.records))
        if all(made[pid] >= n for pid, n in pids.items()):
            return
        assert time.monotonic() < deadline, f"runs by pid: {made}, wanted {pids}"
        time.sleep(0.05)  # another process writes the records: polled


def test_etcd_restarted_during_the_run_nodes_keep_serving_and_register_again(
    hosts: Hosts,
) -> None:
    # Given every node registered in etcd, and a caller on host a with 1600
    # tasks on their way to b and c (10 s of work: 8 at a time on each, 100 ms
    # each), some of them run
    nodes = {"services", "worker-b", "worker-c"}
    assert set(hosts.registered()) == nodes
    b, c = hosts.pids["worker-b"], hosts.pids["worker-c"]
    caller = hosts.caller(1600, timeout=60)
    wait_for_output(caller, "sent", timeout=READY)
    wait_runs(hosts, {b: 20, c: 20})

    # When etcd is killed with SIGKILL
    hosts.kill_etcd()
    killed = time.monotonic()
    made = Counter(pid for _, pid in runs(hosts.records))

    # Then every node notices (its lease's renewal fails), and tasks keep
    # running on both b and c meanwhile, for longer than a lease's ttl (80 a
    # second on each): the directory each node has is kept, none is dropped
    for node in nodes:
        wait_logged(hosts, node, "actorctl:membership:renewal-failed", timeout=TTL + SLACK)
    more = 80 * TTL
    wait_runs(hosts, {b: made[b] + more, c: made[c] + more}, timeout=TTL + SLACK)
    down = time.monotonic() - killed
    assert caller.poll() is None, "the caller finished before etcd was back"

    # When etcd starts again on the same data directory
    hosts.start_etcd()
    restarted = time.monotonic()

    # Then every node registers again (its key is back in etcd) ...
    for node in nodes:
        wait_logged(hosts, node, "actorctl:membership:back", timeout=TTL + SLACK)
    assert set(hosts.registered()) == nodes
    print(f"etcd down {down:.1f} s; every node back {time.monotonic() - restarted:.1f} s after")

    # ... every task ran, and no node was dropped from routing meanwhile
    said = finish(caller, timeout=60)
    assert "results 1600 0" in said, said[-3000:]
    sent = (hosts.directory / "sent.txt").read_text().split()
    lost, twice, by_pid = counted(hosts, sent)
    print(f"lost: {len(lost)}, ran twice: {len(twice)}, runs by pid: {dict(by_pid)}")
    assert lost == []
    log = (hosts.directory / "logs" / "services.log").read_text()
    assert '"actorctl:membership:leave"' not in log
