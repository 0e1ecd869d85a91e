"""The scheduler role across hosts (issue 18): one beat fires the periodic
tasks, elected through etcd and fenced; a host lost, and a host partitioned.

Three hosts as network namespaces (tests/netns.py, tests/hosts_cluster.py):
etcd and the services node on a, a worker node on each of b and c, every
node a candidate for the scheduler role, which fires ``tick`` every second.
Each run of ``tick`` is recorded with the due time its task id names, so
that the test counts due times that ran twice, and due times that ran not at
all (a catch-up firing that stands for several missed due times says so in
its node's log, and counts for them). Skipped, naming the reason, where
network namespaces cannot be made (or etcd is not installed).
"""

from __future__ import annotations

import datetime
import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hosts_app import PERIODIC_RUNS, runs
from tests.hosts_cluster import READY, TTL, Hosts
from tests.netns import Network, open_network, wait_for_output

SLACK = 15.0  # seconds the machine's load may add to a bound
EVERY = 1  # seconds between the periodic task's due times
PARTITION = 30.0  # seconds host c's link stays down


def due_times(hosts: Hosts) -> Counter[float]:
    """How many times each due time of ``tick`` ran (its task id names it)."""
    found: Counter[float] = Counter()
    for task_id, _ in runs(hosts.records, PERIODIC_RUNS):
        when = task_id.rpartition("@")[2]
        due = datetime.datetime.strptime(when, "%Y-%m-%dT%H:%M:%S.%fZ")
        found[due.replace(tzinfo=datetime.UTC).timestamp()] += 1
    return found


def wait_ticks(hosts: Hosts, count: int, timeout: float = READY) -> None:
    """Wait (bounded) until ``tick`` has run ``count`` times in all, and return
    just after a run was recorded: the next due time is a second away."""
    deadline = time.monotonic() + timeout
    while sum(due_times(hosts).values()) < count:
        assert time.monotonic() < deadline, f"tick ran {sum(due_times(hosts).values())} times"
        time.sleep(0.02)  # another process writes the records: polled


def logged(hosts: Hosts, event: str) -> list[dict[str, object]]:
    """Every ``event`` line of every node's log, in the order they were written."""
    found = []
    for path in sorted((hosts.directory / "logs").glob("*.log")):
        for line in path.read_text().splitlines():
            if f'"{event}"' in line:
                found.append(json.loads(line))
    return sorted(found, key=lambda line: float(str(line["timestamp"])))


def skipped_and_twice(hosts: Hosts) -> tuple[list[float], list[float]]:
    """The due times from the first that ran to the last that neither ran nor
    were stood for by a catch-up firing; and those that ran more than once."""
    ran = due_times(hosts)
    stood_for: set[float] = set()
    for line in logged(hosts, "actorctl:beat:catching-up"):
        latest, missed = float(str(line["fires_once"])), int(str(line["missed"]))
        stood_for.update(latest - EVERY * i for i in range(1, missed))
    first, last = min(ran), max(ran)
    every_due = [first + EVERY * i for i in range(int((last - first) / EVERY) + 1)]
    skipped = [due for due in every_due if due not in ran and due not in stood_for]
    return skipped, [due for due, n in ran.items() if n > 1]


@pytest.fixture
def network() -> Iterator[Network]:
    with open_network(("a", "b", "c")) as made:
        yield made


def start(network: Network, tmp_path: Path, first: str) -> Hosts:
    """Hosts with ``tick`` every second, ``first``'s host started (and its
    beat holding the scheduler role) before the others."""
    running = Hosts(network, tmp_path, periodic_every=EVERY)
    running.start(order=(first,))
    return running


