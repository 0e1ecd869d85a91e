"""Hosts as network namespaces, for tests of a cluster that spans hosts (issue 18).

A :class:`Network` makes one network namespace per host
(``actorctl-t-<random>-<host>``) and one more, the hub, holding a bridge; each
host is joined to the bridge by a veth pair made between its namespace and
the hub's (``eth0`` in the host, ``v-<host>`` in the hub), so nothing is made
in, or addressed from, the namespace the tests run in. The addresses are the
harness's own choice in a private range, ``10.231.X.0/24`` with X picked at
random per network (and only ever routed inside its namespaces); loopback is
up in each host.

A command runs on a host through ``ip netns exec`` (which execs it: the Popen's
PID is the command's own). Taking a host's link down at the hub
(:meth:`Network.partition`) is a cable pulled at the switch: the host keeps its
address and its processes run on, but nothing it sends reaches another host,
and connections to it time out. :meth:`Network.heal` puts the cable back (and
has the hosts forget the address resolutions that failed meanwhile).

:meth:`Network.close` kills the processes it started, by PID, and deletes the
namespaces it made, by name (a veth pair goes with its namespace): only what
it made. Making namespaces needs CAP_SYS_ADMIN and iproute2; where
``ip netns add`` fails, :func:`open_network` skips the test with the reason
("network namespaces cannot be made here: ..."). ``.ci/run`` installs iproute2.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import secrets
import select
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

#: Seconds one ``ip`` command may take.
IP_TIMEOUT = 10.0
#: What a host's name may be (it is part of interface names, at most 15 bytes).
_HOST = re.compile(r"[a-z][a-z0-9]{0,9}")


class NetnsError(RuntimeError):
    """An ``ip`` command failed while the network was being made or changed."""


class NetnsUnavailable(NetnsError):
    """Namespaces cannot be made here at all: no iproute2, or no permission."""


@dataclass(frozen=True)
class Host:
    """One host of a :class:`Network`.

    Attributes:
        name: its short name (``a``).
        netns: its network namespace (``actorctl-t-1a2b3c-a``).
        address: its IPv4 address (``10.231.7.1``), on ``eth0``.
        hub_link: its cable's end in the hub's namespace (``v-a``).
    """

    name: str
    netns: str
    address: str
    hub_link: str


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT, check=False
    )


class Network:
    """Hosts as network namespaces joined by a bridge: use :func:`open_network`."""

    def __init__(self, names: Sequence[str]) -> None:
        for name in names:
            if not _HOST.fullmatch(name):
                raise ValueError(f"host name {name!r}: expected 1 to 10 of a-z0-9, a letter first")
        if len(set(names)) != len(names) or not 1 <= len(names) <= 200:
            raise ValueError(f"hosts {list(names)!r}: expected 1 to 200 distinct names")
        self.prefix = f"actorctl-t-{secrets.token_hex(3)}"
        self.subnet = random.randrange(1, 255)  # 10.231.X.0/24: X
        self.hub = f"{self.prefix}-hub"
        self.hosts = {
            name: Host(name, f"{self.prefix}-{name}", f"10.231.{self.subnet}.{i + 1}", f"v-{name}")
            for i, name in enumerate(names)
        }
        self._made: list[str] = []  # namespaces, in the order they were made
        self._processes: list[subprocess.Popen[Any]] = []

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    # -- making and unmaking -------------------------------------------------------------

    def make(self) -> None:
        """Make the hub, its bridge, and each host joined to it.

        Raises:
            NetnsUnavailable: the first namespace could not be made.
            NetnsError: an ``ip`` command failed after that.
        """
        try:
            self._add_netns(self.hub)
        except FileNotFoundError:
            raise NetnsUnavailable(
                "iproute2's ip command is not installed (apt-get install iproute2)"
            ) from None
        except NetnsError as exc:
            raise NetnsUnavailable(str(exc)) from None
        self._run("-n", self.hub, "link", "add", "br0", "type", "bridge")
        self._run("-n", self.hub, "link", "set", "br0", "up")
        for host in self.hosts.values():
            self._add_netns(host.netns)
            # The pair is made in the hub, its other end straight in the host:
            # never in the namespace the tests run in.
            self._run(
                "-n", self.hub, "link", "add", host.hub_link, "type", "veth",
                "peer", "name", "eth0", "netns", host.netns,
            )  # fmt: skip
            self._run("-n", self.hub, "link", "set", host.hub_link, "master", "br0")
            self._run("-n", self.hub, "link", "set", host.hub_link, "up")
            self._run("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", "eth0")
            self._run("-n", host.netns, "link", "set", "eth0", "up")

    def _add_netns(self, name: str) -> None:
        self._run("netns", "add", name)
        self._made.append(name)
        self._run("-n", name, "link", "set", "lo", "up")

    def _run(self, *args: str) -> None:
        done = _ip(*args)
        if done.returncode != 0:
            raise NetnsError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")

    def close(self) -> None:
        """Kill the processes started here (by PID), then delete the namespaces
        made here (by name). Safe to call again."""
        while self._processes:
            process = self._processes.pop()
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
            for pipe in (process.stdin, process.stdout, process.stderr):
                if pipe is not None:
                    pipe.close()
        errors = []
        while self._made:
            name = self._made.pop()
            done = _ip("netns", "del", name)
            if done.returncode != 0:
                errors.append(f"{name}: {done.stderr.strip()}")
        if errors:
            raise NetnsError(f"namespaces not deleted: {'; '.join(errors)}")

    # -- using it ------------------------------------------------------------------------

    def run(self, host: str, argv: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` on ``host`` (``ip netns exec``); killed by :meth:`close`
        if it still runs then. ``popen`` is passed to :class:`subprocess.Popen`
        (stdin defaults to /dev/null)."""
        popen.setdefault("stdin", subprocess.DEVNULL)
        process = subprocess.Popen(["ip", "netns", "exec", self[host].netns, *argv], **popen)
        self._processes.append(process)
        return process

    def partition(self, host: str) -> None:
        """Take ``host``'s link down at the hub: it reaches no other host, nor they it."""
        self._run("-n", self.hub, "link", "set", self[host].hub_link, "down")

    def heal(self, host: str) -> None:
        """Put ``host``'s link back up, and have every host forget the address
        resolutions (ARP) it had under way or had given up: one that failed
        while the link was down would fail the first connection made after
        the heal ("No route to host") rather than be tried again."""
        self._run("-n", self.hub, "link", "set", self[host].hub_link, "up")
        for each in self.hosts.values():
            self._run("-n", each.netns, "neigh", "flush", "all")


