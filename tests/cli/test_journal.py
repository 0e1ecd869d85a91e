"""Logs go to the journal when systemd connected a node's output to it
(``JOURNAL_STREAM``): entries in the native protocol on a datagram socket the
test binds itself (``ACTORCTL_JOURNAL_SOCKET``), or JSON lines on stderr when
there is no socket.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import struct
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from actorctl.cli.output._journal import encode_entry
from tests.support.harness import free_port

ROOT = Path(__file__).resolve().parents[2]
WAIT = 20.0


def parse_entry(data: bytes) -> dict[str, str]:
    """A datagram of the journal's native protocol, as its fields."""
    fields: dict[str, str] = {}
    while data:
        line, sep, rest = data.partition(b"\n")
        assert sep, data
        if b"=" in line:
            key, _, value = line.partition(b"=")
            fields[key.decode()] = value.decode()
            data = rest
        else:  # KEY\n, 64-bit little-endian length, value, \n
            (size,) = struct.unpack("<Q", rest[:8])
            fields[line.decode()] = rest[8 : 8 + size].decode()
            assert rest[8 + size : 9 + size] == b"\n"
            data = rest[9 + size :]
    return fields


def test_an_entry_carries_the_message_its_trace_and_a_value_with_a_line_feed_intact() -> None:
    message = {
        "message_type": "actorctl:task:failed",
        "task_uuid": "u-1",
        "task_level": [2, 1],
        "timestamp": 1.5,
        "error": "line one\nline two",
    }
    entry = parse_entry(encode_entry(message))
    assert entry["MESSAGE"] == "task:failed error=line one\nline two"
    assert entry["PRIORITY"] == "4"  # not routine: a warning
    assert entry["SYSLOG_IDENTIFIER"] == "actorctl"
    assert entry["MESSAGE_TYPE"] == "actorctl:task:failed"
    assert (entry["ELIOT_TASK_UUID"], entry["ELIOT_TASK_LEVEL"]) == ("u-1", "/2/1")
    assert json.loads(entry["ELIOT_JSON"]) == message
    started = parse_entry(encode_entry({"action_type": "actorctl:task", "action_status": "failed"}))
    assert started["PRIORITY"] == "3"


@asynccontextmanager
async def node_under_systemd(
    env: dict[str, str],
) -> AsyncIterator[tuple[int, trio.abc.ReceiveStream]]:
    """``actorctl node run`` with its stdout a pipe that JOURNAL_STREAM names,
    as systemd starts a service whose output is the journal; yields the read
    end of its stdout, and its stderr."""
    read, write = os.pipe()
    status = os.fstat(write)
    environment = {
        **os.environ,
        **env,
        "JOURNAL_STREAM": f"{status.st_dev}:{status.st_ino}",
        "PYTHONPATH": str(ROOT),
    }
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "actorctl", "node", "run", "--insecure", "--name", "journaled",
         "--listen", f"127.0.0.1:{free_port()}"],
        stdout=write,
        stderr=subprocess.PIPE,
        env=environment,
    )  # fmt: skip
    os.close(write)
    assert process.stderr is not None
    try:
        yield read, process.stderr
    finally:
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(WAIT):
            await process.wait()
        os.close(read)


async def test_a_node_whose_output_is_the_journal_writes_entries_to_the_journal_socket(
    tmp_path: Path,
) -> None:
    # Given a journal socket of the test's own
    path = tmp_path / "journal.sock"
    journal = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_DGRAM)
    await journal.bind(str(path))
    with journal:
        # When a node runs with its output connected to the journal
        async with node_under_systemd({"ACTORCTL_JOURNAL_SOCKET": str(path)}) as (stdout, _):
            # Then its log arrives as native entries, up to the line that says it is ready
            with trio.fail_after(WAIT):
                while True:
                    entry = parse_entry(await journal.recv(1 << 20))
                    if entry["MESSAGE_TYPE"] == "actorctl:node:ready":
                        break
            assert entry["SYSLOG_IDENTIFIER"] == "actorctl"
            assert entry["PRIORITY"] == "6"
            assert json.loads(entry["ELIOT_JSON"])["node"] == "journaled"
            assert entry["ELIOT_TASK_UUID"]
            os.set_blocking(stdout, False)
            with contextlib.suppress(BlockingIOError):  # and none of it on stdout
                assert os.read(stdout, 65536) == b""


async def test_without_a_journal_socket_the_node_logs_json_lines_on_stderr(
    tmp_path: Path,
) -> None:
    env = {"ACTORCTL_JOURNAL_SOCKET": str(tmp_path / "absent.sock")}
    async with node_under_systemd(env) as (_, stderr):
        seen = b""
        with trio.fail_after(WAIT):
            while b'"actorctl:node:ready"' not in seen:
                chunk = await stderr.receive_some(65536)
                assert chunk, seen
                seen += chunk
    ready = next(line for line in seen.splitlines() if b'"actorctl:node:ready"' in line)
    assert json.loads(ready)["node"] == "journaled"
