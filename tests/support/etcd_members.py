"""etcd for a cluster across hosts made of network namespaces: the scripts
a test runs on a host to ask etcd (a member answers, the nodes registered,
a role's holder), and :class:`EtcdMembers`, one member of one etcd cluster
on each of several hosts (tests/support/netns.py), started and killed by
their PIDs.

tests/support/hosts_cluster.py's ``Hosts(..., etcd_quorum=True)`` runs its
cluster on three such members, one a host (as docs/deploy.md, "etcd: three
members", says to run it), for bench/hosts.py's ``etcd`` mode: a write there
commits only once a majority of the members has it on disk, over the veth
links, which is what state held in etcd would pay per write.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.support.etcd_server import EtcdServer
from tests.support.netns import Network, wait_for_output

__all__ = [
    "LIST_NODES",
    "RAFT",
    "READ_HOLDER",
    "WAIT_ETCD",
    "WAIT_HOLDER",
    "WAIT_NODES",
    "EtcdMembers",
]

#: etcd's raft timings for three members on a loaded 2-core machine: a
#: heartbeat every 100 ms, an election after 1 s without one (its shortest
#: lease, 1.5 election timeouts, stays under the nodes' ttl).
RAFT = ["--heartbeat-interval=100", "--election-timeout=1000"]

#: Seconds a member may take to answer (once the members elected a leader).
READY = 60.0

#: Waits (at most 30 s) until the etcd at ARGV[1] answers, then says "etcd up".
WAIT_ETCD = """
import sys, trio
from actorctl.etcd._etcd import EtcdClient
from actorctl.etcd._etcd_wire import EtcdUnavailable

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
from actorctl.etcd._etcd import EtcdClient
from actorctl.etcd._node_record import nodes_prefix

async def main(url, cluster):
    prefix = nodes_prefix(cluster)
    snapshot = await EtcdClient([url], timeout=5).get_prefix(prefix)
    print(json.dumps({kv.key[len(prefix):]: kv.lease for kv in snapshot.kvs}), flush=True)

trio.run(main, sys.argv[1], sys.argv[2])
"""

#: Prints the holder of the role ARGV[3] of the cluster named ARGV[2] in the
#: etcd at ARGV[1] (an empty line when none holds it).
READ_HOLDER = """
import sys, trio
from actorctl.etcd._etcd import EtcdClient
from actorctl.etcd._role_lease import role_key

async def main(url, cluster, role):
    held = await EtcdClient([url], timeout=5).get(role_key(cluster, role))
    print("" if held is None else held.value.decode(), flush=True)

trio.run(main, *sys.argv[1:4])
"""

#: Prints ``holder NAME`` once etcd at ARGV[1] says ARGV[5] holds the role ARGV[3]
#: of the cluster named ARGV[2] (told by a watch of the role's key, not read
#: over and over), within ARGV[4] seconds.
WAIT_HOLDER = """
import sys, trio
from actorctl.etcd._etcd import EtcdClient
from actorctl.etcd._role_lease import follow_holder

async def main(url, cluster, role, timeout, want):
    there = trio.Event()
    with trio.fail_after(float(timeout)):
        async with trio.open_nursery() as nursery:
            tell = lambda holder: holder == want and there.set()
            nursery.start_soon(follow_holder, EtcdClient([url], timeout=5), cluster, role, tell)
            await there.wait()
            nursery.cancel_scope.cancel()
    print("holder", want, flush=True)

trio.run(main, *sys.argv[1:6])
"""

#: Prints ``nodes present`` (or ``nodes absent``: ARGV[4]) once etcd's
#: directory of the cluster named ARGV[2], read from the members ARGV[1]
#: (comma-separated), has every node of ARGV[5:] registered (or none of
#: them), told by its watch, within ARGV[3] seconds.

WAIT_NODES = """
import sys, trio
from actorctl.etcd import EtcdClient, EtcdUnavailable
from actorctl.etcd._etcd_directory import open_directory

async def main(urls, cluster, timeout, want, *names):
    client = EtcdClient(urls.split(","), timeout=5)
    def done(directory):
        there = set(names) & set(directory.nodes)
        return there == set(names) if want == "present" else not there
    with trio.fail_after(float(timeout)):
        while True:  # a member cut off, or electing a leader, answers again soon
            try:
                async with open_directory(client, cluster) as directory:
                    generation = directory.generation
                    while not done(directory):
                        generation = await directory.wait_changed(generation)
                break
            except EtcdUnavailable as exc:
                print("etcd unavailable, asking again:", exc, file=sys.stderr, flush=True)
                await trio.sleep(0.2)  # between tries of an unavailable etcd, not a wait for it
    print("nodes", want, flush=True)

trio.run(main, *sys.argv[1:3], float(sys.argv[3]), *sys.argv[4:])
"""


def start_members(
    network: Network, members: dict[str, EtcdServer]
) -> dict[str, subprocess.Popen[bytes]]:
    """Start each of ``members`` on its host (its log in its directory), wait
    (bounded) until each answers (once they have elected a leader), and
    return their processes by host."""
    processes = {}
    for host, member in members.items():
        with (member.directory / "etcd.log").open("ab") as log:
            processes[host] = network.run(
                host, member.command(), stdout=log, stderr=subprocess.STDOUT
            )
    for host, member in members.items():
        waiter = network.run(
            host, [sys.executable, "-c", WAIT_ETCD, member.url], stdout=subprocess.PIPE
        )
        wait_for_output(waiter, "etcd up", timeout=READY)
        waiter.wait(timeout=READY)
    return processes


class EtcdMembers:
    """One etcd member on each host of ``hosts`` (of ``network``), members of
    one new etcd cluster, each with its data directory under ``directory``."""

    def __init__(self, network: Network, directory: Path, hosts: Sequence[str]) -> None:
        self.network = network
        peers = ",".join(f"{h}=http://{network[h].address}:2380" for h in hosts)
        self.members: dict[str, EtcdServer] = {}
        for host in hosts:
            (directory / f"etcd-{host}").mkdir()
            self.members[host] = EtcdServer(
                directory / f"etcd-{host}",
                host=network[host].address,
                name=host,
                initial_cluster=peers,
                raft=RAFT,
            )
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def urls(self) -> list[str]:
        """The members' client URLs, in the hosts' order."""
        return [member.url for member in self.members.values()]

    def start(self) -> None:
        """Start every member, each on its host, and wait (bounded) until each
        answers (they answer once they have elected a leader)."""
        self.processes.update(start_members(self.network, self.members))

    def kill(self) -> None:
        """SIGKILL each member still running, by its PID, and reap it."""
        for process in self.processes.values():
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
