"""A real etcd for tests: Debian's etcd-server, one member on 127.0.0.1 (or an
address of a test's network namespace), a data directory of its own, started
and killed by its PID; and a relay to it that a test can cut and heal.

Tests that need it skip, naming the package, only when the ``etcd`` binary is
missing (``.ci/run`` installs it).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support.harness import free_port
from tests.support.tls import make_tls

#: Seconds etcd may take to start answering (it elects itself first).
START_TIMEOUT = 20.0
#: Fast raft timings: a member elects itself in a fraction of a second, and
#: etcd's shortest lease (1.5 election timeouts) is 1 s instead of 2.
RAFT = ["--heartbeat-interval=50", "--election-timeout=250"]


def etcd_binary() -> str:
    path = shutil.which("etcd")
    if path is None:
        pytest.skip("etcd-server (Debian's etcd) is not installed: apt-get install etcd-server")
    return path


class EtcdServer:
    """One etcd member; :meth:`kill` (SIGKILL) and :meth:`start` again on the same data.

    With ``host``, an address of a test's network namespace (tests/support/netns.py),
    it listens there on etcd's usual ports (a namespace's ports are all free):
    run :meth:`command` on that host; :meth:`start` is for 127.0.0.1 (it waits
    for etcd's answer from the namespace the tests run in). With ``name`` and
    ``initial_cluster`` (``NAME=PEER_URL,...``: every member's), it is one
    member of a new cluster of several, with ``raft`` for its timings.
    """

    def __init__(
        self,
        directory: Path,
        *,
        tls: bool = False,
        client_auth: bool = False,
        host: str = "127.0.0.1",
        name: str = "test",
        initial_cluster: str | None = None,
        raft: Sequence[str] = RAFT,
    ) -> None:
        self.binary = etcd_binary()
        self.name = name
        self.initial_cluster = initial_cluster
        self.raft = list(raft)
        self.directory = directory
        self.host = host
        # Another host's ports (a network namespace's) are all free: etcd's own.
        local = host == "127.0.0.1"
        self.client_port = free_port() if local else 2379
        self.peer_port = free_port() if local else 2380
        scheme = "https" if tls or client_auth else "http"
        self.url = f"{scheme}://{host}:{self.client_port}"
        made = make_tls(directory / "tls", "etcd", "client") if tls or client_auth else {}
        self.tls = made.get("etcd")
        #: With ``client_auth``, etcd asks every client for a certificate of its
        #: CA (``--client-cert-auth``): this is one.
        self.client_tls = made["client"] if client_auth else None
        self.process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        peer = f"http://{self.host}:{self.peer_port}"
        command = [
            self.binary,
            f"--name={self.name}",
            f"--data-dir={self.directory / 'data'}",
            f"--listen-client-urls={self.url}",
            f"--advertise-client-urls={self.url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster={self.initial_cluster or f'{self.name}={peer}'}",
            *self.raft,
        ]
        if self.initial_cluster is not None:
            command += ["--initial-cluster-state=new", "--initial-cluster-token=actorctl-test"]
        if self.tls is not None:
            command += [f"--cert-file={self.tls.cert}", f"--key-file={self.tls.key}"]
        if self.client_tls is not None:
            command += ["--client-cert-auth", f"--trusted-ca-file={self.client_tls.ca}"]
        return command

    def start(self) -> None:
        """Start etcd and wait (bounded) until it answers a read."""
        assert self.process is None, "etcd is running already"
        log = (self.directory / "etcd.log").open("ab")
        self.process = subprocess.Popen(
            self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while not self._answers():
            if self.process.poll() is not None:
                raise RuntimeError(f"etcd exited: {self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"etcd did not answer in {START_TIMEOUT} s: {self.log_tail()}")
            time.sleep(0.05)  # another process, that says nothing when it is ready: polled

    def kill(self) -> None:
        """SIGKILL the etcd this object started, by its PID, and reap it."""
        if self.process is None:
            return
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        self.process = None

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """A request made without the client under test (e.g. a compaction)."""
        request = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=5, context=self._context()) as answer:
            result: dict[str, Any] = json.load(answer)
            return result

    def enable_auth(self, password: str) -> None:
        """Turn etcd's auth on, with the user ``root`` (``password``), and the
        user ``actorctl`` (``password`` too) that may read and write /actorctl/
        only, as docs/deploy.md says to make it."""
        self.post("/v3/auth/user/add", {"name": "root", "password": password})
        self.post("/v3/auth/user/grant", {"user": "root", "role": "root"})
        self.post("/v3/auth/role/add", {"name": "actorctl"})
        span = {"key": _b64("/actorctl/"), "range_end": _b64("/actorctl0")}
        self.post("/v3/auth/role/grant", {"name": "actorctl", "perm": {"permType": 2, **span}})
        self.post("/v3/auth/user/add", {"name": "actorctl", "password": password})
        self.post("/v3/auth/user/grant", {"user": "actorctl", "role": "actorctl"})
        self.post("/v3/auth/enable", {})

    def log_tail(self) -> str:
        return (self.directory / "etcd.log").read_text(errors="replace")[-2000:]

    def _answers(self) -> bool:
        try:
            self.post("/v3/kv/range", {"key": "AA=="})
        except urllib.error.HTTPError as exc:
            # a read refused as bad (400): it answers, its auth on ("user name
            # is empty"); not yet ready, it says unavailable (503)
            return exc.code == 400
        except (OSError, urllib.error.URLError, ValueError):
            return False
        return True

    def _context(self) -> ssl.SSLContext | None:
        if self.tls is None:
            return None
        context = ssl.create_default_context(cafile=str(self.tls.ca))
        if self.client_tls is not None:
            context.load_cert_chain(self.client_tls.cert, self.client_tls.key)
        return context


@contextlib.contextmanager
def running_etcd(directory: Path, **options: Any) -> Iterator[EtcdServer]:
    """An etcd started in ``directory`` for the block, killed (by its PID) after."""
    server = EtcdServer(directory, **options)
    server.start()
    try:
        yield server
    finally:
        server.kill()


@contextlib.asynccontextmanager
async def open_proxy(target_port: int) -> AsyncIterator[Proxy]:
    """A relay to etcd's port on 127.0.0.1 for the duration of the block."""
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    proxy = Proxy(listener, target_port)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(proxy.serve)
        yield proxy
        proxy.cut()
        nursery.cancel_scope.cancel(reason="the proxy's block ended")


class Proxy:
    """A TCP relay to etcd on 127.0.0.1: a client behind it is cut off from
    etcd by :meth:`cut` (every connection ends, and new ones are closed at
    once) until :meth:`heal`, while etcd itself stays up for everyone else."""

    def __init__(self, listener: trio.SocketListener, target_port: int) -> None:
        self._listener = listener
        self._target = target_port
        self._relays: set[trio.CancelScope] = set()
        self._cut = False
        self.url = f"http://127.0.0.1:{listener.socket.getsockname()[1]}"

    def cut(self) -> None:
        self._cut = True
        for scope in self._relays:
            scope.cancel(reason="the link is cut")

    def heal(self) -> None:
        self._cut = False

    async def serve(self) -> None:
        async with self._listener:
            await trio.serve_listeners(self._relay, [self._listener])

    async def _relay(self, client: trio.SocketStream) -> None:
        async with client:
            if self._cut:
                return
            with trio.CancelScope() as scope:
                self._relays.add(scope)
                try:
                    await self._pump_both(client)
                finally:
                    self._relays.discard(scope)

    async def _pump_both(self, client: trio.SocketStream) -> None:
        async with await trio.open_tcp_stream("127.0.0.1", self._target) as server:

            async def pump(source: trio.SocketStream, sink: trio.SocketStream) -> None:
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    while data := await source.receive_some(65536):
                        await sink.send_all(data)
                    await sink.send_eof()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(pump, client, server)
                nursery.start_soon(pump, server, client)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()
