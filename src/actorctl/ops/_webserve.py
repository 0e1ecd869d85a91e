"""Where the Controller's process serves its web page (``_web.py``): the one
place that builds it from the cluster's configuration (and the sections its
application adds, ``ClusterApp.page``) and node states."""

from __future__ import annotations

import functools
from typing import Any, Final

import trio

from ..actors import ActorRef
from ..cluster._http import serve_http
from ..cluster._node import Node
from ..cluster.config._app import AppPage
from ..cluster.config._config import ClusterConfig
from ..cluster.link._tls import TlsFiles
from ._feeds import Feeds
from ._foreman import NodeState
from ._scrape import Scraper
from ._web import WebApp, server_context

__all__ = ["serve_web"]

#: The Controller's actor name (``_controller.CONTROLLER``, which imports this module).
_CONTROLLER: Final = "controller"


async def serve_web(
    config: ClusterConfig,
    states: dict[str, NodeState],
    node: Node,
    at: tuple[str, int],
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the web page at ``at`` (port 0: a free one) until cancelled,
    asking the Controller hosted on ``node``; reports the page's URL."""
    ref: ActorRef = node.ref(node.address_of(_CONTROLLER)).with_options(timeout=5.0)

    async def ask(handler: str, *args: Any) -> Any:
        return await ref.ask(handler, *args)

    def targets() -> dict[str, str | None]:
        return {n: s.metrics if s.state == "running" else None for n, s in states.items()}

    def nodes() -> list[dict[str, Any]]:
        # The states, not the file it started with: a reload adds and removes nodes.
        return [
            {
                "node": name,
                "state": s.state,
                "restarts": s.restarts,
                "pid": s.pid,
                "address": s.address,
                "metrics": s.metrics,
            }
            for name, s in states.items()
        ]

    declared = config.app.page if config.app is not None else None
    page = declared if declared is not None else AppPage()
    feeds = Feeds(page.feeds, ask, config.web_window) if declared is not None else None
    scraper = Scraper(targets, counters=page.counters)
    app = WebApp(
        ask, scraper, nodes, config.root / "logs", config.name, feeds, page.script, page.actions
    )
    context = (
        None if config.insecure else server_context(TlsFiles.from_dir(config.certs, _CONTROLLER))
    )
    host, port = at
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            functools.partial(serve_http, app.handle, host, port, ssl_context=context)
        )
        nursery.start_soon(app.run)
        scheme = "http" if context is None else "https"
        task_status.started(f"{scheme}://{host}:{port}/")
