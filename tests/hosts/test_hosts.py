"""A cluster on three hosts, its membership in etcd (issue 18): ``actorctl host up``.

Hosts are network namespaces (tests/support/netns.py): etcd runs on host a, and each
host runs ``actorctl host up cluster.toml --host NAME``: a the services node
(the pool's router), b and c a worker node of the pool each; mutual TLS and
signed messages throughout (development certificates, dialled by IP address:
checked against the cluster CA). Each worker node registers in etcd under a
lease of TTL seconds, and the router follows etcd's directory.

A caller on host a (tests/apps/hosts_caller.py, run in a's namespace) sends tasks
and waits for their results; each run is recorded with the pid of the node
that ran it (tests/apps/hosts_app.py), so that the test counts: none lost, how many
ran twice, and on which hosts. etcd itself is started by its PID, so that a
test kills it (SIGKILL) and starts it again on its data. Skipped, naming the reason, where network
namespaces cannot be made (or etcd is not installed).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.apps.hosts_app import runs
from tests.support.etcd_server import running_etcd
from tests.support.filewatch import wait_written
from tests.support.harness import free_port
from tests.support.hosts_cluster import ACTORCTL, PORTS, READY, TTL, Hosts
from tests.support.netns import Network, open_network, wait_for_output

CONNECT_TIMEOUT = 5.0  # the services node's: how long a peer is down before what it held moves
SLACK = 15.0  # seconds the machine's load may add to a bound
EVERY = 1  # seconds between the periodic task's due times


@pytest.fixture
def network() -> Iterator[Network]:
    """Hosts a, b and c (network namespaces) for the test."""
    with open_network(("a", "b", "c")) as made:
        yield made


@pytest.fixture
def hosts(network: Network, tmp_path: Path) -> Iterator[Hosts]:
    """The three hosts' cluster, started."""
    with Hosts(network, tmp_path) as running:
        running.start()
        yield running


def counted(hosts: Hosts, sent: list[str]) -> tuple[list[str], list[str], Counter[int]]:
    """The tasks sent that never ran, those that ran more than once, and how
    many runs each node's pid made."""
    done = runs(hosts.records)
    times = Counter(task for task, _ in done)
    lost = [task for task in sent if task not in times]
    twice = [task for task, n in times.items() if n > 1]
    return lost, twice, Counter(pid for _, pid in done)


def leave_time(hosts: Hosts, node: str) -> float:
    """When the services node saw ``node`` leave etcd's directory (its log's
    wall clock), woken by the writes to the logs."""
    found: list[float] = []

    def left() -> bool:
        log = (hosts.directory / "logs" / "services.log").read_text()
        found.extend(
            json.loads(line)["timestamp"]
            for line in log.splitlines()
            if '"actorctl:membership:leave"' in line and f'"node":"{node}"' in line
        )
        return bool(found)

    wait_written(f"the services node saw {node} leave", left, [hosts.directory / "logs"], READY)
    return found[0]


def finish(caller: subprocess.Popen[bytes], timeout: float) -> str:
    out, _ = caller.communicate(timeout=timeout)
    return out.decode(errors="replace")


