"""Node: one OS process's AMQP 1.0 container, hosting actors.

A node listens on one endpoint, hosts actors (one cell each), keeps at most one
outgoing connection per peer node, and is the ``Outbox`` its actors and refs send
through. It is built by a composition root (the CLI, a test, an example) with
every collaborator passed in; nothing here is global. Besides its name, its
actors and where it listens, it takes a few records (``_node_records.py``): its
security, its resource bounds, its storage and its supervision. What comes in,
each connection it accepts, is its listener's (``_listener.py``).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final, final

import trio
from proton import SSLDomain

from .._errors import ConfigError
from .._log import log
from ..actors import ActorCell, ActorRef, Address, CellState, ReplyMemory
from ..mailbox import MailboxStatistics, ReplayCache
from ..store._store import Store
from ..supervision._tree import TreeLevel
from ._agent import NodeAgent
from ._deadletters import AGENT as DEAD_LETTERS
from ._deadletters import DeadLetterAgent, DeadLetters
from ._http import parse_listen, serve_http
from ._keywatch import KeyringWatch
from ._listener import NodeListener
from ._metrics import NodeCollector, metrics_handler
from ._monitors import NodeMonitors
from ._node_records import (
    DEFAULT_LIMITS,
    DEFAULT_SECURITY,
    DEFAULT_STORAGE,
    DEFAULT_SUPERVISION,
    NodeSecurity,
    NodeStorage,
    NodeSupervision,
    node_records,
)
from ._replays import ReplayJournal
from ._supervised import Hostable, NodeHost, named, node_root
from .config._config import ClusterApp, ClusterConfig
from .link._engine_set import EngineSet
from .link._limits import Limits
from .link._pending import PeerSettings
from .link._tls import TlsDomains
from .outbox._outbox import NodeOutbox

__all__ = ["Node", "NodeAgent", "open_node"]

DEFAULT_GRACE: Final = 5.0
#: Seconds actors get to end by themselves once every mailbox has settled.
_SETTLED_GRACE: Final = 0.5
_INSECURE: Final = "plain TCP, no TLS: for tests and development only"


@final
class Node:
    """One AMQP 1.0 container hosting actors. Use :func:`open_node` to run one.

    Everything it sends goes through its :attr:`outbox` (a :class:`NodeOutbox`):
    refs made with :meth:`ref` and the actors it hosts send through it.

    Args:
        name: the node's name (its AMQP container id starts with it).
        actors: actors to host, as instances, classes, ``ActorSpec`` or
            ``SupervisorSpec`` (a supervision tree), or a mapping of name to
            those; an unnamed actor is reachable under ``Actor.default_name()``.
            An actor given as a class is built afresh when it is restarted; one
            given as an instance is started again as it is.
        host, port: where to listen; port 0 picks a free port. ``host=None``
            makes a client-only node that listens nowhere.
        security: its TLS files, keyring and how it authenticates
            (:class:`NodeSecurity`); without TLS files and keys, it must say
            ``insecure=True`` (:data:`INSECURE`).
        limits: its resource bounds (:class:`Limits`, ``cluster/link/_limits.py``;
            docs/protocol.md §3.1 and §4.1): under each, the node goes on serving
            its other peers. A larger message is refused with
            ``amqp:link:message-size-exceeded``, a link over the cap with
            ``amqp:resource-limit-exceeded``; a connection over a cap, or past
            the handshake deadline, is closed. What the node remembers is
            bounded in bytes: the replies its actors' dedup windows keep for
            duplicates (:attr:`kept_replies`), its replay cache and that
            cache's rows in its store; the oldest go first, and reaching a
            bound is logged. So are the replies queued for a caller that
            grants no credit (``max_queued_reply_bytes``) and what a peer has
            not settled yet (``max_unsettled_bytes``: a send past it waits).
            ``resend_window``: seconds a plain tell that its receiver gave back
            unrun is sent again for (docs/guarantees.md).
        storage: its durable store and its dead letters' bounds
            (:class:`NodeStorage`); by default a memory store.
        supervision: its actors' restart intensity, its peers' breaker policy
            and the timeouts after which a peer is taken for dead, lost or
            unavailable (:class:`NodeSupervision`).
        clock: wall-clock time in seconds since the epoch (for message times).
        metrics: ``HOST:PORT`` (port 0: a free one) where the node serves its
            Prometheus metrics on ``/metrics`` (``_metrics.py``,
            docs/operations.md); None: nowhere. :attr:`metrics_url` says where.
        cluster_app: the application its cluster file is read for (a reload
            reads it so).

    :func:`open_node` (and :func:`node_records`) take every field of these
    records as a flat keyword too (``tls=...``, ``max_message_size=...``).
    """

    def __init__(
        self,
        name: str,
        actors: Mapping[str, Hostable] | Iterable[Hostable] = (),
        *,
        host: str | None = "127.0.0.1",
        port: int = 0,
        security: NodeSecurity = DEFAULT_SECURITY,
        limits: Limits = DEFAULT_LIMITS,
        storage: NodeStorage = DEFAULT_STORAGE,
        supervision: NodeSupervision = DEFAULT_SUPERVISION,
        clock: Callable[[], float] = time.time,
        metrics: str | None = None,
        cluster_app: ClusterApp | None = None,
    ) -> None:
        security.check(name)
        self.name = name
        #: The application its cluster file is read for (a reload reads it so).
        self.cluster_app = cluster_app
        #: Where it serves /metrics (host, port), once it runs; None: it does not.
        self.metrics = parse_listen(metrics, "metrics") if metrics is not None else None
        #: The node's resource bounds.
        self.limits = limits
        #: How it authenticates, and what it does when something fails.
        self.security = security
        self.supervision = supervision
        #: The bytes of replies its actors' dedup windows keep, and their bounds.
        self.kept_replies = ReplyMemory(
            limits.max_kept_reply_bytes, limits.max_kept_reply_bytes_per_actor, node=name
        )
        self.store = storage.store if storage.store is not None else Store.memory(name)
        #: What the node gave up on (``_deadletters.py``).
        self.dead_letters = DeadLetters(name, self.store, clock, storage.dead_letters)
        self.node_id = f"{name}-{os.urandom(6).hex()}"
        self.host = host
        self.port = port
        self.tls = security.tls
        self.insecure = security.tls is None
        self.keyring = keyring = security.keyring
        self.identity = keyring.identity if keyring is not None else None
        #: Reloads the keyring when its directory changes (None: it never does).
        self.key_watch = (
            KeyringWatch(keyring, node=name, interval=security.key_poll)
            if keyring is not None and keyring.directory is not None and security.key_poll
            else None
        )
        self._replays = ReplayCache(max_bytes=limits.max_replay_bytes, node=name)
        #: What else follows a reloaded cluster file, after its actors (its
        #: record in etcd, ``membership/_member.py``): each is given the file
        #: (None: the keys were read again).
        self.followers: list[Callable[[ClusterConfig | None], Awaitable[None]]] = []
        #: Its TLS domains, read again by ``cluster reload`` (None: plain TCP).
        self.tls_domains = TlsDomains(security.tls) if security.tls is not None else None
        self._clock = clock
        self.cells: dict[str, ActorCell] = {}
        self._engines = EngineSet()
        self._stop = trio.Event()
        #: Set once its actors have started (then it says it is ready).
        self.actors_started = trio.Event()
        self._grace = DEFAULT_GRACE
        self._grace_scope: trio.CancelScope | None = None  # while it waits for the grace
        #: The one path out of this node.
        self.outbox = NodeOutbox(
            name,
            self.node_id,
            self._peer_settings(),
            self._engines,
            clock,
            on_peer_state=lambda peer, up, node: self.monitors.peer_state(peer, up, node),
            store=self.store,
            watched=lambda endpoint: self.monitors.watching(endpoint),
            peer_idle_timeout=limits.peer_idle_timeout,
            max_queued_replies=limits.max_queued_replies,
            max_queued_reply_bytes=limits.max_queued_reply_bytes,
            dead_letters=self.dead_letters,
        )
        #: Where it listens, and how it serves each connection it accepts.
        self.listener = NodeListener(
            name,
            self.node_id,
            self.cells,
            self.outbox.routes,
            self._engines,
            self._replays,
            security=security,
            tls_domains=self.tls_domains,
            limits=limits,
            idle_timeout=supervision.idle_timeout,
            clock=clock,
        )
        self.monitors = NodeMonitors(
            self.outbox,
            is_local=lambda address: address.endpoint == (self.host, self.port),
            alive=lambda name: name in self.cells and self.cells[name].state != CellState.STOPPED,
            lost_after=supervision.node_lost_after,
        )
        self._actors = named(actors)
        self._actors.setdefault(NodeAgent.name or "_node", NodeAgent(self))
        self._actors.setdefault(DEAD_LETTERS, DeadLetterAgent(self.dead_letters, self.identity))
        self.tree: TreeLevel | None = None

    def _peer_settings(self) -> PeerSettings:
        """What each of its outgoing connections is opened with."""
        security, supervision = self.security, self.supervision
        return PeerSettings(
            node_id=self.node_id,
            identity=self.identity,
            # Sessions only over TLS: the session message carries the MAC key.
            sessions=security.sessions and security.tls is not None,
            session_lifetime=security.session_lifetime,
            idle_timeout=supervision.idle_timeout,
            client_domain=self.client_domain,
            new_message_id=self.new_message_id,
            clock=self._clock,
            stopping=self._stop.is_set,
            connect_timeout=supervision.connect_timeout,
            keyring=self.keyring,
            peer_breaker=supervision.peer_breaker,
            resend_window=self.limits.resend_window,
            max_unsettled_bytes=self.limits.max_unsettled_bytes,
        )

    # -- running -------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[Node] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the node until :meth:`stop` (graceful) or cancellation (immediate)."""
        async with trio.open_nursery() as outer:
            # The store starts first and stops last, once nothing else of the
            # node runs: what they wrote while they stopped is committed too.
            store_scope = trio.CancelScope(shield=True)
            await outer.start(self._run_store, store_scope)
            try:
                await self._serve(task_status)
            finally:
                store_scope.cancel(reason="node stopped")
        log("actorctl:node:stopped", node=self.name)

    async def _run_store(
        self, scope: trio.CancelScope, *, task_status: trio.TaskStatus[None]
    ) -> None:
        with scope:
            await self.store.run(task_status=task_status)

    async def _serve(self, task_status: trio.TaskStatus[Node]) -> None:
        if self.keyring is not None:  # the store has opened: what it kept goes first
            bound = self.limits.max_replay_journal_bytes
            ReplayJournal(self.store, self._replays, self._clock, bound).start()
        async with trio.open_nursery() as nursery:
            self.outbox.start(nursery)
            nursery.start_soon(self.listener.credit.run)
            listen_scope = trio.CancelScope()
            if self.host is not None:
                listen = self.listener.listen
                self.port = await nursery.start(listen, self.host, self.port, listen_scope, nursery)
            await nursery.start(self.monitors.run)
            if self.metrics is not None:
                handle = metrics_handler(self.collector())
                port = await nursery.start(serve_http, handle, *self.metrics)
                self.metrics = (self.metrics[0], port)
            if self.key_watch is not None:
                await nursery.start(self.key_watch.run)
            actors_scope = trio.CancelScope()
            actors_done = trio.Event()
            nursery.start_soon(self._run_actors, actors_scope, actors_done)
            await self.actors_started.wait()
            # A link a peer attached meanwhile to an actor not hosted yet (a
            # backlog sending what it kept) is answered now, not refused then.
            self.listener.starting.start()
            if self.insecure:
                log("actorctl:node:insecure", node=self.name, warning=_INSECURE)
            log(
                "actorctl:node:ready",
                node=self.name,
                address=self.url,
                actors=sorted(self.cells),
                metrics=self.metrics_url,
            )
            task_status.started(self)
            await self._stop.wait()
            # Graceful stop (warm): no new connections, no new messages, and
            # what an actor holds and has not begun goes back to its sender
            # (each cell's drain); in-flight handlers get the grace period,
            # then everything is cancelled (what they held is released).
            listen_scope.cancel(reason="node stopping")
            started = trio.current_time()
            log("actorctl:node:stopping", node=self.name, grace=self._grace)
            for cell in list(self.cells.values()):
                cell.drain()
            with trio.move_on_after(self._grace) as self._grace_scope:
                # In-flight handlers finish (each mailbox settles what it
                # took); what never ends by itself (a boxed worker's process)
                # is then stopped at once, gracefully, by its supervisor,
                # rather than at the end of the grace period.
                for cell in list(self.cells.values()):
                    await cell.mailbox.wait_settled()
                with trio.move_on_after(_SETTLED_GRACE):
                    await actors_done.wait()
            if self._grace_scope.cancelled_caught:
                log(
                    "actorctl:node:grace-over",
                    node=self.name,
                    grace=self._grace,
                    waited=round(trio.current_time() - started, 3),
                    unsettled=self._unsettled(),
                )
            actors_scope.cancel(reason="node stopping")
            await self._engines.close_all(timeout=1.0)
            nursery.cancel_scope.cancel(reason="node stopped")

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def stop(self, grace: float = DEFAULT_GRACE) -> None:
        """Begin a graceful stop: in-flight handlers get ``grace`` seconds.

        Called again while it stops, a shorter ``grace`` cuts the wait short
        (``stop(0)``: a cold stop now; what still runs is cancelled and
        released to its senders); a longer one changes nothing."""
        scope = self._grace_scope
        if scope is not None:
            scope.deadline = min(scope.deadline, trio.current_time() + grace)
            self._grace = min(self._grace, grace)
            return
        if self._stop.is_set():
            self._grace = min(self._grace, grace)
            return
        self._grace = grace
        self._stop.set()

    def _unsettled(self) -> dict[str, int]:
        """The messages each actor still holds (once its grace is over)."""
        return {name: cell.mailbox.depth for name, cell in self.cells.items() if cell.mailbox.depth}

    def last_heard(self, besides: str) -> float | None:
        """When one of its connections last received bytes from a peer on
        another host than ``besides`` (trio's clock; None: it has none open)."""
        return self._engines.last_heard(besides)

    @property
    def url(self) -> str:
        """Where others dial it; for a node that listens on every interface,
        this machine's name (0.0.0.0 is no address anyone can dial)."""
        if self.host is None:
            return "(client only)"
        host = socket.gethostname() if self.host in ("0.0.0.0", "::", "") else self.host
        return f"{self.scheme}://{host}:{self.port}"

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

    @property
    def metrics_url(self) -> str | None:
        """Where its Prometheus metrics are served, or None."""
        if self.metrics is None:
            return None
        return f"http://{self.metrics[0]}:{self.metrics[1]}/metrics"

    def collector(self) -> NodeCollector:
        """A prometheus-client collector that reads this node's counters."""
        return NodeCollector(
            self.cells,
            self._engines,
            lambda: self.outbox.backlog,
            self.dead_letters,
            lambda: self.outbox.peers,
            self.kept_replies,
            self._replays,
            self.store,
        )

    def statistics(self) -> dict[str, MailboxStatistics]:
        """Mailbox statistics of every actor on this node, by name."""
        return {name: cell.mailbox.statistics() for name, cell in self.cells.items()}

    async def _run_actors(self, scope: trio.CancelScope, done: trio.Event) -> None:
        try:
            with scope:
                # The node's supervision tree: each actor a supervised child (one
                # that crashes is started again), then the trees declared for it.
                host = NodeHost(
                    self.cells,
                    lambda name: Address(self.host or "", self.port, name, self.scheme),
                    self.outbox,
                    self.monitors,
                    self._stop,
                    self.kept_replies,
                )
                self.tree = node_root(
                    self.name, self._actors, host, self.supervision.actor_restarts
                )
                async with trio.open_nursery() as nursery:
                    await nursery.start(self.tree.supervisor.run)
                    self.actors_started.set()
        finally:
            done.set()

    def client_domain(self, host: str) -> SSLDomain | None:
        """TLS settings for a connection this node opens to ``host``."""
        return self.tls_domains.client(host) if self.tls_domains is not None else None


@asynccontextmanager
async def open_node(
    name: str,
    actors: Mapping[str, Hostable] | Iterable[Hostable] = (),
    *,
    grace: float = DEFAULT_GRACE,
    **options: Any,
) -> AsyncIterator[Node]:
    """Run a node for the duration of the block, then stop it gracefully.

    Takes the arguments of :class:`Node`, and, for convenience, each field of
    its records as a flat keyword (``tls=...``, ``insecure=True``,
    ``max_message_size=...``, ``connect_timeout=...``: see
    :func:`node_records`), over a record given whole. On leaving the block,
    in-flight handlers get ``grace`` seconds to finish before they are
    cancelled.
    """
    node = Node(name, actors, **node_records(options))
    async with trio.open_nursery() as nursery:
        await nursery.start(node.serve)
        try:
            yield node
        finally:
            node.stop(grace)
