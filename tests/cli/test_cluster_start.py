"""``cluster up`` when starting goes wrong: a node that cannot start shows its
own error (and where the rest is) without announcing a restart; Ctrl-C while
it starts says so and exits 130, leaving no node behind; a second ``cluster
up`` of a running cluster says the cluster is already running."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Final

import pytest
import trio

from tests.support.cli import run_cli_async, start_cli
from tests.support.harness import free_port

ROOT: Final = Path(__file__).resolve().parents[2]
ENV: Final = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}


def _cluster(directory: Path, actors: str) -> Path:
    path = directory / "cluster.toml"
    path.write_text(
        f'[cluster]\nname = "starts"\ninsecure = true\ncontroller = "127.0.0.1:{free_port()}"\n'
        f'[[node]]\nname = "n"\nlisten = "127.0.0.1:{free_port()}"\nactors = "{actors}"\n'
    )
    return path


async def _start(path: Path, nursery: trio.Nursery) -> trio.Process:
    return await start_cli(nursery, "cluster", "up", path, env=ENV, stderr=subprocess.PIPE)


async def _until(process: trio.Process, text: bytes) -> bytes:
    assert process.stdout is not None
    seen = b""
    while text not in seen:
        chunk = await process.stdout.receive_some(65536)
        assert chunk, seen.decode()
        seen += chunk
    return seen


async def _rest(stream: trio.abc.ReceiveStream | None) -> str:
    assert stream is not None
    out = b""
    while chunk := await stream.receive_some(65536):
        out += chunk
    return out.decode()


def _nodes_of(path: Path) -> list[str]:
    """The processes still running with ``path`` on their command line."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if str(path).encode() in command and b"node\0run" in command:
                found.append(entry.name)
    return found


@pytest.mark.parametrize("in_process", [False, True], ids=["subprocess", "in-process"])
async def test_a_node_that_cannot_start_shows_its_own_error(
    tmp_path: Path, in_process: bool
) -> None:
    path = _cluster(tmp_path, "tests.apps.actors:BrokenStart")
    flags = ["--in-process"] if in_process else []
    done = await run_cli_async("cluster", "up", path, *flags, env=ENV)
    out = done.stdout.decode() + done.stderr.decode()
    log = tmp_path / "logs" / ("cluster.log" if in_process else "n.log")
    assert done.returncode == 1, out
    assert (
        "error: node n could not start: RuntimeError: the ledger file is locked by another "
        f"process (its log: {log})"
    ) in out
    assert "restart" not in out
    assert "Traceback" not in out
    # the rest of the story is in its log
    assert "actorctl:node:start-failed" in log.read_text()


async def test_ctrl_c_while_starting_says_interrupted_and_exits_130(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    path = _cluster(tmp_path, "tests.apps.actors:NeverReady")
    process = await _start(path, nursery)
    with trio.fail_after(30):
        await _until(process, b"node n starting")
        process.send_signal(signal.SIGINT)
        errors = await _rest(process.stderr)
        assert await process.wait() == 130, errors
    assert "interrupted: cluster 'starts' was starting" in errors
    assert "Traceback" not in errors
    assert not _nodes_of(path)


async def test_a_second_cluster_up_says_the_cluster_is_already_running(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    path = _cluster(tmp_path, "tests.apps.actors:Calculator")
    first = await _start(path, nursery)
    with trio.fail_after(30):
        await _until(first, b"cluster 'starts' ready")
        again = await run_cli_async("cluster", "up", path, env=ENV)
        first.send_signal(signal.SIGINT)
        assert await first.wait() == 0
    out = again.stderr.decode()
    assert again.returncode == 1, out
    assert "of the controller" in out
    assert "cluster 'starts' is already running" in out
    assert f"actorctl cluster down {path}" in out
