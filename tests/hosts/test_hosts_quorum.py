"""Three hosts, an etcd member on each, two services nodes (issue 34): the
holder of the services role losing its host, disk included, under load; and
every host upgraded in turn from the previous release to this checkout's
code under load (docs/deploy.md, "Upgrading one host at a time"), then an
unknown joiner refused everywhere (docs/deploy.md, "Membership is one truth").

Hosts are network namespaces (tests/support/netns.py, tests/support/hosts_quorum.py):
host a runs etcd member a and the services node services-a, host b member b,
the services node services-b and the worker node worker-b, host c member c and
the worker node worker-c; each host's nodes run under its ``actorctl host up``.
services-a is started first and holds the services role; it replicates its
store to services-b (docs/deploy.md, "Replication"). A caller on host c
(tests/apps/hosts_mixed_caller.py) sends the tasks, each confirmed; every run
is recorded with the pid of the node that ran it (tests/apps/hosts_app.py),
so that the test counts: none lost, how many ran twice. In the first test the
periodic task ``tick`` fires every second too, from services-a's beat (it
holds the scheduler role), each firing waiting behind the tasks in the
router's backlog: every firing its beat logged before the kill runs. In the
second, the previous release is a commit's ``src/`` taken from git history
(tests/support/releases.py: the test fails, saying so, where that history is
missing), first on the PYTHONPATH of every host and of the caller; each node's
process is checked to import the release it should. Waits are on output
lines, etcd's directory and role key, logs and records, each with a timeout.
Skipped, naming the reason, where network namespaces cannot be made or etcd
is not installed. Each test takes 30-60 s here (2 cores, shared).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import actorctl
from actorctl.cluster import load_cluster
from actorctl.ops import ensure_dev_secrets
from actorctl.tasks import cluster_app
from tests.apps.hosts_app import PERIODIC_RUNS, runs
from tests.support.hosts_cluster import ACTORCTL, READY, ROOT
from tests.support.hosts_quorum import NODES, TTL, QuorumHosts
from tests.support.netns import Network, open_network, wait_for_output
from tests.support.releases import PREVIOUS, previous_release

SLACK = 15.0  # seconds the machine's load may add to a bound
DELAY = 8  # seconds: the countdown of the delayed tasks
TASKS = 120  # the caller's tasks of 0.5 s, besides the delayed, the chord and the paced
#: The ``mixed`` caller's tasks: a probe, TASKS, 10 delayed, a chord's body, 6 paced.
MIXED = 1 + TASKS + 10 + 1 + 6
EVERY = 1  # seconds between the periodic task's due times
ELECTION = 1  # seconds: etcd's election timeout here (tests/support/hosts_quorum.py)
FIRED = "actorctl:beat:fired"
#: Every node but services-a: the scheduler role's candidates once host a is lost.
OTHERS = ("services-b", "worker-b", "worker-c")


@pytest.fixture
def network() -> Iterator[Network]:
    """Hosts a, b and c (network namespaces) for the test."""
    with open_network(("a", "b", "c")) as made:
        yield made


def start(hosts: QuorumHosts, src: Path | None = None) -> None:
    """Start the three etcd members, then each host (on the release in
    ``src``: this checkout's by default), a first: services-a holds the
    services role."""
    hosts.start_etcd()
    hosts.start_host("a", src)
    hosts.wait_holder("services-a", timeout=READY)
    hosts.start_host("b", src)
    hosts.start_host("c", src)


def twice(hosts: QuorumHosts) -> list[str]:
    """The task ids that ran more than once (any task: a chord's header too)."""
    return [task for task, n in Counter(t for t, _ in runs(hosts.records)).items() if n > 1]


def test_the_services_holders_host_lost_with_its_disk_under_load_loses_nothing_it_confirmed(
    network: Network, tmp_path: Path, record_property: Any
) -> None:
    with QuorumHosts(network, tmp_path, periodic_every=EVERY) as hosts:
        start(hosts)
        # Given services-a's beat firing tick every second (it started first:
        # it holds the scheduler role, the only beat then)
        hosts.wait_fired(["services-a"], 1, timeout=READY)
        # And a caller on host c whose first task services-a confirmed, and
        # services-b's copy of services-a's store in sync
        caller = hosts.caller("c", "mixed", "sent.txt", str(TASKS), "0.5", str(DELAY),
                              stdin=subprocess.PIPE)  # fmt: skip
        wait_for_output(caller, "probed", timeout=READY)
        hosts.wait_logged("services-b", "actorctl:replica:restored")
        # When the caller sends, each confirmed by services-a: 120 tasks of
        # 0.5 s (16 run at a time: the rest wait in its router's backlog), 10
        # with a countdown of 8 s, a chord of 3 tasks of 2 s, and 6 tasks
        # paced at 1 a second (its router holds back all but the first)
        assert caller.stdin is not None
        caller.stdin.write(b"go\n")
        caller.stdin.close()
        wait_for_output(caller, f"sent {MIXED}", timeout=READY)
        sent = hosts.sent("sent.txt")
        assert len(sent) == MIXED
        # ... and a firing of tick made since, waiting behind them
        hosts.wait_fired(["services-a"], len(hosts.fired("services-a")) + 1, timeout=READY)
        assert hosts.fired(*OTHERS) == []  # no other beat fired: services-a holds the role

        # And host a loses power (its host up, services-a and its etcd member
        # SIGKILLed) and its disk (services-a's data directory, etcd's)
        hosts.kill_host("a")
        killed, killed_at = time.monotonic(), time.time()
        shutil.rmtree(hosts.data("services-a"))
        shutil.rmtree(hosts.members["a"].directory / "data")
        # (the firings services-a's beat logged: each after its store's commit,
        # replicated to services-b; and those of them not run yet)
        fired_before = hosts.fired("services-a")
        waiting = set(fired_before) - {task for task, _ in runs(hosts.records, PERIODIC_RUNS)}

        # Then services-b takes the services role once services-a's lease
        # ended (etcd answers on b and c: two members of three)
        hosts.wait_holder("services-b", timeout=TTL * 2 + SLACK)
        moved = time.monotonic() - killed
        # ... and takes over its copy of what services-a confirmed: tasks in
        # the backlog, the delayed tasks, the chord and the held tasks
        taken = hosts.wait_logged("services-b", "actorctl:services:taken-over", timeout=SLACK)
        tables = taken["tables"]
        print(f"services-b took over from {taken['source']}: {tables}")
        assert taken["source"] == "services-a", taken
        assert tables.get("delayed") == 10, tables
        assert tables.get("chords") == 1, tables
        assert tables.get("held", 0) >= 1, tables
        assert tables.get("backlog", 0) >= 1, tables
        # And every task the caller was told was taken runs, the chord's body too
        hosts.wait_run(sent, timeout=DELAY + 60 + SLACK)
        recovered = time.monotonic() - killed
        said = hosts.finish(caller, timeout=READY + 60)
        assert f"results {MIXED} 0" in said, said[-3000:]
        # And tick fires on from another host's beat once services-a's
        # scheduler lease ended, and every firing made before the kill, and
        # after, runs
        # (when it first did, by its log line's time: the waits above come first)
        hosts.wait_fired(OTHERS, 1, timeout=TTL * 2 + EVERY + SLACK)
        first = min(float(m["timestamp"]) for n in OTHERS for m in hosts.logged(n, FIRED))
        ticking = first - killed_at
        fired_after = hosts.wait_fired(OTHERS, 3, timeout=3 * EVERY + SLACK)
        hosts.wait_run([*fired_before, *fired_after], timeout=SLACK, name=PERIODIC_RUNS)
        leader = ", ".join(n for n in OTHERS if hosts.logged(n, "actorctl:beat:leader"))
        print(f"scheduler role services-a -> {leader}: {len(fired_after)} firings by now")

    ran = {task for task, _ in runs(hosts.records)}
    lost = [task for task in sent if task not in ran]
    dup = twice(hosts)
    ticks = Counter(task for task, _ in runs(hosts.records, PERIODIC_RUNS))
    ticks_lost = [task for task in fired_before if ticks[task] == 0]
    ticks_twice = {task: n for task, n in ticks.items() if n > 1}
    refired = set(fired_before) & set(fired_after)  # a due time two beats fired
    print(
        f"lost {len(lost)} of {len(sent)}, ran twice {len(dup)}; role moved {moved:.1f} s, "
        f"every task ran {recovered:.1f} s after the kill; firings before the kill "
        f"{len(fired_before)} ({len(waiting)} not yet run), lost {len(ticks_lost)}, ran twice "
        f"{len(ticks_twice)} {ticks_twice}, fired again {sorted(refired)}; tick fired from "
        f"{leader} {ticking:.1f} s after the kill"
    )
    record_property("lost", len(lost))
    record_property("ran_twice", len(dup))
    record_property("role_moved_s", round(moved, 1))
    record_property("recovered_s", round(recovered, 1))
    record_property("firings_lost", len(ticks_lost))
    record_property("firings_ran_twice", len(ticks_twice))
    record_property("firings_resumed_s", round(ticking, 1))
    assert lost == []
    assert ticks_lost == []
    # services-a's scheduler lease ends TTL after its last renewal, later by
    # up to three etcd election timeouts if its etcd member led (etcd's new
    # leader renews every lease for the ttl plus one election timeout); the
    # next beat asks at once (it watches the role's key)
    assert ticking < TTL + 3 * ELECTION + EVERY + SLACK, ticking
    assert waiting, "every firing had run at the kill: none was in flight"


def test_every_host_upgraded_in_turn_from_the_previous_release_under_load_loses_no_task(
    network: Network, tmp_path: Path, record_property: Any
) -> None:
    previous = previous_release(tmp_path / "previous")
    this = Path(actorctl.__file__).resolve().parents[1]
    with QuorumHosts(network, tmp_path) as hosts:
        # Given every host on the previous release (tests/support/releases.py)
        start(hosts, src=previous)
        for node in hosts.pids:
            assert hosts.code_of(node) == previous.resolve(), node
        # And a caller on host c, on the previous release too (the
        # application is upgraded after the cluster), sending tasks of 0.2 s,
        # one every 10 ms, each confirmed
        caller = hosts.caller("c", "steady", "steady.txt", "0.01", stdin=subprocess.PIPE,
                              src=previous)  # fmt: skip
        wait_for_output(caller, "sending", timeout=READY)
        # When each host in turn, the workers' first and the holder's last
        # (docs/deploy.md, "Upgrading one host at a time"), has its host up
        # stopped warm (SIGTERM), its nodes leave etcd, and it starts again on
        # this checkout's code until its nodes are back in etcd's directory
        # (the hosts before it on this release, those after it on the previous)
        upgrades = {}
        for host in ("c", "b", "a"):
            # (every task confirmed so far has run: the load flows)
            hosts.wait_run(hosts.sent("steady.txt"), timeout=READY)
            if host == "a":
                # (the upgraded workers ran tasks the previous release's holder sent them)
                by_pid = Counter(pid for _, pid in runs(hosts.records))
                for worker in ("worker-b", "worker-c"):
                    assert by_pid[hosts.pids[worker]] > 0, (worker, by_pid)
            restored = len(hosts.logged("services-b", "actorctl:replica:restored"))
            begun = time.monotonic()
            hosts.stop_host(host)
            hosts.wait_nodes(NODES[host], "absent", timeout=SLACK)
            hosts.start_host(host)
            hosts.wait_nodes(NODES[host], "present", timeout=SLACK)
            upgrades[host] = time.monotonic() - begun
            for node in NODES[host]:
                assert hosts.code_of(node) == this, node
            if host == "b":
                # (the previous release's holder replicates its store to the
                # upgraded standby: services-b restored its copy again)
                hosts.wait_logged("services-b", "actorctl:replica:restored", count=restored + 1)
            if host == "c":
                # (and cluster status, asked there, reads every node's tree:
                # this release's CLI answered by the previous release's nodes)
                status = hosts.cli("c", "cluster", "status", str(hosts.path))
                for node in (n for names in NODES.values() for n in names):
                    assert f"{node}  node  registered" in status, status
                assert status.count("/actors  supervisor  running") == 4, status
        # Then the services role moved to services-b when services-a stopped
        hosts.wait_holder("services-b", timeout=SLACK)

        # When, the load still flowing, host c starts worker-d, a node that
        # only its own copy of the file names: by host up, then by node run
        # Then each is refused, saying why, and no node takes it for a member
        # (join_unknown)
        joiner = join_unknown(hosts)

        # And once the caller stops, every task it was told was taken has run
        hosts.wait_run(hosts.sent("steady.txt"), timeout=READY)
        assert caller.stdin is not None
        caller.stdin.write(b"stop\n")
        caller.stdin.close()
        said = hosts.finish(caller, timeout=READY + 60)
        sent = hosts.sent("steady.txt")
        hosts.wait_run(sent, timeout=READY)
        assert f"sent {len(sent)} " in said, said[-3000:]
        # (and no send failed: one that reaches the holder's router while it
        # stops is refused there, "actor 'celery' is stopping", and the client
        # sends it on to the next holder)
        unconfirmed = int(said.split(f"sent {len(sent)} ")[1].split()[0])
        for line in said.splitlines():
            if line.startswith("unconfirmed "):
                print(line)
        assert unconfirmed == 0, said[-3000:]
        assert f"results {len(sent)} 0" in said, said[-3000:]

    done = runs(hosts.records)
    ran = {task for task, _ in done}
    lost = [task for task in sent if task not in ran]
    dup = twice(hosts)
    took = ", ".join(f"{host} {seconds:.1f} s" for host, seconds in upgrades.items())
    print(
        f"{PREVIOUS[:7]} -> this checkout: lost {len(lost)} of {len(sent)}, ran twice "
        f"{len(dup)}, unconfirmed {unconfirmed}; upgrades: {took}"
    )
    record_property("lost", len(lost))
    record_property("ran_twice", len(dup))
    record_property("unconfirmed", unconfirmed)
    assert lost == []
    assert len(sent) > 100, len(sent)  # the load ran throughout
    # ... and no task ran on the refused joiner
    assert joiner not in {pid for _, pid in done}


#: The node a copy of the file on host c adds, its certificate and key made there only.
JOINER = """
[[node]]
name = "worker-d"
listen = "{address}:5713"
host = "c"
actors = "tests.apps.hosts_app:app"
pools = ["celery"]
"""
REFUSED = "node 'worker-d' cannot join cluster 'quorum': node 'worker-d' is not in the cluster file"


def join_unknown(hosts: QuorumHosts) -> int:
    """Host c's own copy of the file (the cluster's certificates and keys,
    and a node worker-d made there): ``host up`` from it, then worker-d's
    ``node run``, each refused saying why; nobody took worker-d for a
    member. The pid of worker-d's process, to look for among the runs."""
    copy = hosts.directory / "copy"
    copy.mkdir()
    for folder in ("certs", "keys"):
        shutil.copytree(hosts.directory / folder, copy / folder)
    path = copy / "cluster.toml"
    path.write_text(hosts.path.read_text() + JOINER.format(address=hosts.network["c"].address))
    config = load_cluster(path, cluster_app())
    ensure_dev_secrets(config)
    # host up refuses before it starts anything
    up = hosts.network.run(
        "c",
        [*ACTORCTL, "host", "up", str(path), "--host", "c"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=hosts.env,
        cwd=ROOT,
    )
    out, err = up.communicate(timeout=READY)
    said = err.decode(errors="replace")
    assert up.returncode == 1, said
    assert REFUSED in said, said
    assert "copy the one cluster file (and keys/) to every host" in said, said
    assert "Traceback" not in said
    assert b"starting host" not in out
    # The node alone (as host up starts it) listens, then is refused as it registers
    node = next(n for n in config.nodes if n.name == "worker-d")
    assert node.actors is not None
    argv = [*ACTORCTL, "node", "run", node.actors, "--listen", node.listen, "--name", node.name,
            "--cluster", str(path), "--certs", str(config.certs), "--keys", str(config.keys),
            *(f"--etcd={m.url}" for m in hosts.members.values())]  # fmt: skip
    run = hosts.network.run(
        "c", argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=hosts.env, cwd=ROOT
    )
    out, err = run.communicate(timeout=READY)
    said = err.decode(errors="replace")
    print(f"worker-d's node run exited {run.returncode}: {said.strip()[-500:]}")
    assert run.returncode == 1, (said[-3000:], out.decode(errors="replace")[-3000:])
    assert REFUSED in said, said[-3000:]
    assert "Traceback" not in said, said[-3000:]
    assert b'"actorctl:membership:refused"' in out  # its log: at registration, once it listened
    # And no node saw it join or routes to it, and cluster status on host a
    # does not show it (status lists every record in etcd, the file's or not)
    for member in (n for names in NODES.values() for n in names):
        joined = [m["node"] for m in hosts.logged(member, "actorctl:membership:join")]
        assert "worker-d" not in joined, member
        log = (hosts.directory / "logs" / f"{member}.log").read_text()
        # (its address whole: a peer's port may begin with its port's digits)
        assert not re.search(rf"{re.escape(node.listen)}(?!\d)", log), member
    status = hosts.cli("a", "cluster", "status", str(hosts.path))
    assert "worker-d" not in status, status
    return run.pid
