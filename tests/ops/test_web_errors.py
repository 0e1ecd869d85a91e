"""The web page's server answers a request that fails with a short error,
never a Python traceback, and goes on serving: real HTTP over 127.0.0.1,
real log files the page reads.

(The whole page, on a real cluster, is tests/ops/test_web.py; here the failures
are made on purpose: a corrupt log line, an unreadable log, a malformed
request.)
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from actorctl.cluster._http import http_get, serve_http
from actorctl.ops._scrape import Scraper
from actorctl.ops._web import WebApp
from tests.support.harness import Logs


async def _no_controller(handler: str, *args: Any) -> Any:
    raise AssertionError(f"these requests ask the Controller nothing (asked {handler!r})")


@asynccontextmanager
async def _page(log_dir: Path) -> AsyncIterator[int]:
    """The web page's server on 127.0.0.1, reading the nodes' logs in ``log_dir``: its port."""
    app = WebApp(_no_controller, Scraper(dict), list, log_dir, "errors")
    async with trio.open_nursery() as nursery:
        port = await nursery.start(functools.partial(serve_http, app.handle, "127.0.0.1", 0))
        yield port
        nursery.cancel_scope.cancel()


async def _raw(port: int, request: bytes) -> bytes:
    """What the server answers to ``request``, sent as given."""
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(request)
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
    return data


async def test_a_get_that_fails_answers_a_short_error_and_logs_the_traceback(
    tmp_path: Path, logs: Logs
) -> None:
    # Given a node's log with a line of the task whose time is not a number
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    line = {"task_uuid": "u1", "task_level": [1], "task_id": "t1", "timestamp": "noon"}
    (log_dir / "w1.log").write_text(json.dumps(line) + "\n" + json.dumps(line) + "\n")
    async with _page(log_dir) as port:
        # When the page asks for that task's trace
        status, body = await http_get("127.0.0.1", port, "/api/task/t1", timeout=10)
        # Then it gets a 500 with one line of JSON saying what failed
        assert status == 500
        error = json.loads(body)["error"]
        assert error.startswith("GET /api/task/t1 failed: could not convert string to float")
        assert "Traceback" not in error
        assert "\n" not in error
        # and the server's log has the traceback
        (failed,) = logs.of_type("actorctl:http:failed")
        assert failed["path"] == "/api/task/t1"
        assert "Traceback (most recent call last)" in failed["traceback"]
        # and the page goes on serving
        status, body = await http_get("127.0.0.1", port, "/api/state", timeout=10)
        assert status == 200
        assert json.loads(body)["cluster"] == "errors"


async def test_logs_that_cannot_be_read_are_named(tmp_path: Path) -> None:
    # Given a log "file" that is a directory
    log_dir = tmp_path / "logs"
    (log_dir / "w1.log").mkdir(parents=True)
    async with _page(log_dir) as port:
        # When the page asks for a trace
        status, body = await http_get("127.0.0.1", port, "/api/task/t1", timeout=10)
    # Then the error names the logs and what is wrong with them
    assert status == 500
    error = json.loads(body)["error"]
    assert error == (
        f"cannot read the nodes' logs in {log_dir}: Is a directory ({log_dir / 'w1.log'})"
    )


async def test_a_malformed_request_is_answered_400_and_the_page_goes_on(
    tmp_path: Path, logs: Logs
) -> None:
    async with _page(tmp_path) as port:
        # When a request comes with a Content-Length that is not a number
        answer = await _raw(port, b"GET /api/state HTTP/1.1\r\nContent-Length: abc\r\n\r\n")
        # Then it is answered 400, naming the header
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 Bad Request")
        assert body == b"bad request: Content-Length 'abc' is not a whole number of bytes\n"
        # and so is a request line that is not one
        answer = await _raw(port, b"HELLO\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 400 Bad Request")
        assert b"is not METHOD PATH VERSION" in answer
        # and the server still serves
        status, _ = await http_get("127.0.0.1", port, "/api/state", timeout=10)
        assert status == 200
    assert len(logs.of_type("actorctl:http:bad-request")) == 2
