"""What the tests repeat: a free port, cluster secrets, a server node with a
client node, bytes sent as they are on a client's connection, logs.

Plain helpers and context managers, for test modules and for tests/support/fuzz_inbox.py
(which also runs outside pytest); the fixtures built on them are in
tests/conftest.py. The foreign client's transport, which must not import
actorctl, is tests/support/foreign.py.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import trio

from actorctl import Actor, Node, TlsFiles, open_node
from actorctl.actors import Address
from actorctl.cluster.link._pending import Pending
from actorctl.mailbox import Keyring, Outcome
from actorctl.mailbox._signing import Session, SessionSigner
from tests.support.keys import make_keys
from tests.support.tls import make_tls


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (for a process to bind
    later), never one this process handed out before, and never one of the
    kernel's ephemeral ports: a node restarted on its port must find it free,
    and while it is down any connection made on this machine may be given an
    ephemeral port as its own end. Each pytest-xdist worker takes its ports
    from a slice of its own, so that two workers never hand out the same one."""
    ports = _our_ports()
    for _ in range(len(ports)):
        port = ports[next(_NEXT) % len(ports)]
        if port in _HANDED_OUT:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use, or a connection of another run still ends there
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free port left on 127.0.0.1 in {ports}")


def _our_ports() -> range:
    """This process's slice of the ports below the kernel's ephemeral range."""
    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768  # Linux's default first ephemeral port
    low, high = 20000, max(ephemeral, 20000 + 1000)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(worker) if worker.isdigit() else 0
    width = (high - low) // max(count, 1)
    return range(low + index * width, low + (index + 1) * width)


_HANDED_OUT: set[int] = set()
#: Where this process starts in its slice: another place each run, so that a
#: run does not meet the previous run's connections still closing.
_NEXT = itertools.count(random.randrange(1 << 16))


class Logs:
    """Every eliot message written while a test runs (the ``logs`` fixture)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self._waiting: list[tuple[str, int, trio.Event]] = []

    def __call__(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        for message_type, count, event in self._waiting:
            if (
                message.get("message_type") == message_type
                and len(self.of_type(message_type)) >= count
            ):
                event.set()

    def of_type(self, message_type: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m.get("message_type") == message_type]

    async def wait_for(self, message_type: str, count: int = 1) -> None:
        """Wait until ``count`` messages of ``message_type`` were written (by
        code in this trio run: an event set from another thread is not safe)."""
        if len(self.of_type(message_type)) < count:
            event = trio.Event()
            self._waiting.append((message_type, count, event))
            await event.wait()


@dataclass(frozen=True)
class Secrets:
    """Per node name, TLS files from one development CA and a keyring trusting every name."""

    tls: Mapping[str, TlsFiles]
    keys: Mapping[str, Keyring]

    @classmethod
    def make(cls, directory: Path, *names: str, members: Iterable[str] | None = None) -> Secrets:
        """A CA and certificates in ``directory/tls``, and keys in ``directory/keys``
        (with a members file naming ``members``, if given)."""
        keys = make_keys(directory / "keys", *names, members=members)
        return cls(make_tls(directory / "tls", *names), keys)

    def options(self, name: str, **more: Any) -> dict[str, Any]:
        """The options of :func:`actorctl.open_node` that secure the node ``name``
        (and ``more`` of them)."""
        return {"tls": self.tls[name], "keyring": self.keys[name], **more}


Hosted = Actor | type[Actor]
"""What a node hosts: an actor, or a class it makes one of."""


class NodePair(NamedTuple):
    server: Node  # hosts the actors, listening on 127.0.0.1
    client: Node  # hosts nothing and listens nowhere: it only sends


@asynccontextmanager
async def node_pair(
    actors: Mapping[str, Hosted] | Iterable[Hosted] = (),
    *,
    secrets: Secrets | None = None,
    names: tuple[str, str] = ("server", "client"),
    client_options: Mapping[str, Any] | None = None,
    **server_options: Any,
) -> AsyncIterator[NodePair]:
    """A server node hosting ``actors`` and a client node, each run for the block.

    Both nodes are secured with ``secrets`` (mutual TLS and signed messages) or,
    without them, insecure. ``server_options`` and ``client_options`` go to each
    :func:`actorctl.open_node` on top of that. The client stops first.
    """
    server_name, client_name = names

    def security(name: str) -> dict[str, Any]:
        return {"insecure": True} if secrets is None else secrets.options(name)

    server_options = {**security(server_name), **server_options}
    client_options = {**security(client_name), **(client_options or {})}
    async with (
        open_node(server_name, actors, **server_options) as server,
        open_node(client_name, host=None, **client_options) as client,
    ):
        yield NodePair(server, client)


async def send_raw(
    client: Node, address: Address, data: bytes, message_id: str, timeout: float = 30.0
) -> Outcome:
    """Send ``data`` (an encoded message, signed by whoever made it, or not at
    all) as it is to ``address``, on ``client``'s own authenticated connection;
    the outcome the receiving node settled it with."""
    pending = Pending(address.name, data, message_id)
    with trio.fail_after(timeout):
        await client.outbox.open_peer(address).transmit(pending)
        await pending.done.wait()
    assert pending.outcome is not None
    return pending.outcome


async def open_session(client: Node, address: Address, timeout: float = 10.0) -> Session:
    """The signing session ``client`` holds with the node of ``address`` (its
    connection there opened, if it was not)."""
    peer = client.outbox.open_peer(address)
    with trio.fail_after(timeout):
        await peer.wait_ready()
    signer = peer._signer
    assert isinstance(signer, SessionSigner), "the client node opened no session"
    return signer.session
