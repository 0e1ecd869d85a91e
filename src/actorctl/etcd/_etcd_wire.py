"""How the etcd client reaches etcd: JSON over HTTP/1.1 to its v3 gateway, on trio.

etcd serves its gRPC API as JSON on the client port too (the grpc-gateway):
``POST /v3/kv/range`` with a JSON body answers with JSON, and a streaming call
(``/v3/watch``, ``/v3/lease/keepalive``) answers with a chunked body of one JSON
object per line. That is plain HTTP, so no gRPC stack, no generated code and no
new dependency: a small HTTP/1.1 client on trio streams (chunked reading
included, which a watch needs) is about as long as the glue a library would
need, and keeps every wait under our own ``trio`` deadlines.

One request per connection (``Connection: close``): the calls are few
(registration, a keepalive every few seconds, a campaign), and a fresh
connection has no state to go stale when an endpoint dies.

Endpoints are tried in turn, starting with the last one that answered. A call
moves to the next endpoint when one cannot be reached (refused, no connection
within the connect timeout, TLS failure, the connection broken before an
answer), does not answer within its share of the call's timeout (an equal
share of what is left, so that a member that hangs leaves time to the others),
or answers that it is unavailable (a member without a leader). The whole
call, every endpoint tried, is bounded by its timeout; when no endpoint
answered, :class:`EtcdUnavailable` names each one and why.
"""

from __future__ import annotations

import json
import os
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final, final
from urllib.parse import urlsplit

import attrs
import trio

from .._errors import ActorctlError, ConfigError

__all__ = ["EtcdCompacted", "EtcdError", "EtcdUnavailable", "Wire"]

#: The longest answer read from etcd (a range of a whole directory fits easily).
MAX_ANSWER: Final = 32 << 20
#: The longest line of an answer's head, or of one streamed message.
MAX_LINE: Final = 1 << 20
#: gRPC's status code for "unavailable" (e.g. "etcdserver: no leader"): try another member.
_UNAVAILABLE: Final = 14
#: Where a user gets its token (etcd's auth), and what etcd says when a request
#: has no token, or one it no longer takes.
_AUTHENTICATE: Final = "/v3/auth/authenticate"
NO_TOKEN: Final = ("user name is empty", "invalid auth token")
_AUTH_OFF: Final = "authentication is not enabled"


class EtcdError(ActorctlError):
    """etcd answered a request with an error.

    Attributes:
        code: the gRPC status code etcd gave (0 when it gave none).
    """

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


class EtcdUnavailable(EtcdError):
    """No etcd endpoint answered in time (or a watch's connection broke)."""


class EtcdCompacted(EtcdError):
    """A watch asked for revisions that etcd has compacted away.

    Read the keys again (their snapshot's revision) and watch from the revision after it.

    Attributes:
        compact_revision: the oldest revision etcd still has.
    """

    def __init__(self, message: str, compact_revision: int) -> None:
        super().__init__(message, 11)
        self.compact_revision = compact_revision


