"""Node: one OS process's AMQP 1.0 container, hosting actors.

A node listens on one endpoint, hosts actors (one cell each), keeps at most one
outgoing connection per peer node, and is the ``Outbox`` its actors and refs send
through. It is built by a composition root (the CLI, a test, an example) with
every collaborator passed in; nothing here is global.
"""

from __future__ import annotations

import ipaddress
import os
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final, final

import trio
from proton import SSLDomain

from .._errors import ConfigError
from .._log import log
from ..actors import Actor, ActorCell, ActorRef, Address, handler
from ..mailbox import (
    Keyring,
    MailboxStatistics,
    Outcome,
    ReplayCache,
    SessionTable,
    Verifier,
)
from ..mailbox._signing import DEFAULT_SESSION_LIFETIME, DEFAULT_WINDOW
from ..supervision import ChildSpec, Restart, Supervisor
from ._engine import Engine, EngineSet
from ._inbound import InboundHandler
from ._outbox import NodeOutbox
from ._peer import PeerSettings
from ._tls import TlsFiles

__all__ = ["Node", "NodeAgent", "open_node"]

ActorSpec = Actor | type[Actor]
DEFAULT_GRACE: Final = 5.0


@final
class Node:
    """One AMQP 1.0 container hosting actors. Use :func:`open_node` to run one.

    Everything it sends goes through its :attr:`outbox` (a :class:`NodeOutbox`):
    refs made with :meth:`ref` and the actors it hosts send through it.

    Args:
        name: the node's name (its AMQP container id starts with it).
        actors: actors to host, as instances, classes, or a mapping of name to
            either; an unnamed actor is reachable under ``Actor.default_name()``.
        host, port: where to listen; port 0 picks a free port. ``host=None``
            makes a client-only node that listens nowhere.
        idle_timeout: seconds of silence after which a peer is taken for dead.
        tls: the node's TLS files: every connection it accepts or opens is mutual
            TLS against the cluster CA.
        keyring: the node's identity key (it signs what it sends) and the keys it
            trusts (every message that reaches one of its inboxes must be signed
            by one of them, per message or within a session).
        insecure: allow plain TCP (no ``tls``) and unsigned messages (no
            ``keyring``): for tests and development only; the node logs a
            warning when it starts, and on every unsigned message it accepts.
        auth_window: how far (s) a message's creation time may be from this
            node's clock; ids of accepted messages are remembered that long.
        session_lifetime: how long (s) a session this node opens with a peer
            lasts; it opens the next one at 80% of that.
        sessions: open sessions with peers (HMAC per message); with False every
            message this node sends is signed with Ed25519 (slower: for clients
            that must not hold session keys, and for comparison).
        actor_restarts: the restart intensity of the node's actors: at most this
            many restarts within this many seconds, or the node fails.
        clock: wall-clock time in seconds since the epoch (for message times).
    """

    def __init__(
        self,
        name: str,
        actors: Mapping[str, ActorSpec] | Iterable[ActorSpec] = (),
        *,
        host: str | None = "127.0.0.1",
        port: int = 0,
        idle_timeout: float = 30.0,
        tls: TlsFiles | None = None,
        keyring: Keyring | None = None,
        insecure: bool = False,
        auth_window: float = DEFAULT_WINDOW,
        session_lifetime: float = DEFAULT_SESSION_LIFETIME,
        sessions: bool = True,
        actor_restarts: tuple[int, float] = (5, 10.0),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self.node_id = f"{name}-{os.urandom(6).hex()}"
        self.host = host
        self.port = port
        self.idle_timeout = idle_timeout
        if tls is None and not insecure:
            raise ConfigError(
                f"node {name!r} has no TLS files: give it tls=TlsFiles.from_dir(...) "
                "(`actorctl certs init` makes them), or insecure=True for plain TCP in "
                "tests and development"
            )
        if keyring is None and not insecure:
            raise ConfigError(
                f"node {name!r} has no keys: give it keyring=Keyring.load(DIR) "
                "(`actorctl keys gen NAME --dir DIR` makes them), or insecure=True to "
                "accept unsigned messages in tests and development"
            )
        self.tls = tls
        self.insecure = tls is None
        self.keyring = keyring
        self.identity = keyring.identity if keyring is not None else None
        self.auth_window = auth_window
        self.session_lifetime = session_lifetime
        self.sessions = sessions
        self.actor_restarts = actor_restarts
        self._replays = ReplayCache()
        self._server_domain = tls.server_domain() if tls is not None else None
        self._client_domains = (
            (tls.client_domain(check_name=False), tls.client_domain(check_name=True))
            if tls is not None
            else None
        )
        self._clock = clock
        self._actors = _named(actors)
        self._actors.setdefault(NodeAgent.name or "_node", NodeAgent(self))
        self.cells: dict[str, ActorCell] = {}
        self._nursery: trio.Nursery | None = None
        self._engines = EngineSet()
        self._stop = trio.Event()
        self._actors_started = trio.Event()
        self._grace = DEFAULT_GRACE
        settings = PeerSettings(
            node_id=self.node_id,
            identity=self.identity,
            # Sessions only over TLS: the session message carries the MAC key.
            sessions=sessions and tls is not None,
            session_lifetime=session_lifetime,
            idle_timeout=idle_timeout,
            client_domain=self.client_domain,
            new_message_id=self.new_message_id,
            clock=clock,
            stopping=self._stop.is_set,
        )
        #: The one path out of this node.
        self.outbox = NodeOutbox(name, self.node_id, settings, self._engines, clock)

    # -- running -------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[Node] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the node until :meth:`stop` (graceful) or cancellation (immediate)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self.outbox.start(nursery)
            listen_scope = trio.CancelScope()
            if self.host is not None:
                self.port = await nursery.start(self._listen, listen_scope)
            actors_scope = trio.CancelScope()
            actors_done = trio.Event()
            nursery.start_soon(self._run_actors, actors_scope, actors_done)
            await self._actors_started.wait()
            if self.insecure:
                log(
                    "actorctl:node:insecure",
                    node=self.name,
                    warning="plain TCP, no TLS: for tests and development only",
                )
            log("actorctl:node:ready", node=self.name, address=self.url, actors=sorted(self.cells))
            task_status.started(self)
            await self._stop.wait()
            # Graceful stop: no new connections, no new messages; in-flight
            # handlers get the grace period, then everything is cancelled.
            listen_scope.cancel(reason="node stopping")
            for cell in self.cells.values():
                for left in cell.mailbox.close():
                    left.settle(Outcome("released"))
            with trio.move_on_after(self._grace):
                await actors_done.wait()
            actors_scope.cancel(reason="node stop deadline")
            await self._engines.close_all(timeout=1.0)
            nursery.cancel_scope.cancel(reason="node stopped")
        log("actorctl:node:stopped", node=self.name)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def stop(self, grace: float = DEFAULT_GRACE) -> None:
        """Begin a graceful stop: in-flight handlers get ``grace`` seconds."""
        self._grace = grace
        self._stop.set()

    @property
    def url(self) -> str:
        if self.host is None:
            return "(client only)"
        return f"{self.scheme}://{self.host}:{self.port}"

    @property
    def scheme(self) -> str:
        return "amqp" if self.insecure else "amqps"

    def address_of(self, name: str) -> Address:
        if self.host is None:
            raise ConfigError(f"node {self.name!r} does not listen, so its actors have no address")
        return Address(self.host, self.port, name, self.scheme)

    def ref(self, address: Address | str) -> ActorRef:
        """A ref to an actor anywhere, sent through this node."""
        if isinstance(address, str):
            address = Address.parse(address)
        return ActorRef(address, self.outbox)

    def new_message_id(self) -> str:
        return self.outbox.new_message_id()

    def now(self) -> float:
        return self._clock()

    def statistics(self) -> dict[str, MailboxStatistics]:
        """Mailbox statistics of every actor on this node, by name."""
        return {name: cell.mailbox.statistics() for name, cell in self.cells.items()}

    async def _listen(self, scope: trio.CancelScope, *, task_status: trio.TaskStatus[int]) -> None:
        with scope:
            assert self.host is not None
            listeners = await trio.open_tcp_listeners(self.port, host=self.host)
            port = listeners[0].socket.getsockname()[1]
            task_status.started(port)
            await trio.serve_listeners(self._on_incoming, listeners, handler_nursery=self._nursery)

    async def _run_actors(self, scope: trio.CancelScope, done: trio.Event) -> None:
        try:
            with scope:
                # Each actor is a supervised child: one that crashes is started
                # again (transient: one whose mailbox was closed is done).
                children = []
                for name, actor in self._actors.items():
                    address = Address(self.host or "", self.port, name, self.scheme)
                    cell = ActorCell(actor, address, self.outbox)
                    self.cells[name] = cell
                    children.append(ChildSpec(name, cell.run, Restart.TRANSIENT))
                supervisor = Supervisor(
                    f"{self.name}/actors",
                    children,
                    max_restarts=self.actor_restarts[0],
                    within=self.actor_restarts[1],
                    backoff=0.01,
                    auto_shutdown=True,
                )
                async with trio.open_nursery() as nursery:
                    await nursery.start(supervisor.run)
                    self._actors_started.set()
        finally:
            done.set()

    async def _on_incoming(self, stream: trio.SocketStream) -> None:
        try:
            peer = "{}:{}".format(*stream.socket.getpeername()[:2])
        except OSError:
            peer = "?"
        handler = InboundHandler(
            self.name, self.node_id, self.cells, self.new_verifier(), self.outbox.routes
        )
        engine = Engine(
            stream,
            handler,
            server=True,
            container_id=self.node_id,
            peer=peer,
            idle_timeout=self.idle_timeout,
            ssl_domain=self._server_domain,
        )
        self._engines.add(engine)
        try:
            await engine.run()
        except Exception as exc:  # one broken peer must not take the node down
            log("actorctl:connection:failed", node=self.name, peer=peer, error=repr(exc))
        finally:
            self._engines.discard(engine)

    def new_verifier(self) -> Verifier | None:
        """What authenticates the messages of one incoming connection: sessions
        belong to the connection they were opened on; replays are node-wide."""
        if self.keyring is None:
            return None
        return Verifier(
            self.keyring,
            SessionTable(),
            clock=self._clock,
            window=self.auth_window,
            replay=self._replays,
        )

    def client_domain(self, host: str) -> SSLDomain | None:
        """TLS settings for a connection this node opens to ``host``."""
        if self._client_domains is None:
            return None
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return self._client_domains[1]  # a DNS name: check it
        return self._client_domains[0]

@final
class NodeAgent(Actor):
    """Hosted on every node as ``_node``: what the Controller asks a node."""

    name = "_node"

    def __init__(self, node: Node) -> None:
        self._node = node

    @handler
    async def statistics(self) -> dict[str, dict[str, int]]:
        """Mailbox depth, capacity and messages received, per actor."""
        return {
            name: {"depth": stats.depth, "capacity": stats.capacity, "received": stats.received}
            for name, stats in self._node.statistics().items()
            if name != self.name
        }


def _named(actors: Mapping[str, ActorSpec] | Iterable[ActorSpec]) -> dict[str, Actor]:
    items: Iterable[tuple[str | None, ActorSpec]] = (
        actors.items() if isinstance(actors, Mapping) else ((None, actor) for actor in actors)
    )
    named: dict[str, Actor] = {}
    for name, spec in items:
        actor = spec() if isinstance(spec, type) else spec
        if not isinstance(actor, Actor):
            raise ConfigError(
                f"{spec!r} is not an actorctl.Actor (subclass Actor and mark handlers)"
            )
        key = name or type(actor).default_name()
        if key in named:
            raise ConfigError(f"two actors are named {key!r} on one node: give one another name")
        named[key] = actor
    return named


@asynccontextmanager
async def open_node(
    name: str,
    actors: Mapping[str, ActorSpec] | Iterable[ActorSpec] = (),
    *,
    grace: float = DEFAULT_GRACE,
    **options: Any,
) -> AsyncIterator[Node]:
    """Run a node for the duration of the block, then stop it gracefully.

    Takes the arguments of :class:`Node`. On leaving the block, in-flight
    handlers get ``grace`` seconds to finish before they are cancelled.
    """
    node = Node(name, actors, **options)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.serve)
        try:
            yield node
        finally:
            node.stop(grace)