@contextlib.contextmanager
def open_network(names: Sequence[str] = ("a", "b", "c")) -> Iterator[Network]:
    """A :class:`Network` of hosts ``names`` for the duration of the block.

    Skips the test, naming the reason, where namespaces cannot be made (no
    iproute2, no permission): the first ``ip netns add`` failed.
    """
    network = Network(names)
    try:
        try:
            network.make()
        except NetnsUnavailable as exc:
            pytest.skip(f"network namespaces cannot be made here: {exc}")
        yield network
    finally:
        network.close()


def wait_for_output(process: subprocess.Popen[Any], text: str, timeout: float) -> str:
    """Read ``process``'s stdout (a pipe) until it has written ``text``, for at
    most ``timeout`` seconds: what it wrote until then (read unbuffered, so
    nothing is held back in a buffer; what it wrote is consumed).

    Raises:
        TimeoutError: not in time (or the process ended first), with what it wrote.
    """
    assert process.stdout is not None, "start the process with stdout=subprocess.PIPE"
    fd = process.stdout.fileno()
    deadline = time.monotonic() + timeout
    seen = b""
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:  # it ended
            break
        seen += chunk
        if text.encode() in seen:
            return seen.decode(errors="replace")
    raise TimeoutError(f"no {text!r} within {timeout} s; it wrote: {seen!r}")
