"""Run ``actorctl cluster up`` on a copy of a cluster.toml with free ports, for the
length of a ``with`` block: what the task examples (and their tests) stand on.

The cluster is a child process of ours; leaving the block stops it warm with
SIGTERM (as ``actorctl cluster down`` or Ctrl-C does) and, failing that, cold
with a second one, then with SIGKILL to that one process.
"""

from __future__ import annotations

import os
import queue
import re
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
ACTORCTL = [sys.executable, "-m", "actorctl"]
READY_TIMEOUT = 90.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def with_free_ports(text: str) -> str:
    """Every 127.0.0.1:PORT in ``text`` with a free port instead."""
    return re.sub(r"127\.0\.0\.1:\d+", lambda _: f"127.0.0.1:{free_port()}", text)


@contextmanager
def running_cluster(
    toml: Path, *, echo: bool = True, env: Mapping[str, str] | None = None
) -> Iterator[Path]:
    """Start the cluster ``toml`` describes (on free ports, in a temporary
    directory where its development certificates and keys are made) and yield
    the path of the cluster file it runs from."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "cluster.toml"
        path.write_text(with_free_ports(toml.read_text()))
        environment = {**os.environ, **(env or {})}
        paths = [str(HERE.parent), environment.get("PYTHONPATH", "")]
        environment["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        process = subprocess.Popen(
            [*ACTORCTL, "cluster", "up", str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=environment,
            text=True,
        )
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                lines.put(line.rstrip("\n"))
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        try:
            _until(lines, "ready", echo)
            yield path
        finally:
            stop_cluster(process)
            if process.stdout is not None:
                process.stdout.close()


def stop_cluster(process: subprocess.Popen[str]) -> None:
    """Stop the cluster that ``process`` (our ``cluster up`` child) runs: SIGTERM,
    which stops it warm as ``actorctl cluster down`` does (its nodes in reverse
    order, each within its shutdown_grace) without a process started to ask it;
    a second SIGTERM (its cold stop) if it has not exited 30 s on, then SIGKILL
    to that one process."""
    if process.poll() is not None:  # stopped already (by the test, say)
        return
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _until(lines: queue.Queue[str | None], word: str, echo: bool) -> None:
    """Read cluster up's output until its line that says the cluster is ``word``."""
    while True:
        try:
            line = lines.get(timeout=READY_TIMEOUT)
        except queue.Empty:
            raise RuntimeError(f"cluster up said nothing for {READY_TIMEOUT:g} s") from None
        if line is None:
            raise RuntimeError("cluster up ended before the cluster was ready")
        if echo:
            print(f"  | {line}")
        if line.startswith("cluster ") and line.endswith(f" {word}"):
            return
