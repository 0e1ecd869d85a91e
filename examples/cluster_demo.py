"""A supervised cluster doing real work: the README's main command runs this.

It copies examples/cluster.toml to a temporary directory with free ports, runs
``actorctl cluster up`` on it (a Controller supervising two worker nodes, each
hosting two instances of each worker actor, and a gateway node whose routers
spread work over them; mutual TLS and signed messages throughout, with a
development CA and keys made on the spot), sends work through the routers,
kills one worker node with SIGKILL halfway, and shows that the cluster restarts
it and that no work is lost. It prints ``cluster status`` and stops the cluster
with ``cluster down``.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

import actorctl
from actorctl import Keyring
from examples.workers import Document

HERE = Path(__file__).resolve().parent
ACTORCTL = [sys.executable, "-m", "actorctl"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def with_free_ports(text: str) -> str:
    return re.sub(r"127\.0\.0\.1:57\d\d", lambda _: f"127.0.0.1:{free_port()}", text)


class Output:
    """cluster up's terminal output, echoed, read up to the line we wait for."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self.pending = b""

    async def until(self, text: str) -> str:
        with trio.fail_after(60):
            while True:
                *lines, self.pending = self.pending.split(b"\n")
                for index, raw in enumerate(lines):
                    line = raw.decode()
                    print(f"  | {line}")
                    if text in line:
                        rest = lines[index + 1 :]
                        self.pending = b"\n".join([*rest, self.pending])
                        return line
                chunk = await self.stream.receive_some(4096)
                if not chunk:
                    raise RuntimeError(f"cluster up ended before it said {text!r}")
                self.pending += chunk


async def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "cluster.toml"
        text = with_free_ports((HERE / "cluster.toml").read_text())
        path.write_text(text)
        gateway = re.search(r'name = "gateway"\nlisten = "([^"]+)"', text)
        assert gateway is not None
        await run(path, f"amqps://{gateway.group(1)}")


async def run(path: Path, gateway: str) -> None:
    command = [*ACTORCTL, "cluster", "up", str(path)]
    print(f"$ actorctl cluster up {path.name}")
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    async with trio.open_nursery() as nursery:
        proc: trio.Process = await nursery.start(
            functools.partial(
                trio.run_process, command, stdout=subprocess.PIPE, check=False, env=env
            )
        )
        assert proc.stdout is not None
        out = Output(proc.stdout)
        ready = await out.until("node worker-1 ready at")
        victim = int(ready.rpartition("(pid ")[2].split(")")[0])
        await out.until("cluster 'demo' ready")
        await send_work(path.parent, gateway, victim, out)
        print("$ actorctl cluster status")
        status = await trio.run_process([*ACTORCTL, "cluster", "status", str(path)],
                                        capture_stdout=True, env=env)  # fmt: skip
        print("\n".join(f"  {line}" for line in status.stdout.decode().splitlines()))
        print("$ actorctl cluster down")
        await trio.run_process([*ACTORCTL, "cluster", "down", str(path)], env=env)
        await out.until("cluster 'demo' stopped")
    print(f"cluster stopped (exit code {proc.returncode})")


async def send_work(root: Path, gateway: str, victim: int, out: Output) -> None:
    tls = actorctl.TlsFiles.from_dir(root / "certs", "cli")
    keys = Keyring.load(root / "keys", "cli")
    async with actorctl.open_node("cli", host=None, tls=tls, keyring=keys) as client:
        words = client.ref(f"{gateway}/words").with_options(timeout=30)
        primes = client.ref(f"{gateway}/primes").with_options(timeout=30)
        started = time.perf_counter()
        text = "the quick brown fox {} jumps over the lazy dog"
        documents = [Document(f"doc {i}", text.format(i)) for i in range(200)]
        done = 0

        async def count(doc: Document) -> None:
            nonlocal done
            await words.ask("count", doc)
            done += 1
            if done == 100:
                print(f"  100 documents counted; killing worker-1 (pid {victim}) with SIGKILL")
                os.kill(victim, signal.SIGKILL)

        async with trio.open_nursery() as nursery:
            for doc in documents:
                nursery.start_soon(count, doc)
        print(f"  all {len(documents)} documents counted through the router despite the kill")
        await out.until("node worker-1 ready at")
        limits = [10_000, 50_000, 100_000, 500_000]
        results = {}

        async def sieve(limit: int) -> None:
            results[limit] = await primes.ask("count_below", limit)

        async with trio.open_nursery() as nursery:
            for limit in limits:
                nursery.start_soon(sieve, limit)
        for limit in limits:
            print(f"  {results[limit]} primes below {limit:,}")
        print(f"  work done in {time.perf_counter() - started:.2f} s")


if __name__ == "__main__":
    trio.run(main)
