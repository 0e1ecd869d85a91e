"""A tiny HTTP/1.1 server and client on trio: a node's ``/metrics`` and the
Controller's web page.

One request per connection (``Connection: close``), bodies by
``Content-Length``, no chunked encoding: what a Prometheus scraper, a browser
and the Controller's own scraper need, and nothing more. A response body is
bytes, or an async iterator of bytes (server-sent events) written until the
client goes or the server stops. Over TLS the client's certificate, when it
gives one, reaches the handler (``Request.peer_cert``): the web page's
control actions need the operator's.
"""

from __future__ import annotations

import ssl
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any, Final, final
from urllib.parse import parse_qs, unquote, urlsplit

import attrs
import trio

from .._errors import ConfigError
from .._log import log

__all__ = [
    "Request",
    "Response",
    "failure_text",
    "http_get",
    "log_failure",
    "parse_listen",
    "serve_http",
]

_MAX_HEAD: Final = 16384
_MAX_BODY: Final = 1 << 20
_HEAD_TIMEOUT: Final = 10.0
_REASONS: Final = MappingProxyType(
    {
        200: "OK",
        400: "Bad Request",
        403: "Forbidden",
        404: "Not Found",
        405: "Method Not Allowed",
        500: "Internal Server Error",
        502: "Bad Gateway",
    }
)


@attrs.frozen
class Request:
    """One request: ``path`` without the query, ``query`` its first values."""

    method: str
    path: str
    query: Mapping[str, str]
    headers: Mapping[str, str]
    body: bytes
    peer_cert: Mapping[str, Any] | None = None


@attrs.frozen
class Response:
    """What a handler answers: a status, a content type, and a body (bytes,
    or an async iterator of bytes for a stream such as server-sent events)."""

    status: int = 200
    content_type: str = "text/plain; charset=utf-8"
    body: bytes | AsyncIterator[bytes] = b""


Handler = Callable[[Request], Awaitable[Response]]


def parse_listen(value: str, what: str) -> tuple[str, int]:
    """``HOST:PORT`` (port 0: a free one) as a pair.

    Raises:
        ConfigError: naming ``what`` and the value, when it is not HOST:PORT.
    """
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{what} = {value!r}: give HOST:PORT, e.g. 127.0.0.1:9464 (0: any port)")
    return host.strip("[]"), int(port)


async def serve_http(
    handler: Handler,
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``handler`` on ``host:port`` until cancelled; reports the port."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    task_status.started(bound)

    async def connection(stream: trio.SocketStream) -> None:
        await _Connection(stream, handler, ssl_context).run()

    await trio.serve_listeners(connection, listeners)


@final
class _Connection:
    def __init__(
        self, stream: trio.SocketStream, handler: Handler, context: ssl.SSLContext | None
    ) -> None:
        self._raw = stream
        self._stream: trio.abc.Stream = stream
        self._handler = handler
        self._context = context

    async def run(self) -> None:
        try:
            with trio.move_on_after(_HEAD_TIMEOUT) as scope:
                try:
                    request = await self._read_request()
                except _BadRequest as exc:
                    log("actorctl:http:bad-request", error=str(exc))
                    await self._write(Response(400, body=f"bad request: {exc}\n".encode()))
                    return
            if scope.cancelled_caught or request is None:
                return
            await self._write(await self._answer(request))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, ssl.SSLError):
            pass  # the client went
        finally:
            await _close(self._stream)

    async def _answer(self, request: Request) -> Response:
        """The handler's response; if it fails, a short 500 that says what failed
        (its traceback goes to the log, never to the client)."""
        try:
            return await self._handler(request)
        except Exception as exc:  # one bad request must not take the server down
            log_failure(request, exc)
            return Response(500, body=f"{failure_text(request, exc)}\n".encode())

    async def _read_request(self) -> Request | None:
        peer_cert = None
        if self._context is not None:
            tls = trio.SSLStream(self._raw, self._context, server_side=True)
            await tls.do_handshake()
            self._stream = tls
            peer_cert = tls.getpeercert() or None
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await self._stream.receive_some(4096)
            if not chunk or len(data) > _MAX_HEAD:
                return None
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, _version = lines[0].split(" ", 2)
        except ValueError:
            line = lines[0][:80]
            raise _BadRequest(f"request line {line!r} is not METHOD PATH VERSION") from None
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = min(_content_length(headers.get("content-length", "")), _MAX_BODY)
        while len(body) < length:
            chunk = await self._stream.receive_some(length - len(body))
            if not chunk:
                return None
            body += chunk
        parts = urlsplit(target)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        return Request(method.upper(), unquote(parts.path), query, headers, body, peer_cert)

    async def _write(self, response: Response) -> None:
        reason = _REASONS.get(response.status, "Unknown")
        head = [
            f"HTTP/1.1 {response.status} {reason}",
            f"Content-Type: {response.content_type}",
            "Connection: close",
            "Cache-Control: no-store",
        ]
        body = response.body
        if isinstance(body, bytes):
            head.append(f"Content-Length: {len(body)}")
            await self._stream.send_all(("\r\n".join(head) + "\r\n\r\n").encode() + body)
            return
        await self._stream.send_all(("\r\n".join(head) + "\r\n\r\n").encode())
        async for chunk in body:  # a stream: until the client goes (or we are cancelled)
            await self._stream.send_all(chunk)


class _BadRequest(Exception):
    """A request that is not HTTP/1.1 as this server reads it (answered 400)."""


def _content_length(value: str) -> int:
    if not value:
        return 0
    if not value.isdigit():
        raise _BadRequest(f"Content-Length {value[:40]!r} is not a whole number of bytes")
    return int(value)


def failure_text(request: Request, exc: Exception) -> str:
    """What a client is told when answering ``request`` failed with ``exc``:
    one line, without a traceback."""
    what = str(exc) or type(exc).__name__
    return f"{request.method} {request.path} failed: {what} (the server's log has the details)"


def log_failure(request: Request, exc: Exception) -> None:
    """Log a failed request with its traceback (for the operator, not the client)."""
    log(
        "actorctl:http:failed",
        method=request.method,
        path=request.path,
        error=repr(exc),
        traceback="".join(traceback.format_exception(exc)),
    )


async def http_get(
    host: str,
    port: int,
    path: str,
    *,
    timeout: float,
    ssl_context: ssl.SSLContext | None = None,
) -> tuple[int, bytes]:
    """GET ``path`` from ``host:port``: the status and the body.

    Raises:
        OSError, trio.TooSlowError: it could not connect, or no whole answer
            came within ``timeout`` seconds.
    """
    with trio.fail_after(timeout):
        stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
        try:
            if ssl_context is not None:
                stream = trio.SSLStream(stream, ssl_context, server_hostname=host)
            request = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n"
            await stream.send_all(request.encode())
            data = b""
            try:
                while chunk := await stream.receive_some(65536):
                    data += chunk
            except trio.BrokenResourceError:
                if not data:  # a TLS peer that closed without close_notify, after its answer
                    raise
        finally:
            await trio.aclose_forcefully(stream)
    head, _, body = data.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ", 2)[1])
    except (IndexError, ValueError):
        raise OSError(f"{host}:{port}{path}: not an HTTP answer") from None
    return status, body


async def _close(stream: trio.abc.Stream) -> None:
    """Close gracefully (TLS: with close_notify, so the client sees a clean end)
    within a second, else forcefully."""
    with trio.move_on_after(1.0) as scope:
        try:
            await stream.aclose()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, ssl.SSLError):
            scope.cancel()
    if scope.cancelled_caught:
        await trio.aclose_forcefully(stream)
