"""etcd for a cluster across hosts made of network namespaces: the script
that waits until a member answers, and :class:`EtcdMembers`, one member of
one etcd cluster on each of several hosts (tests/support/netns.py), started
and killed by their PIDs.

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

__all__ = ["RAFT", "WAIT_ETCD", "EtcdMembers"]

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
        for host, member in self.members.items():
            with (member.directory / "etcd.log").open("ab") as log:
                self.processes[host] = self.network.run(
                    host, member.command(), stdout=log, stderr=subprocess.STDOUT
                )
        for host, member in self.members.items():
            waiter = self.network.run(
                host, [sys.executable, "-c", WAIT_ETCD, member.url], stdout=subprocess.PIPE
            )
            wait_for_output(waiter, "etcd up", timeout=READY)
            waiter.wait(timeout=READY)

    def kill(self) -> None:
        """SIGKILL each member still running, by its PID, and reap it."""
        for process in self.processes.values():
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
