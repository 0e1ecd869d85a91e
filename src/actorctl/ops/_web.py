"""The Controller's live web page: the cluster at a glance, in a browser.

Served by the Controller's process (``run_cluster``) on ``[cluster] web``
(``cluster up``: 127.0.0.1 and a free port), over TLS with the Controller's
certificate unless the cluster is insecure. One HTML page with inline
JavaScript (``_page.html``, no build step) reads ``/events``, server-sent
events that carry a snapshot each second: the nodes, the supervision tree
(the Controller's ``tree``: states, restarts, breakers, health checks, dead
letters), and throughput and latency over the last minutes (from the
metrics this process scrapes, ``_scrape.py``: messages done count the nodes'
work, not their agents' answers to the page). ``/metrics`` is every node's
metrics with a ``node`` label; ``/api/task/ID`` one task's trace across
nodes (``_tracelog.py``).

The application the cluster runs adds its sections (its ``AppPage``): what
the page asks of the nodes (``_feeds.py``: the answers, and windows of the
last rows, in the snapshot's ``app``; ``/api/feed/KEY?q=TEXT`` searches a
window) and the script that draws them (``/app.js``, run after the page's
own, which gives it its helpers as ``window.actorctl``).

Everything is read-only, except ``POST /api/control/ACTION``: the page's own
``retry`` (of a dead letter) and the actions the application declares
(``AppPage.actions``, each broadcast to an actor of every node), which only
a client presenting the operator's certificate (the ``cli`` one, from the
cluster's CA) may ask: the server verifies a certificate when one is given,
and refuses a control action without it (403).
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Final, final

import trio

from .._errors import ConfigError
from .._log import log
from .._threads import run_sync
from ..cluster._http import Request, Response, failure_text, log_failure
from ..cluster._metrics import CONTENT_TYPE
from ..cluster.config._app import PageAction
from ..cluster.link._tls import TlsFiles
from ._feeds import Feeds
from ._scrape import Scraper
from ._tracelog import task_trace

__all__ = ["OPERATOR", "WebApp", "server_context"]

#: The name on the certificate a control action needs (the CLI's: the operator's).
OPERATOR: Final = "cli"
#: The page's own control action: re-drive a dead letter.
RETRY: Final = "retry"
#: Seconds the nodes get to answer an application's action (the Controller's broadcast).
ACTION_TIMEOUT: Final = 5.0
_JSON: Final = "application/json"

#: Asks the Controller ``handler`` with ``args``.
Ask = Callable[..., Awaitable[Any]]


def server_context(tls: TlsFiles) -> ssl.SSLContext:
    """TLS for the web page: the Controller's certificate; a client may give
    one (verified against the cluster's CA), and needs to for control actions."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(tls.ca))
    context.load_cert_chain(str(tls.cert), str(tls.key))
    context.verify_mode = ssl.CERT_OPTIONAL
    return context


def _is_operator(cert: Mapping[str, Any] | None) -> bool:
    if not cert:
        return False
    names = {v for rdn in cert.get("subject", ()) for k, v in rdn if k == "commonName"}
    return OPERATOR in names


@final
class WebApp:
    """The page's HTTP handler, and the task that keeps its snapshot fresh.

    Args:
        ask: asks the Controller a handler (``tree``, ``deadletters``, ``broadcast``).
        scraper: scrapes the nodes' metrics.
        nodes: the node states, for the nodes table (read each second).
        log_dir: where the nodes' log files are (for task traces).
        feeds: what the application's sections ask of the nodes (None: none).
        script: the application's script for its sections (``/app.js``).
        actions: the application's control actions (``AppPage.actions``).
    """

    def __init__(
        self,
        ask: Ask,
        scraper: Scraper,
        nodes: Callable[[], list[dict[str, Any]]],
        log_dir: Path,
        cluster: str,
        feeds: Feeds | None = None,
        script: str = "",
        actions: Sequence[PageAction] = (),
    ) -> None:
        self._actions = _actions_by_name(actions)
        self._feeds = feeds
        self._script = script.encode()
        self._ask = ask
        self._scraper = scraper
        self._nodes = nodes
        self._log_dir = log_dir
        self._cluster = cluster
        self._snapshot: dict[str, Any] = {"cluster": cluster, "version": 0}
        self._changed = trio.Event()
        self._viewers = 0  # pages following /events now
        self._viewer_came = trio.Event()
        self._page = resources.files(__package__).joinpath("_page.html").read_bytes()

    async def run(self, interval: float = 1.0, idle: float = 5.0) -> None:
        """Scrape the nodes and ask the Controller each ``interval`` s while a
        page follows ``/events``, and each ``idle`` s (the plots' history, and
        the tree every other time) while none does, until cancelled: a
        cluster nobody watches pays little for its page."""
        tick = 0
        tree: Any = None
        letters: Any = None
        while True:
            watched = self._viewers > 0
            scraped: dict[str, Any] = {}
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._scrape_into, scraped)
                if self._feeds is not None:
                    nursery.start_soon(self._feeds.poll)
            self._scraper.sample(scraped)
            if tick % 2 == 0 or tree is None:
                tree = await self._try("tree")
                letters = await self._try("deadletters", "list", None, None, 50, 2.0)
            tick += 1
            up = {n: (why if isinstance(why, str) else "") for n, why in scraped.items()}
            self._snapshot = {
                "cluster": self._cluster,
                "version": tick,
                "nodes": self._nodes(),
                "scrape": up,
                "now": time.time(),
                "series": self._scraper.series(),
                "named": self._scraper.named(),
                "tree": tree,
                "deadletters": letters,
                "app": self._feeds.snapshot() if self._feeds is not None else {},
            }
            self._changed.set()
            self._changed = trio.Event()
            with trio.move_on_after(interval if watched else idle):
                await self._viewer_came.wait()  # a page opened: fresh figures at once
            if self._viewer_came.is_set():
                self._viewer_came = trio.Event()

    async def _scrape_into(self, scraped: dict[str, Any]) -> None:
        scraped.update(await self._scraper.scrape())

    async def _try(self, handler: str, *args: Any) -> Any:
        try:
            return await self._ask(handler, *args)
        except Exception as exc:  # the page shows that the Controller did not answer
            return {"error": f"{type(exc).__name__}: {exc}"}

    async def handle(self, request: Request) -> Response:
        """Answer one request. One that fails is answered with a short error (JSON
        under ``/api/``, with ``error``), never a traceback: that is logged."""
        try:
            return await self._route(request)
        except Exception as exc:  # the page shows what failed; the log has the rest
            log_failure(request, exc)
            if request.path.startswith("/api/"):
                return _json(500, {"error": failure_text(request, exc)})
            return Response(500, body=f"{failure_text(request, exc)}\n".encode())

    async def _route(self, request: Request) -> Response:
        path = request.path
        if request.method == "POST" and path.startswith("/api/control/"):
            return await self._control(request, path.removeprefix("/api/control/"))
        if request.method != "GET":
            return Response(405, body=b"GET only, except POST /api/control/ACTION\n")
        if path in ("/", "/index.html"):
            return Response(200, "text/html; charset=utf-8", self._page)
        if path == "/metrics":
            return Response(
                200, CONTENT_TYPE, self._scraper.aggregate(await self._scraper.scrape())
            )
        if path == "/api/state":
            return _json(200, self._snapshot)
        if path == "/events":
            return Response(200, "text/event-stream", self._events())
        if path.startswith("/api/task/"):
            return await self._trace(path.removeprefix("/api/task/"))
        if path == "/app.js":
            return Response(200, "text/javascript; charset=utf-8", self._script)
        if path.startswith("/api/feed/"):
            return self._search(path.removeprefix("/api/feed/"), request.query)
        return Response(404, body=b"not found\n")

    def _search(self, key: str, query: Mapping[str, str]) -> Response:
        """``/api/feed/KEY?q=TEXT&limit=N``: a window's rows whose id or name
        holds TEXT, newest first."""
        try:
            limit = int(query.get("limit", "50"))
        except ValueError:
            return _json(400, {"error": f"limit={query['limit']!r}: give a whole number"})
        found = self._feeds.search(key, query.get("q", ""), limit) if self._feeds else None
        if found is None:
            return _json(404, {"error": f"no window {key!r} on this page"})
        return _json(200, {"key": key, "q": query.get("q", ""), "rows": found})

    async def _trace(self, task_id: str) -> Response:
        try:
            lines = await run_sync(task_trace, self._log_dir, task_id)
        except OSError as exc:
            log("actorctl:web:failed", path=f"/api/task/{task_id}", error=repr(exc))
            where = f" ({exc.filename})" if exc.filename else ""
            return _json(
                500,
                {
                    "error": f"cannot read the nodes' logs in {self._log_dir}: "
                    f"{exc.strerror or exc}{where}"
                },
            )
        return _json(200, {"task_id": task_id, "lines": lines})

    async def _events(self) -> AsyncIterator[bytes]:
        self._viewers += 1
        self._viewer_came.set()
        try:
            async for chunk in self._follow():
                yield chunk
        finally:
            self._viewers -= 1

    async def _follow(self) -> AsyncIterator[bytes]:
        yield b"retry: 1000\n\n"
        while True:
            data = json.dumps(self._snapshot, default=str)
            yield f"data: {data}\n\n".encode()
            await self._changed.wait()

    async def _control(self, request: Request, action: str) -> Response:
        if not _is_operator(request.peer_cert):
            log("actorctl:web:refused", action=action, why="no operator certificate")
            return _json(
                403,
                {
                    "error": "control actions need the operator's client certificate "
                    f"(the {OPERATOR!r} one from the cluster's CA); this page is read-only "
                    "without it"
                },
            )
        declared = self._actions.get(action)
        if declared is None and action != RETRY:
            known = ", ".join([*self._actions, RETRY])
            return _json(404, {"error": f"no action {action!r} ({known})"})
        try:
            body = json.loads(request.body or b"{}")
            if declared is None:
                answer = await self._ask("deadletters", "retry", str(body["letter_id"]))
            else:
                args = declared.args(body)
                answer = await self._ask(
                    "broadcast", declared.actor, declared.op, args, ACTION_TIMEOUT
                )
        except (KeyError, ValueError) as exc:
            return _json(400, {"error": f"{action}: a JSON body with {exc}"})
        except Exception as exc:  # the Controller's answer: shown on the page
            return _json(502, {"error": f"{type(exc).__name__}: {exc}"})
        log("actorctl:web:control", action=action, body=body)
        return _json(200, {"action": action, "answer": answer})


def _actions_by_name(actions: Sequence[PageAction]) -> dict[str, PageAction]:
    """The application's actions by name: each name once, none the page's own."""
    found: dict[str, PageAction] = {}
    for action in actions:
        if action.name in found or action.name == RETRY:
            raise ConfigError(
                f"AppPage.actions: {action.name!r} is named twice, or is the page's own "
                f"({RETRY!r}): give each action a name of its own"
            )
        found[action.name] = action
    return found


def _json(status: int, value: Any) -> Response:
    return Response(status, _JSON, json.dumps(value, default=str).encode())
