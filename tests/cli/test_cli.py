"""The actorctl command, driven in real subprocesses."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
import trio

from tests.support.cli import node_ready, run_cli_async, start_cli
from tests.support.harness import free_port


async def _run(*args: str, insecure: bool = True) -> subprocess.CompletedProcess[bytes]:
    extra = ["--insecure"] if insecure and args[0] in ("call", "send") else []
    return await run_cli_async(*args, *extra)


@pytest.fixture
async def node_address(nursery: trio.Nursery):  # type: ignore[no-untyped-def]
    port = free_port()
    proc = await start_cli(
        nursery, "node", "run", "tests.apps.actors:Calculator", "--listen", f"127.0.0.1:{port}",
        "--insecure",
    )  # fmt: skip
    assert proc.stdout is not None
    await node_ready(proc, 20)
    yield f"amqp://127.0.0.1:{port}/calculator"
    proc.send_signal(signal.SIGINT)  # our own child, by its PID
    with trio.fail_after(20):
        rest = b""
        while chunk := await proc.stdout.receive_some(4096):
            rest += chunk
        await proc.wait()
    assert proc.returncode == 0
    assert b"actorctl:node:stopped" in rest


async def test_call_prints_the_result_as_json(node_address: str) -> None:
    result = await _run("call", node_address, "add", "2", "40")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == 42


async def test_call_reads_json_arguments_and_keywords(node_address: str) -> None:
    result = await _run(
        "call", node_address, "greet", "--kw", 'user={"name": "Ada", "email": "a@b.c"}'
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == "hello Ada <a@b.c>"


async def test_call_exits_non_zero_with_the_remote_error(node_address: str) -> None:
    result = await _run("call", node_address, "fail", "no space left")
    assert result.returncode == 1
    assert b"ValueError: no space left" in result.stderr


async def test_send_waits_until_accepted_and_reports_refusals(node_address: str) -> None:
    ok = await _run("send", node_address, "remember", "hello")
    assert ok.returncode == 0, ok.stderr
    assert b"accepted" in ok.stdout
    refused = await _run("send", node_address, "no_such_handler")
    assert refused.returncode == 1
    assert b"actorctl:unknown-handler" in refused.stderr


async def test_a_bad_address_is_a_usage_error() -> None:
    result = await _run("call", "http://example/x", "add")
    assert result.returncode == 2
    assert b"scheme must be amqp://" in result.stderr


async def test_call_to_a_node_that_is_not_there_fails_within_the_timeout() -> None:
    result = await _run("call", f"amqp://127.0.0.1:{free_port()}/x", "add", "--timeout", "0.5")
    assert result.returncode == 1
    assert b"is the node running?" in result.stderr or b"within" in result.stderr


async def test_node_run_with_a_bad_target_says_what_is_wrong() -> None:
    result = await _run(
        "node", "run", "tests.nonexistent:Thing", "--listen", "127.0.0.1:0", "--insecure"
    )
    assert result.returncode == 2
    assert b"cannot import module 'tests.nonexistent'" in result.stderr


async def test_a_secure_cluster_from_the_command_line(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    # Given certificates and keys made with the CLI itself
    for args in (
        ["certs", "init", str(tmp_path / "certs"), "--node", "vault", "--node", "cli"],
        ["keys", "gen", "vault", "--dir", str(tmp_path / "keys")],
        ["keys", "gen", "cli", "--dir", str(tmp_path / "keys")],
    ):
        made = await _run(*args, insecure=False)
        assert made.returncode == 0, made.stderr
    listed = await _run("keys", "list", "--dir", str(tmp_path / "keys"), insecure=False)
    assert b"vault" in listed.stdout
    assert b"private+public" in listed.stdout
    secure = ["--certs", str(tmp_path / "certs"), "--keys", str(tmp_path / "keys")]
    port = free_port()
    proc = await start_cli(
        nursery, "node", "run", "tests.apps.actors:Calculator", "--name", "vault",
        "--listen", f"127.0.0.1:{port}", *secure,
    )  # fmt: skip
    assert proc.stdout is not None
    _, buffer = await node_ready(proc, 20)
    # When the CLI calls it over mutual TLS, signing with its own key
    address = f"amqps://127.0.0.1:{port}/calculator"
    result = await _run("call", address, "add", "20", "22", *secure, insecure=False)
    # Then it gets the answer, and the node never warned about being insecure
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == 42
    without = await _run("call", address, "add", "1", "1", insecure=False)
    assert without.returncode == 2
    assert b"--certs DIR" in without.stderr
    proc.send_signal(signal.SIGINT)
    with trio.fail_after(20):
        while chunk := await proc.stdout.receive_some(4096):
            buffer += chunk
        await proc.wait()
    assert b"actorctl:node:insecure" not in buffer
    assert b"actorctl:delivery:unauthenticated" not in buffer