@attrs.frozen
class _Endpoint:
    url: str
    host: str
    port: int
    tls: bool

    @property
    def authority(self) -> str:
        """``host:port`` for the Host header (an IPv6 address in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


class _Unreachable(Exception):
    """This endpoint could not be used: try the next one (internal)."""


def _parse_endpoint(url: str) -> _Endpoint:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        raise ConfigError(
            f"etcd endpoint {url!r}: give http://HOST:PORT or https://HOST:PORT, "
            "e.g. http://127.0.0.1:2379"
        )
    try:
        port = parts.port or 2379
    except ValueError:
        raise ConfigError(f"etcd endpoint {url!r}: the port is not a number in 1..65535") from None
    return _Endpoint(url.rstrip("/"), parts.hostname, port, parts.scheme == "https")


def tls_context(
    ca_file: Path | None, cert_file: Path | None, key_file: Path | None
) -> ssl.SSLContext:
    """The context for ``https`` endpoints: etcd's CA (the system's when None), and a
    client certificate when etcd asks for one (``--client-cert-auth``).

    Raises:
        ConfigError: a file that cannot be read, or a certificate without its key.
    """
    if (cert_file is None) != (key_file is None):
        raise ConfigError("etcd TLS: give both cert_file and key_file, or neither")
    for what, file in (("CA", ca_file), ("client certificate", cert_file), ("key", key_file)):
        if file is not None and not Path(file).is_file():
            raise ConfigError(f"etcd TLS: the {what} file {file} does not exist")
    try:
        context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
        if cert_file is not None and key_file is not None:
            context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"etcd TLS files: {exc}") from None
    return context


@final
class _Reader:
    """A buffer over a stream: lines, exact lengths, and a chunked body's pieces."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self._stream = stream
        self._buffer = bytearray()

    async def _fill(self) -> None:
        data = await self._stream.receive_some(65536)
        if not data:
            raise trio.BrokenResourceError("etcd closed the connection")
        self._buffer += data

    async def line(self) -> bytes:
        while (end := self._buffer.find(b"\r\n")) < 0:
            if len(self._buffer) > MAX_LINE:
                raise trio.BrokenResourceError("a line from etcd is too long")
            await self._fill()
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 2]
        return line

    async def exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            await self._fill()
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    async def head(self) -> tuple[int, dict[str, str]]:
        status_line = await self.line()
        try:
            status = int(status_line.split(b" ", 2)[1])
        except (IndexError, ValueError):
            raise trio.BrokenResourceError(f"not an HTTP answer: {status_line[:80]!r}") from None
        headers = {}
        while line := await self.line():
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        return status, headers


@final
class _Messages:
    """The JSON objects of an answer's body, one per line, as they arrive: a
    unary answer is one object, a stream (a watch) one per message."""

    def __init__(self, reader: _Reader, headers: dict[str, str]) -> None:
        self._reader = reader
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self._left = int(headers.get("content-length", "0") or 0)
        self._pending = b""
        self._done = False

    def __aiter__(self) -> _Messages:
        return self

    async def __anext__(self) -> dict[str, Any]:
        while True:
            line, newline, rest = self._pending.partition(b"\n")
            if newline or (self._done and line):
                self._pending = rest
                if line.strip():
                    return _decode(line)
                continue
            if self._done:
                raise StopAsyncIteration
            self._pending += await self._piece()
            if len(self._pending) > MAX_ANSWER:
                raise trio.BrokenResourceError("a message from etcd is too long")

    async def _piece(self) -> bytes:
        """The next piece of the body (b"" and done at its end)."""
        if not self._chunked:
            size, self._left, self._done = self._left, 0, True
        else:
            size = int((await self._reader.line()).split(b";")[0] or b"0", 16)
            if size == 0:
                while await self._reader.line():  # trailers, up to the empty line
                    pass
                self._done = True
        if size > MAX_ANSWER:
            raise trio.BrokenResourceError(f"{size} bytes at once from etcd: too long")
        data = await self._reader.exactly(size) if size else b""
        if self._chunked and size:
            await self._reader.line()
        return data