def test_a_host_lost_with_the_scheduler_has_the_role_move_and_no_due_time_twice_or_missed(
    network: Network, tmp_path: Path
) -> None:
    hosts = start(network, tmp_path, "b")
    try:
        # Given the beat of host b holding the scheduler role, tick running every second
        wait_ticks(hosts, 3)
        holder = hosts.scheduler()
        assert hosts.host_of(holder) == "b", holder

        # When every process of host b is killed with SIGKILL, just after a run
        count = sum(due_times(hosts).values())
        wait_ticks(hosts, count + 1)
        hosts.kill_host("b")
        killed = time.monotonic()

        # Then another host's beat takes the role once b's lease ran out in
        # etcd, and tick runs on: three more due times within the bound
        count = sum(due_times(hosts).values())
        wait_ticks(hosts, count + 3, timeout=TTL + 3 * EVERY + SLACK)
        moved = time.monotonic() - killed
        now = hosts.scheduler()
        assert now, "no beat holds the scheduler role"
        assert hosts.host_of(now) in ("a", "c"), now
        skipped, twice = skipped_and_twice(hosts)
        print(
            f"scheduler moved from {holder} to {now}; tick ran on {moved:.1f} s after the kill; "
            f"due times skipped: {len(skipped)}, ran twice: {len(twice)}"
        )
        # And no due time ran twice, or was skipped
        assert twice == []
        assert skipped == []
        # And cluster status, asked on host a, shows each host's nodes as etcd
        # and the nodes say they are: b's gone, and who holds the scheduler role
        status = hosts.status()
        print(status)
        assert f"scheduler {now}" in status
        assert "worker-b  node  not-registered" in status
        for node in ("services", "worker-c"):
            assert f"{node}  node  registered" in status
        assert status.count("/actors  supervisor  running") == 2, status  # each running node's tree
        # And each new holder's fence is greater than the last one's
        fences = [int(str(m["fence"])) for m in logged(hosts, "actorctl:beat:leader")]
        assert len(fences) >= 2
        assert fences == sorted(set(fences)), fences
    finally:
        hosts.stop()


def test_a_host_cut_off_for_30_s_stops_firing_its_work_runs_elsewhere_and_it_drains_after(
    network: Network, tmp_path: Path
) -> None:
    hosts = start(network, tmp_path, "c")
    try:
        # Given the beat of host c holding the scheduler role, and a caller on
        # host a with 1,500 tasks for b and c (8 at a time on each, 100 ms each)
        wait_ticks(hosts, 3)
        assert hosts.host_of(hosts.scheduler()) == "c"
        caller = hosts.caller(1500, timeout=PARTITION + 60)
        wait_for_output(caller, "sent", timeout=READY)
        c_pid = hosts.pids["worker-c"]
        deadline = time.monotonic() + READY
        while Counter(pid for _, pid in runs(hosts.records))[c_pid] < 20:
            assert time.monotonic() < deadline, "c ran no task"
            time.sleep(0.05)  # another process writes the records: polled

        # When host c's link goes down, just after a run of tick, for 30 s
        count = sum(due_times(hosts).values())
        wait_ticks(hosts, count + 1)
        hosts.network.partition("c")
        cut = time.monotonic()
        # Then, while c is cut off, another host's beat takes the role and
        # tick runs on, and c's beat fires nothing (its firings cannot be
        # recorded in etcd)
        count = sum(due_times(hosts).values())
        wait_ticks(hosts, count + 3, timeout=TTL + 3 * EVERY + SLACK)
        moved = time.monotonic() - cut
        holder = hosts.scheduler()
        assert hosts.host_of(holder) in ("a", "b"), holder
        time.sleep(max(0.0, PARTITION - (time.monotonic() - cut)))  # the partition lasts 30 s
        ran_during = sum(due_times(hosts).values()) - count
        hosts.network.heal("c")
        healed = time.monotonic()

        # Then every task the caller sent ran at least once and its result came
        # back (those c finished while cut off, from c's backlog once healed)
        said = caller.communicate(timeout=READY + 60)[0].decode(errors="replace")
        assert "results 1500 0" in said, said[-3000:]
        sent = (hosts.directory / "sent.txt").read_text().split()
        times = Counter(task for task, _ in runs(hosts.records))
        lost = [task for task in sent if task not in times]
        twice = [task for task, n in times.items() if n > 1]
        assert lost == []
        # And the role stayed where it went: c, back, does not take it again
        wait_ticks(hosts, sum(due_times(hosts).values()) + 2)
        assert hosts.host_of(hosts.scheduler()) in ("a", "b")
        # And no due time of tick ran twice or was skipped, across the cut and the heal
        skipped, ticks_twice = skipped_and_twice(hosts)
        print(
            f"role moved, tick ran on {moved:.1f} s after the cut; {ran_during} ticks while "
            f"c was cut off; results all back {time.monotonic() - healed:.1f} s after the heal; "
            f"tasks lost {len(lost)}, ran twice {len(twice)}; ticks skipped {len(skipped)}, "
            f"twice {len(ticks_twice)}"
        )
        assert ticks_twice == []
        assert skipped == []
        # And c's beat said it could no longer renew or record its role
        c_log = (hosts.directory / "logs" / "worker-c.log").read_text()
        assert '"actorctl:beat:lease-unrenewed"' in c_log or '"actorctl:beat:not-fired"' in c_log
    finally:
        hosts.stop()