def test_tasks_from_a_caller_on_one_host_run_on_two_others_one_of_which_joins_late(
    network: Network, tmp_path: Path
) -> None:
    with Hosts(network, tmp_path) as hosts:
        # Given the services node on host a and a worker node on b, registered in
        # etcd, and host c not yet started
        hosts.start(only=("a", "b"))
        assert set(hosts.registered()) == {"services", "worker-b"}
        # When a caller on host a sends 100 tasks, they all run on b (those first
        # sent to c's address, from the file, come back to b once it cannot be reached)
        said = finish(hosts.caller(100, timeout=60), timeout=60 + READY)
        assert "results 100 0" in said, said[-3000:]
        first = (hosts.directory / "sent.txt").read_text().split()

        # When host c starts, late
        hosts.start_host("c")
        joined = time.monotonic()
        b, c = hosts.pids["worker-b"], hosts.pids["worker-c"]
        # Then the services node, told by etcd that c joined, connects to it
        # within seconds, though its breaker for c had opened while c was away
        endpoint = f"{hosts.network['c'].address}:{PORTS['c']}"
        services_log = hosts.directory / "logs" / "services.log"
        session = f'"peer":"{endpoint}","session"'  # an actorctl:peer:session line
        wait_written(
            "the services node connected to c",
            lambda: session in services_log.read_text(),
            [services_log.parent],
            joined + TTL + SLACK - time.monotonic(),
        )
        print(f"the services node reached c {time.monotonic() - joined:.1f} s after it was ready")
        # And when a caller on host a sends 160 more tasks, of 300 ms, c runs its share
        caller = hosts.caller(160, timeout=30, seconds=0.3)
        hosts.wait_runs({c: 20}, timeout=SLACK)
        # And every result came back, every task ran, and both b and c ran later ones
        said = finish(caller, timeout=READY + 30)
        assert "results 160 0" in said, said[-3000:]
        later = (hosts.directory / "sent.txt").read_text().split()
        lost, twice, _ = counted(hosts, first + later)
        done = dict(runs(hosts.records))
        by_pid = Counter(done[task] for task in later)
        print(f"lost {len(lost)}, ran twice {len(twice)}, later runs by pid {dict(by_pid)}")
        assert lost == []
        assert by_pid[b] > 0, by_pid
        assert by_pid[c] > 0, by_pid
        # ... and the nodes saw c join etcd's directory
        assert "worker-c" in [m["node"] for m in hosts.logged("actorctl:membership:join")]

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

        # When an operator on host a sets a rate limit, with no Controller
        path = str(hosts.path)
        said = hosts.cli("control", "rate-limit", path, "hosts.work", "50/s")
        # Then every node registered in etcd that runs the task app took it
        assert "hosts.work: rate limit 50/s on 2 node(s): services, worker-b" in said, said
        # When the operator asks the cluster down
        said = hosts.cli("cluster", "down", path)
        # Then every host up still running stops its nodes and exits, and none
        # is registered any more
        assert "cluster 'hosts' down: every host stopped its nodes" in said, said
        for host in ("a", "b"):
            said = finish(hosts.ups[host], timeout=30)
            assert f"host {host!r} stopped" in said, said[-2000:]
            assert hosts.ups[host].returncode == 0
        assert hosts.registered() == {}


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
        (
            '[etcd]\nendpoints = ["https://127.0.0.1:9"]\ncert = "client.pem"\n',
            ["--host", "a"],
            "key 'etcd.key' is missing: etcd.cert is given",
        ),
        (
            '[etcd]\nendpoints = ["https://127.0.0.1:9"]\ncertfile = "client.pem"\n',
            ["--host", "a"],
            "etcd.certfile",
        ),
        (
            '[etcd]\nendpoints = ["https://127.0.0.1:9"]\nca = "etcd/ca.pem"\n',
            ["--host", "a"],
            "etcd/ca.pem does not exist",
        ),
        (
            '[etcd]\nendpoints = ["http://127.0.0.1:9"]\nuser = "actorctl"\n',
            ["--host", "a"],
            "key 'etcd.password_file' is missing: etcd.user is given",
        ),
        (
            '[etcd]\nendpoints = ["http://127.0.0.1:9"]\nuser = "actorctl"\n'
            'password_file = "etcd/password"\n',
            ["--host", "a"],
            "etcd/password: cannot be read",
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


def test_a_host_lost_has_its_tasks_run_elsewhere_and_the_scheduler_role_it_held_move(
    network: Network, tmp_path: Path
) -> None:
    with Hosts(network, tmp_path, periodic_every=EVERY, ticks_on=("c",)) as hosts:
        # Given host b started first, so that its beat holds the scheduler
        # role (tick runs every second, on c)
        hosts.start(order=("b",))
        hosts.wait_ticks(3)
        holder = hosts.holder()
        assert hosts.host_of(holder) == "b", holder
        # And a caller on host a with 400 tasks of 300 ms on their way to b and c
        caller = hosts.caller(400, timeout=60, seconds=0.3)
        wait_for_output(caller, "sent", timeout=READY)
        hosts.wait_ran(40)  # some have run: the others run or wait

        # When every process of host b is killed with SIGKILL (just after a
        # run of tick: a due time away from the next firing)
        hosts.wait_ticks(hosts.ticks() + 1)
        hosts.kill_host("b")
        killed = time.monotonic()
        ticks = hosts.ticks()
        sent = (hosts.directory / "sent.txt").read_text().split()

        # Then every task still runs, on c, within the lease's TTL plus the resend time
        wait_written(
            lambda: f"every task ran ({len(counted(hosts, sent)[0])} never did)",
            lambda: not counted(hosts, sent)[0],
            [hosts.records],
            killed + TTL + CONNECT_TIMEOUT + SLACK - time.monotonic(),
        )
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

        # And the scheduler role moved to another host's beat once b's lease
        # ran out in etcd: tick ran on, no due time twice or skipped
        hosts.wait_ticks(ticks + 3, timeout=TTL + 3 * EVERY + SLACK)
        now = hosts.holder()
        assert now, "no beat holds the scheduler role"
        assert hosts.host_of(now) in ("a", "c"), now
        skipped, ticks_twice = hosts.ticks_skipped_and_twice(EVERY)
        print(f"scheduler {holder} -> {now}: ticks skipped {skipped}, twice {ticks_twice}")
        assert ticks_twice == []
        assert skipped == []
        # ... each new holder with a greater fence than the last
        fences = [int(m["fence"]) for m in hosts.logged("actorctl:beat:leader")]
        assert fences == sorted(fences), fences
        assert fences[-1] > fences[0], fences

        # And cluster status, asked on host a, shows each host's nodes as etcd
        # and the nodes say they are: b's gone, and who holds the scheduler role
        status = hosts.status()
        print(status)
        assert f"scheduler {now}" in status
        assert "worker-b  node  not-registered" in status
        for node in ("services", "worker-c"):
            assert f"{node}  node  registered" in status
        assert status.count("/actors  supervisor  running") == 2, status  # each running node's

        # And with no Controller, an operator on host a lists the periodic tasks
        # (asked of the beat that holds the role now), and the dead letters of
        # each registered node (none: a node that did not answer would fail it)
        path = str(hosts.path)
        said = hosts.cli("schedule", "list", path, "--json")
        (row,) = json.loads(said.splitlines()[-1])
        assert (row["name"], row["schedule"]) == ("tick", "every 1s"), row
        assert row["task"] == "hosts.beat_tick", row
        assert row["last"] is not None, row
        said = hosts.cli("deadletters", "list", path)
        assert said.splitlines()[-1] == "no dead letters", said
        # When the operator stops worker-c for good
        said = hosts.cli("control", "shutdown", path, "worker-c")
        # Then its host up stopped it and runs on, and it left etcd
        assert "node 'worker-c' stopped" in said, said
        assert set(hosts.registered()) == {"services"}  # b was lost before: a's node stays
        assert hosts.ups["c"].poll() is None
        assert any(m["node"] == "worker-c" for m in hosts.logged("actorctl:host:stop-node"))


def test_the_services_nodes_host_lost_the_services_role_moves_and_what_it_held_runs_once_back(
    network: Network, tmp_path: Path
) -> None:
    with Hosts(network, tmp_path, services_b=True) as hosts:
        # Given two services nodes, services on a and services-b on b, and b
        # started first, so that services-b holds the services role
        hosts.start(order=("b",))
        assert hosts.holder("services") == "services-b"
        # And a caller on host a with 300 tasks of 300 ms, sent through services-b's router
        first = hosts.caller(300, timeout=180, seconds=0.3)
        wait_for_output(first, "sent", timeout=READY)
        sent = (hosts.directory / "sent.txt").read_text().split()
        hosts.wait_ran(30)  # some have run: the others run or wait

        # When every process of host b is killed with SIGKILL
        hosts.kill_host("b")
        killed = time.monotonic()

        # Then the services role moves to the services node on a once
        # services-b's lease ran out in etcd
        hosts.wait_holder("services", "services", timeout=TTL + SLACK)
        print(f"services role moved within {time.monotonic() - killed:.1f} s of the kill")
        # ... and, once worker-b's lease ran out too (each node's runs out on
        # its own clock), a caller that sends now has its tasks taken by a's router
        # and run on c, while b is gone
        hosts.wait_nodes(["services-b", "worker-b"], "absent", timeout=TTL + SLACK)
        second = hosts.caller(100, timeout=60, ids="sent-after.txt")
        said = finish(second, timeout=60 + READY)
        assert "results 100 0" in said, said[-3000:]
        # ... which did not wait for b's nodes to answer: etcd said they are gone
        [line] = [json.loads(x[7:]) for x in said.splitlines() if x.startswith("logged ")]
        assert line["message_type"] == "actorctl:client:not-registered"
        assert {hosts.host_of(node) for node in line["nodes"]} == {"b"}, line
        assert len(line["nodes"]) == 2, line  # services-b and worker-b
        after = (hosts.directory / "sent-after.txt").read_text().split()
        lost, twice, _ = counted(hosts, after)
        assert lost == []
        # (none of these ran twice; the first caller's that b ran but could
        # not settle may have run again on c by now: counted below)
        assert [task for task in twice if task in set(after)] == []
        made = {pid for task, pid in runs(hosts.records) if task in set(after)}
        assert made == {hosts.pids["worker-c"]}, made

        # When host b comes back (its nodes on their stores)
        hosts.start_host("b")

        # Then every task of the first caller ran and its result came back
        # (what services-b had taken on, services took over from its copy of
        # b's store, and b, back on its store, runs what it still held: at
        # least once)
        said = finish(first, timeout=180)
        assert "results 300 0" in said, said[-3000:]
        lost, twice, _ = counted(hosts, sent)
        assert lost == []
        print(f"ran twice: {len(twice)}")  # those b ran but could not settle
        # ... and the services role stays where it is
        assert hosts.holder("services") == "services"
        status = hosts.status()
        assert "services services" in status, status


def wait_logged(hosts: Hosts, node: str, event: str, timeout: float = READY) -> None:
    """Wait (at most ``timeout`` seconds) until ``node``'s log has an ``event`` line."""
    path = hosts.directory / "logs" / f"{node}.log"
    wait_written(
        f"{node} logged {event}", lambda: f'"{event}"' in path.read_text(), [path.parent], timeout
    )


def test_etcd_restarted_during_the_run_nodes_keep_serving_and_register_again(
    hosts: Hosts,
) -> None:
    # Given every node registered in etcd, and a caller on host a with 800
    # tasks on their way to b and c (15 s of work: 8 at a time on each, 300 ms
    # each), some of them run
    nodes = {"services", "worker-b", "worker-c"}
    assert set(hosts.registered()) == nodes
    b, c = hosts.pids["worker-b"], hosts.pids["worker-c"]
    # (the caller sends one at a time, each confirmed, about as fast as two
    # hosts would run 100 ms tasks: 300 ms ones leave most still to run once
    # it has sent them all)
    caller = hosts.caller(800, timeout=60, seconds=0.3)
    wait_for_output(caller, "sent", timeout=READY)
    hosts.wait_runs({b: 20, c: 20})

    # When etcd is killed with SIGKILL
    hosts.kill_etcd()
    killed = time.monotonic()
    made = Counter(pid for _, pid in runs(hosts.records))

    # Then every node notices (its lease's renewal fails), and tasks keep
    # running on both b and c meanwhile, for longer than a lease's ttl (25 a
    # second on each): the directory each node has is kept, none is dropped
    for node in nodes:
        wait_logged(hosts, node, "actorctl:membership:renewal-failed", timeout=TTL + SLACK)
    more = 25 * TTL
    hosts.wait_runs({b: made[b] + more, c: made[c] + more}, timeout=TTL + SLACK)
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
    assert "results 800 0" in said, said[-3000:]
    sent = (hosts.directory / "sent.txt").read_text().split()
    lost, twice, by_pid = counted(hosts, sent)
    print(f"lost: {len(lost)}, ran twice: {len(twice)}, runs by pid: {dict(by_pid)}")
    assert lost == []
    log = (hosts.directory / "logs" / "services.log").read_text()
    assert '"actorctl:membership:leave"' not in log


def cluster_status(
    path: Path,
    timeout: float,
    command: tuple[str, ...] = ("cluster", "status"),
    extra: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """``actorctl cluster status FILE`` (or another ``command`` that takes the
    file, ``extra`` and ``--timeout``), run here (in the test's namespace)."""
    return subprocess.run(
        [*ACTORCTL, *command, str(path), *extra, "--timeout", str(timeout)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def cluster_across(path: Path, etcd_table: str) -> Path:
    """Write a cluster file across hosts at ``path``: its one node ``n`` on host
    a, ``etcd_table`` the keys of its [etcd] table, and a Controller nobody runs."""
    path.write_text(
        f'[cluster]\nname = "x"\ninsecure = true\ncontroller = "127.0.0.1:{free_port()}"\n'
        f"[etcd]\n{etcd_table}"
        '[[node]]\nname = "n"\nlisten = "127.0.0.1:9"\nhost = "a"\n'
    )
    return path


def test_cluster_status_reads_an_etcd_that_asks_for_client_certificates_with_the_files_certs(
    tmp_path: Path,
) -> None:
    with running_etcd(tmp_path / "etcd", client_auth=True) as etcd:
        assert etcd.client_tls is not None
        # Given a cluster file across hosts whose [etcd] names etcd's CA and a
        # client certificate (etcd runs with --client-cert-auth), and no Controller
        files = etcd.client_tls
        path = cluster_across(
            tmp_path / "cluster.toml",
            f'endpoints = ["{etcd.url}"]\n'
            f'ca = "{files.ca}"\ncert = "{files.cert}"\nkey = "{files.key}"\n',
        )
        # When cluster status is asked
        done = cluster_status(path, timeout=5)
        # Then it read etcd over mutual TLS: no node is registered, nobody holds the role
        assert done.returncode == 0, done.stderr
        assert "etcd  cluster 'x'  membership  scheduler none" in done.stdout, done.stdout
        assert "n  node  not-registered" in done.stdout

        # When the file names no client certificate, etcd refuses it, and status says so
        path.write_text(
            path.read_text()
            .replace(f'cert = "{files.cert}"\n', "")
            .replace(f'key = "{files.key}"\n', "")
        )
        refused = cluster_status(path, timeout=5)
    assert refused.returncode == 1, refused
    assert "etcd does not answer" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr


def test_cluster_status_reads_an_etcd_whose_auth_is_on_as_the_files_user(tmp_path: Path) -> None:
    (tmp_path / "etcd").mkdir()
    with running_etcd(tmp_path / "etcd") as etcd:
        # Given an etcd whose auth is enabled (user root), and a cluster file
        # across hosts whose [etcd] names that user and the file of its password
        etcd.enable_auth("s3cret")
        (tmp_path / "password").write_text("s3cret\n")
        path = cluster_across(
            tmp_path / "cluster.toml",
            f'endpoints = ["{etcd.url}"]\nuser = "root"\npassword_file = "password"\n',
        )
        # When cluster status is asked
        done = cluster_status(path, timeout=5)
        # Then it read etcd as that user: no node is registered, nobody holds the role
        assert done.returncode == 0, done.stderr
        assert "etcd  cluster 'x'  membership  scheduler none" in done.stdout, done.stdout
        # When the password is wrong, etcd refuses the user, and status says so
        (tmp_path / "password").write_text("guess\n")
        refused = cluster_status(path, timeout=5)
    assert refused.returncode == 1, refused
    assert "etcd refused user 'root'" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr


NO_ETCD = ("cluster 'x': etcd does not answer", "tried http://127.0.0.1:9 (Connection refused)")


@pytest.mark.parametrize(
    ("command", "extra", "error"),
    [
        (("cluster", "status"), [], NO_ETCD),
        (("cluster", "down"), [], NO_ETCD),
        (("inspect", "stats"), [], NO_ETCD),
        (("deadletters", "list"), [], NO_ETCD),
        (("control", "shutdown"), ["n"], NO_ETCD),
        # --etcd wins over the file's [etcd]
        (
            ("schedule", "list"),
            ["--etcd", "http://127.0.0.1:8"],
            ("cluster 'x': etcd does not answer", "tried http://127.0.0.1:8 (Connection refused)"),
        ),
        # a misspelt node is named before etcd is asked anything
        (("control", "shutdown"), ["m"], ("no node 'm' in cluster 'x': its nodes are n",)),
    ],
)
def test_a_cluster_of_hosts_whose_etcd_does_not_answer_is_named_by_each_command_that_asks_it(
    tmp_path: Path, command: tuple[str, ...], extra: list[str], error: tuple[str, ...]
) -> None:
    # Given a cluster file across hosts whose etcd does not answer, and no Controller
    path = cluster_across(tmp_path / "cluster.toml", 'endpoints = ["http://127.0.0.1:9"]\n')
    # When it is asked for its status, to go down, for its workers' stats, its
    # dead letters or its schedules, or to stop one node
    done = cluster_status(path, timeout=2, command=command, extra=extra)
    # Then each says what is wrong (etcd does not answer, naming the endpoint
    # it asked), with no traceback
    assert done.returncode == 1, done
    for said in error:
        assert said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