@final
class Wire:
    """The HTTP side of :class:`~actorctl.etcd._etcd.EtcdClient`: endpoints,
    timeouts, TLS; one JSON request, or one JSON stream, at a time per call."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        connect_timeout: float,
        ssl_context: ssl.SSLContext | None,
        credentials: tuple[str, str] | None = None,
    ) -> None:
        if isinstance(endpoints, str) or not endpoints:
            raise ConfigError("etcd endpoints: give a list of URLs, e.g. ['http://127.0.0.1:2379']")
        self.endpoints = tuple(_parse_endpoint(url) for url in endpoints)
        if any(e.tls for e in self.endpoints) and ssl_context is None:
            ssl_context = ssl.create_default_context()
        self._connect_timeout = connect_timeout
        self._ssl_context = ssl_context
        self._first = 0  # the endpoint that answered last
        self._credentials = credentials  # (user, password), when etcd's auth is on
        self._token: str | None = None  # what etcd gave for them, sent with each request
        self._authenticating = trio.Lock()

    async def call(self, path: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        """POST ``body`` to ``path`` and return etcd's JSON answer (a stream's first message).

        Raises:
            EtcdUnavailable: no endpoint answered within ``timeout`` seconds.
            EtcdError: etcd answered with an error.
        """
        async with self.stream(path, body, timeout) as (first, _):
            return first

    @asynccontextmanager
    async def stream(
        self, path: str, body: dict[str, Any], timeout: float
    ) -> AsyncIterator[tuple[dict[str, Any], AsyncIterator[dict[str, Any]]]]:
        """POST ``body`` to ``path``: the answer's first JSON message, and the
        rest as they come, for the duration of the block (which owns the connection).

        Only the first message is bounded by ``timeout``: each endpoint in
        turn gets an equal share of what is left of it. Reading the rest raises
        ``trio.BrokenResourceError`` if the connection breaks, and waits as long
        as the caller lets it.

        Raises:
            EtcdUnavailable: no endpoint gave a first message within ``timeout`` seconds.
            EtcdError: etcd answered with an error.
        """
        payload = json.dumps(body).encode()
        tried: list[str] = []
        opened: tuple[trio.abc.Stream, _Messages, dict[str, Any]] | None = None
        deadline = trio.current_time() + timeout
        for turn in range(len(self.endpoints)):
            index = (self._first + turn) % len(self.endpoints)
            endpoint = self.endpoints[index]
            # An equal share of what is left: a member that hangs leaves time to the others.
            share = max(deadline - trio.current_time(), 0) / (len(self.endpoints) - turn)
            with trio.move_on_after(share):
                try:
                    opened = await self._open_as_user(endpoint, path, payload)
                except _Unreachable as exc:
                    tried.append(f"{endpoint.url} ({exc})")
                    continue
                self._first = index
                break
            tried.append(f"{endpoint.url} (no answer within {share:.2g} s)")
        if opened is None:
            self._first = (self._first + 1) % len(self.endpoints)  # next call: another first
            raise EtcdUnavailable(
                f"etcd unavailable for {path}: tried {', '.join(tried)}; "
                "check that etcd runs and that the endpoints are right"
            )
        stream, messages, first = opened
        try:
            yield first, messages
        finally:
            await trio.aclose_forcefully(stream)

    async def _open_as_user(
        self, endpoint: _Endpoint, path: str, payload: bytes
    ) -> tuple[trio.abc.Stream, _Messages, dict[str, Any]]:
        """``_open``, with the token of the configured user: got first, and got
        again when etcd no longer takes it (tokens end: at etcd's restart, or
        after ``--auth-token-ttl`` unused)."""
        if self._credentials is not None and self._token is None:
            await self._authenticate(endpoint, None)
        used = self._token
        try:
            return await self._open(endpoint, path, payload)
        except EtcdError as exc:
            if not any(why in str(exc) for why in NO_TOKEN):
                raise
            if self._credentials is None:
                raise EtcdError(
                    f"{exc}: etcd's auth is enabled: give a user and the file of its "
                    "password ([etcd] user and password_file)",
                    exc.code,
                ) from None
            await self._authenticate(endpoint, used)
            return await self._open(endpoint, path, payload)

    def forget_token(self, used: str | None) -> None:
        """etcd no longer takes the token ``used`` (a watch it cancelled for it
        says so): the next request gets a new one, unless one was got since."""
        if used is not None and self._token == used:
            self._token = None

    @property
    def token(self) -> str | None:
        """The token requests are sent with now (None: none yet, or no user)."""
        return self._token

    async def _authenticate(self, endpoint: _Endpoint, stale: str | None) -> None:
        """Get a token for the configured user, unless another task got a new
        one since ``stale`` (the token the caller found wanting) was: one
        password check at etcd for all the requests that found it wanting."""
        assert self._credentials is not None
        async with self._authenticating:
            if self._token is not None and self._token != stale:
                return  # another task got a new one meanwhile
            user, password = self._credentials
            body = json.dumps({"name": user, "password": password}).encode()
            try:
                stream, _, answer = await self._open(endpoint, _AUTHENTICATE, body)
            except EtcdError as exc:
                if _AUTH_OFF in str(exc):  # a user given before etcd's auth is on
                    self._token = ""  # none needed: got when etcd asks for one
                    return
                raise EtcdError(
                    f"etcd refused user {user!r}: {exc}: check [etcd] user and the "
                    "password in its password_file",
                    exc.code,
                ) from None
            await trio.aclose_forcefully(stream)
            token = answer.get("token")
            if not isinstance(token, str) or not token:
                raise EtcdError(f"etcd gave user {user!r} no token: {answer!r}")
            self._token = token

    async def _open(
        self, endpoint: _Endpoint, path: str, payload: bytes
    ) -> tuple[trio.abc.Stream, _Messages, dict[str, Any]]:
        stream = await self._connect(endpoint)
        try:
            token = self._token if path != _AUTHENTICATE else None
            request = (
                f"POST {path} HTTP/1.1\r\nHost: {endpoint.authority}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
                + (f"Authorization: {token}\r\n" if token else "")
                + "Connection: close\r\n\r\n"
            ).encode()
            await stream.send_all(request + payload)
            reader = _Reader(stream)
            status, headers = await reader.head()
            messages = _Messages(reader, headers)
            first = await anext(messages, None)
            if status != 200:
                raise _refusal(status, first)
            if first is None:
                raise _Unreachable("it answered nothing")
        except (trio.BrokenResourceError, OSError, ssl.SSLError) as exc:
            await trio.aclose_forcefully(stream)
            raise _Unreachable(f"connection broken: {exc}") from None
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        return stream, messages, first

    async def _connect(self, endpoint: _Endpoint) -> trio.abc.Stream:
        with trio.move_on_after(self._connect_timeout):
            try:
                sock = await trio.open_tcp_stream(endpoint.host, endpoint.port)
            except OSError as exc:
                raise _Unreachable(_why(exc)) from None
            if not endpoint.tls:
                return sock
            assert self._ssl_context is not None
            tls = trio.SSLStream(sock, self._ssl_context, server_hostname=endpoint.host)
            try:
                await tls.do_handshake()
            except (trio.BrokenResourceError, ssl.SSLError, OSError) as exc:
                await trio.aclose_forcefully(tls)
                raise _Unreachable(f"TLS failed: {exc.__cause__ or exc}") from None
            return tls
        raise _Unreachable(f"no connection within {self._connect_timeout:g} s")


def _why(error: OSError) -> str:
    """The reason a connection failed ("Connection refused"), not trio's summary of
    every address it tried."""
    cause = error.__cause__
    while isinstance(cause, BaseExceptionGroup) and cause.exceptions:
        cause = cause.exceptions[0]
    if isinstance(cause, OSError) and cause.errno:
        return os.strerror(cause.errno)
    return str(error)


def _refusal(status: int, body: dict[str, Any] | None) -> Exception:
    """What a non-200 answer means: another member may do (unavailable), or an error."""
    body = body or {}
    code = body.get("code", 0)
    text = body.get("message") or body.get("error") or f"HTTP {status}"
    if code == _UNAVAILABLE or status == 503:
        return _Unreachable(f"unavailable: {text}")
    return EtcdError(f"etcd refused the request: {text} (code {code})", code)


def _decode(line: bytes) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except ValueError:
        raise trio.BrokenResourceError(f"not JSON from etcd: {line[:80]!r}") from None
    if not isinstance(value, dict):
        raise trio.BrokenResourceError(f"not a JSON object from etcd: {line[:80]!r}")
    return value
