"""actorctl's figures: a node in a subprocess, a client node in this process.

The same traffic as bench/_raw.py: ~100-byte JSON bodies ``[[1, 2], {"pad": ...}]``,
a receiver credit window of 100, at-least-once one-way messages, sequential asks,
and asks with 100 in flight. ``python bench/_actorctl.py`` prints its figures as JSON
(``--smoke``: with tiny counts, bench/_smoke.py).
"""

from __future__ import annotations

import functools
import json
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from actorctl import ActorRef, TlsFiles, open_node
from actorctl.mailbox import IdentityKey, Keyring
from actorctl.ops import init_certs

ROOT = Path(__file__).resolve().parent.parent
PAD = "x" * 79
WARMUP = 200
WINDOW = 100


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _wait_ready(proc: trio.Process) -> None:
    assert proc.stdout is not None
    buffer = b""
    with trio.fail_after(20):
        while b'"actorctl:node:ready"' not in buffer:
            chunk = await proc.stdout.receive_some(4096)
            if not chunk:
                raise RuntimeError("the benchmark node exited before it was ready")
            buffer += chunk


async def _tell(ref: ActorRef, count: int) -> float:
    started = time.perf_counter()
    for _ in range(count - 1):
        await ref.tell("noop", 1, 2, pad=PAD)
    await ref.deliver("noop", 1, 2, pad=PAD)  # settled in order: the last one closes the run
    return count / (time.perf_counter() - started)


async def _ask(ref: ActorRef, count: int) -> list[float]:
    for _ in range(WARMUP):
        await ref.ask("echo", 1, 2, pad=PAD)
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        await ref.ask("echo", 1, 2, pad=PAD)
        latencies.append(time.perf_counter() - started)
    return sorted(latencies)


async def _pipelined(ref: ActorRef, count: int) -> float:
    async def caller(n: int) -> None:
        for _ in range(n):
            await ref.ask("echo", 1, 2, pad=PAD)

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(WINDOW):
            nursery.start_soon(caller, count // WINDOW)
    return (count // WINDOW * WINDOW) / (time.perf_counter() - started)


@asynccontextmanager
async def _bench_node(
    security: str, directory: Path, metrics: int | None = None
) -> AsyncIterator[ActorRef]:
    """A node hosting the bench actor in a subprocess, and a ref to it from a
    client node in this process, with the given security: ``plain`` (TCP,
    unsigned), ``tls`` (mutual TLS, unsigned), ``ed25519`` (TLS, each message
    signed) or ``session`` (TLS, HMAC within a session)."""
    port = _free_port()
    command = [sys.executable, "-m", "actorctl", "node", "run", "bench._actors:actors",
               "--listen", f"127.0.0.1:{port}", "--name", "bench"]  # fmt: skip
    if metrics is not None:  # serve /metrics on this port (bench/metrics.py)
        command += ["--metrics", f"127.0.0.1:{metrics}"]
    options: dict[str, Any] = {"insecure": True}
    if security == "plain":
        command.append("--insecure")
    else:
        _make_certs(directory)
        command += ["--certs", str(directory / "certs")]
        options["tls"] = TlsFiles.from_dir(directory / "certs", "client")
        if security == "tls":
            command.append("--insecure")  # TLS, but messages unsigned
        else:
            command += ["--keys", str(directory / "keys")]
            options.update(
                insecure=False,
                keyring=Keyring.load(directory / "keys", "client"),
                sessions=security == "session",
            )
    async with trio.open_nursery() as nursery:
        proc: trio.Process = await nursery.start(
            functools.partial(
                trio.run_process, command, cwd=ROOT, stdout=subprocess.PIPE, check=False
            )
        )
        try:
            await _wait_ready(proc)
            nursery.start_soon(_drain, proc)
            async with open_node("bench-client", host=None, **options) as client:
                yield client.ref(f"amqp://127.0.0.1:{port}/bench").with_options(timeout=30)
        finally:
            proc.terminate()  # our own child, by its PID


def _make_certs(directory: Path) -> None:
    if (directory / "certs").exists():
        return
    init_certs(directory / "certs", ["bench", "client"])
    for name in ("bench", "client"):
        IdentityKey.generate(name).save(directory / "keys", name)


async def _measure(tell_count: int, ask_count: int, pipelined_count: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as directory:
        async with _bench_node("plain", Path(directory)) as ref:
            with trio.fail_after(300):
                tell = await _tell(ref, tell_count)
                latencies = await _ask(ref, ask_count)
                piped = await _pipelined(ref, pipelined_count)

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, round(q * (len(latencies) - 1)))] * 1e6

    return {
        "tell_per_s": tell,
        "ask_p50_us": pct(0.50),
        "ask_p99_us": pct(0.99),
        "ask_pipelined_per_s": piped,
    }


async def _measure_tell(security: str, count: int) -> float:
    with tempfile.TemporaryDirectory() as directory:
        async with _bench_node(security, Path(directory)) as ref:
            with trio.fail_after(300):
                await _tell(ref, min(count, 2000))  # warm up: connection, TLS, caches
                return await _tell(ref, count)


def measure_tell(security: str, count: int = 20000) -> float:
    """One-way tell throughput, messages/s, with the given security."""
    return float(trio.run(_measure_tell, security, count))


async def _measure_pipelined(security: str, count: int) -> float:
    with tempfile.TemporaryDirectory() as directory:
        async with _bench_node(security, Path(directory)) as ref:
            with trio.fail_after(300):
                await _pipelined(ref, min(count, 2000))  # warm up: connection, TLS, caches
                return await _pipelined(ref, count)


def measure_pipelined(security: str, count: int = 20000) -> float:
    """Asks with 100 in flight, calls/s, with the given security (the message a task
    rides on: bench/run.py sets tasks from trio code against it with ``session``)."""
    return float(trio.run(_measure_pipelined, security, count))


async def _drain(proc: trio.Process) -> None:
    assert proc.stdout is not None
    while await proc.stdout.receive_some(65536):
        pass


def measure(tell_count: int = 20000, ask_count: int = 2000, pipelined_count: int = 20000) -> Any:
    return trio.run(_measure, tell_count, ask_count, pipelined_count)


if __name__ == "__main__":
    if sys.argv[1:] == ["--smoke"]:  # tiny counts: does it still run? (bench/_smoke.py)
        print(json.dumps(measure(200, 50, 200), indent=2))
    else:
        print(json.dumps(measure(), indent=2))
