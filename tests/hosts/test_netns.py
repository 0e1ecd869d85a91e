"""The hosts-as-namespaces harness (tests/support/netns.py) does what multi-host tests
rely on: hosts reach each other over the veth pairs, a link taken down
partitions its host within a bounded time, and up again heals it; and an etcd
on one host serves the etcd client on the others.

Skipped, naming the reason, where network namespaces cannot be made. Every
wait is bounded: readiness is read from a process's output; connecting to a
partitioned host is given a timeout (it is the thing being measured).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.etcd_server import EtcdServer
from tests.support.netns import Network, open_network, wait_for_output

PORT = 7000
#: Seconds a connection to a partitioned host is given before it counts as failed.
CONNECT_TIMEOUT = 1.0

#: A TCP echo server on ARGV[1]:ARGV[2]; says "listening" once it is.
ECHO = """
import socket, sys
server = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("listening", flush=True)
while True:
    conn, _ = server.accept()
    with conn:
        conn.sendall(conn.recv(1024))
"""

#: Connects to each HOST:PORT of ARGV[2:] within ARGV[1] seconds: one line each,
#: "ok HOST:PORT" if it echoed, else "fail HOST:PORT ERROR".
CLIENT = """
import socket, sys
timeout = float(sys.argv[1])
for target in sys.argv[2:]:
    host, port = target.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as conn:
            conn.sendall(b"ping")
            print("ok" if conn.recv(1024) == b"ping" else "bad", target, flush=True)
    except OSError as exc:
        print("fail", target, type(exc).__name__, flush=True)
"""

#: On another host: put ARGV[2] = ARGV[3] (unless ARGV[3] is empty) in the etcd
#: at ARGV[1], then print the key's value.
ETCD_CLIENT = """
import sys, trio
from actorctl.etcd._etcd import EtcdClient
from actorctl.etcd._etcd_wire import EtcdUnavailable

async def main(url, key, value):
    client = EtcdClient([url], timeout=2)
    with trio.fail_after(20):
        while True:
            try:
                if value:
                    await client.put(key, value)
                held = await client.get(key)
                break
            except EtcdUnavailable:
                # etcd on the other host may still be starting, and nothing
                # tells this process when it is ready: try again shortly.
                await trio.sleep(0.1)
    print("value", held.value.decode() if held else None, flush=True)

trio.run(main, *sys.argv[1:])
"""


@pytest.fixture
def network() -> Iterator[Network]:
    with open_network(("a", "b", "c")) as network:
        yield network


def start_echo(network: Network, host: str) -> str:
    """An echo server on ``host``, listening: its HOST:PORT."""
    address = network[host].address
    server = network.run(
        host, [sys.executable, "-c", ECHO, address, str(PORT)], stdout=subprocess.PIPE
    )
    wait_for_output(server, "listening", timeout=10)
    return f"{address}:{PORT}"


def connect(network: Network, host: str, *targets: str) -> dict[str, str]:
    """Connect from ``host`` to each target: target to "ok" or "fail ERROR"."""
    client = network.run(
        host,
        [sys.executable, "-c", CLIENT, str(CONNECT_TIMEOUT), *targets],
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = client.communicate(timeout=10 + CONNECT_TIMEOUT * len(targets))
    lines = [line.split(" ", 2) for line in out.splitlines()]
    return {target: " ".join([word, *rest]) for word, target, *rest in lines}


def test_three_hosts_reach_each_other_over_their_links(network: Network) -> None:
    # Given an echo server on each host
    servers = {host: start_echo(network, host) for host in network.hosts}
    # Then each host reaches the other two, at their own addresses
    for host in network.hosts:
        others = [servers[other] for other in network.hosts if other != host]
        assert connect(network, host, *others) == dict.fromkeys(others, "ok")


def test_a_link_taken_down_partitions_its_host_and_up_again_heals_it(network: Network) -> None:
    a, c = start_echo(network, "a"), start_echo(network, "c")
    assert connect(network, "c", a) == {a: "ok"}

    # When c's link is taken down
    network.partition("c")

    # Then c reaches nobody and nobody reaches c, each failing within its timeout,
    # while the other hosts still reach each other
    start = time.monotonic()
    assert connect(network, "c", a)[a].startswith("fail")
    assert connect(network, "a", c)[c].startswith("fail")
    assert time.monotonic() - start < 2 * CONNECT_TIMEOUT + 4  # (+ two interpreters' start)
    assert connect(network, "b", a) == {a: "ok"}

    # When it is brought up again, c is back
    network.heal("c")
    assert connect(network, "c", a) == {a: "ok"}
    assert connect(network, "b", c) == {c: "ok"}


def test_an_etcd_on_one_host_serves_the_etcd_client_on_the_others(
    network: Network, tmp_path: Path
) -> None:
    # Given etcd on host a, listening on a's address only
    etcd = EtcdServer(tmp_path, host=network["a"].address)
    with (tmp_path / "etcd.log").open("wb") as log:
        network.run("a", etcd.command(), stdout=log, stderr=subprocess.STDOUT)

    # When the etcd client on host b writes a key, over b's and a's links
    put = network.run(
        "b",
        [sys.executable, "-c", ETCD_CLIENT, etcd.url, "/netns/k", "from-b"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert put.communicate(timeout=30)[0].strip() == "value from-b", etcd.log_tail()

    # Then the etcd client on host c reads it
    get = network.run(
        "c",
        [sys.executable, "-c", ETCD_CLIENT, etcd.url, "/netns/k", ""],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert get.communicate(timeout=30)[0].strip() == "value from-b"
