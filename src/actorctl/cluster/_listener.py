"""A node's listener: where it listens and how it serves each connection it accepts.

The node owns its actors, its outbox and its stop; what comes in is this
module's concern. Each accepted connection passes the node's gate (its
connection bounds, ``cluster/link/_limits.py``), then gets an ``Engine`` of
its own and an ``InboundHandler`` with a ``Verifier`` of its own: sessions
belong to the connection they were opened on, while the replay cache is
node-wide. The credit keeper (``cluster/link/_credit.py``), which shares an
actor's mailbox fairly among the incoming links that feed it, runs here too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import final

import trio

from .._log import log
from ..actors import ActorCell
from ..mailbox import ReplayCache, SessionTable, Verifier
from ._node_records import NodeSecurity
from .link._credit import CreditKeeper
from .link._engine import Engine, EngineHandler
from .link._engine_set import EngineSet
from .link._inbound import InboundHandler
from .link._limits import Gate, Limits
from .link._reply_auth import ReplySigning
from .link._reply_routes import ReplyRoutes
from .link._starting import StartingLinks
from .link._tls import TlsDomains

__all__ = ["NodeListener"]


@final
class NodeListener:
    """The incoming side of one node.

    Args:
        name, node_id: the node's name and its AMQP container id.
        cells: the node's actors by name, as each connection's inbox links find them.
        routes: the reply routes of the node's outbox (reply links callers attach).
        engines: the node's live connections; each accepted one is added while it lasts.
        replays: the node-wide replay cache every verifier shares.
        security: its keyring (None: messages are not authenticated) and auth window.
        tls_domains: its TLS domains (None: plain TCP); ``cluster reload``
            reads them again in place.
        limits: its resource bounds: the gate's and each connection's.
        idle_timeout: seconds of silence after which a connection is closed.
        clock: wall-clock time in seconds since the epoch.
    """

    def __init__(
        self,
        name: str,
        node_id: str,
        cells: Mapping[str, ActorCell],
        routes: ReplyRoutes,
        engines: EngineSet,
        replays: ReplayCache,
        *,
        security: NodeSecurity,
        tls_domains: TlsDomains | None,
        limits: Limits,
        idle_timeout: float,
        clock: Callable[[], float],
    ) -> None:
        self._name = name
        self._node_id = node_id
        self._cells = cells
        self._routes = routes
        self._engines = engines
        self._replays = replays
        self._security = security
        self._identity = security.keyring.identity if security.keyring is not None else None
        self._tls_domains = tls_domains
        self._limits = limits
        self._idle_timeout = idle_timeout
        self._clock = clock
        self._gate = Gate(name, limits)
        #: Fair credit among the incoming links that feed one actor.
        self.credit = CreditKeeper(name, limits.credit_deadline)
        #: Whether the node's actors have started: until then a link to an
        #: actor not hosted yet waits instead of being refused (the node
        #: calls ``starting.start()`` once they have).
        self.starting = StartingLinks(self.credit)

    async def listen(
        self,
        host: str,
        port: int,
        scope: trio.CancelScope,
        handler_nursery: trio.Nursery,
        *,
        task_status: trio.TaskStatus[int],
    ) -> None:
        """Listen on ``host:port`` (port 0: a free one, reported to ``task_status``)
        until ``scope`` is cancelled; each connection is served in ``handler_nursery``."""
        with scope:
            listeners = await trio.open_tcp_listeners(port, host=host)
            bound = listeners[0].socket.getsockname()[1]
            task_status.started(bound)
            await trio.serve_listeners(
                self._on_incoming, listeners, handler_nursery=handler_nursery
            )

    async def _on_incoming(self, stream: trio.SocketStream) -> None:
        try:
            address, port = stream.socket.getpeername()[:2]
        except OSError:
            address, port = "?", 0
        peer = f"{address}:{port}"
        made_engines: list[Engine] = []

        def engine(refuser: EngineHandler | None) -> Engine:
            handler = refuser if refuser is not None else self._inbound()
            made = Engine(
                stream,
                handler,
                server=True,
                container_id=self._node_id,
                peer=peer,
                idle_timeout=self._idle_timeout,
                ssl_domain=self._tls_domains.server if self._tls_domains else None,
                handshake_timeout=self._limits.handshake_timeout,
            )
            self._engines.add(made)
            made_engines.append(made)
            return made

        try:
            await self._gate.serve(stream, str(address), peer, engine)
        except Exception as exc:  # one broken peer must not take the node down
            log("actorctl:connection:failed", node=self._name, peer=peer, error=repr(exc))
        finally:
            for made in made_engines:
                self._engines.discard(made)

    def _inbound(self) -> InboundHandler:
        """What handles one accepted connection that passed the gate."""
        return InboundHandler(
            self._name,
            self._node_id,
            self._cells,
            self.new_verifier(),
            self._routes,
            signing=ReplySigning(self._identity, self._clock),
            keeper=self.credit,
            limits=self._limits,
            starting=self.starting,
        )

    def new_verifier(self) -> Verifier | None:
        """What authenticates the messages of one incoming connection: sessions
        belong to the connection they were opened on; replays are node-wide."""
        keyring = self._security.keyring
        if keyring is None:
            return None
        return Verifier(
            keyring,
            SessionTable(),
            node=self._node_id,
            clock=self._clock,
            window=self._security.auth_window,
            replay=self._replays,
        )
