"""Two nodes exchanging work: the README's main command runs this.

It makes a development cluster CA, certificates and identity keys in a
temporary directory (what ``actorctl certs init`` and ``actorctl keys gen``
make), starts a worker node in a subprocess (``actorctl node run
examples.workers:actors``), waits until it reports ready, then a second node in
this process sends it work over a mutually authenticated TLS link, each message
signed within a session: documents to count words in (an async handler), prime
counts and hash chains (sync handlers, in worker threads), a bad call to show
the error a caller gets; it prints what happened and stops the worker by its PID.
"""

from __future__ import annotations

import functools
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

import actorctl
from actorctl.mailbox import IdentityKey, Keyring
from actorctl.ops import init_certs
from examples.workers import Document

TEXTS = {
    "Ode": "the sea the sky and the sea again, salt and sky",
    "Memo": "ship the release on monday; test the release on sunday",
    "Recipe": "salt the water, boil the water, add the pasta",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_ready(proc: trio.Process) -> str:
    """Read the worker's JSON log lines until it says it is ready."""
    assert proc.stdout is not None
    buffer = b""
    with trio.fail_after(20):
        while True:
            chunk = await proc.stdout.receive_some(4096)
            if not chunk:
                raise RuntimeError("the worker node exited before it was ready")
            buffer += chunk
            for line in buffer.splitlines():
                if line.startswith(b"{") and b'"actorctl:node:ready"' in line:
                    return str(json.loads(line)["address"])


async def drain(proc: trio.Process) -> None:
    """Keep reading the worker's log lines so that its pipe never fills."""
    assert proc.stdout is not None
    while await proc.stdout.receive_some(65536):
        pass


def make_secrets(directory: Path) -> None:
    """A throwaway cluster CA with certificates, and an identity key per node."""
    init_certs(directory / "certs", ["worker", "client"])
    for name in ("worker", "client"):
        IdentityKey.generate(name).save(directory / "keys", name)


async def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        await run(Path(directory))


async def run(secrets: Path) -> None:
    make_secrets(secrets)
    print(f"made a development CA, certificates and keys in {secrets}")
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "actorctl",
        "node",
        "run",
        "examples.workers:actors",
        "--listen",
        f"127.0.0.1:{port}",
        "--name",
        "worker",
        "--certs",
        str(secrets / "certs"),
        "--keys",
        str(secrets / "keys"),
    ]
    print(f"starting worker node: {' '.join(command[2:])}")
    async with trio.open_nursery() as nursery:
        proc: trio.Process = await nursery.start(
            functools.partial(trio.run_process, command, stdout=subprocess.PIPE, check=False)
        )
        try:
            address = await wait_ready(proc)
            nursery.start_soon(drain, proc)
            print(f"worker node ready at {address} (pid {proc.pid})")
            async with actorctl.open_node(
                "client",
                host=None,
                tls=actorctl.TlsFiles.from_dir(secrets / "certs", "client"),
                keyring=Keyring.load(secrets / "keys", "client"),
            ) as client:
                print("client node up: it dials over mutual TLS and signs what it sends")
                await send_work(client, address)
        finally:
            proc.send_signal(signal.SIGINT)
    print(f"worker node stopped (exit code {proc.returncode})")


async def send_work(client: actorctl.Node, address: str) -> None:
    words = client.ref(f"{address}/words")
    primes = client.ref(f"{address}/primes").with_options(timeout=30)
    started = time.perf_counter()

    async with trio.open_nursery() as nursery:
        for title, text in TEXTS.items():

            async def count(title: str = title, text: str = text) -> None:
                summary = await words.ask("count", Document(title, text))
                print(
                    f"  words: {summary['title']!r}: {summary['words']} words, top {summary['top']}"
                )

            nursery.start_soon(count)
        for limit in (10_000, 100_000, 1_000_000):

            async def sieve(limit: int = limit) -> None:
                print(f"  primes: {await primes.ask('count_below', limit)} primes below {limit:,}")

            nursery.start_soon(sieve)

        async def chain() -> None:
            digest = await primes.ask("digest", "actorctl", rounds=20_000)
            print(f"  primes: sha256 chain of 20,000 rounds ends {digest[:16]}...")

        nursery.start_soon(chain)

    print(f"  totals: most common words across documents: {await words.ask('totals_top', 3)}")
    try:
        await words.ask("count", {"title": "no text"})
    except actorctl.Rejected as exc:
        print(f"  a bad call is refused, naming the problem: {exc.description}")
    print(f"all work done in {time.perf_counter() - started:.2f} s")


if __name__ == "__main__":
    trio.run(main)
