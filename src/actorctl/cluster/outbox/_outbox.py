"""The one path out of a node: sending, the reply table and the reply routes.

Every message a node sends goes through its :class:`NodeOutbox`: a ``tell``, an
``ask`` and the reply it waits for, the replies its actors send back, results
and forwarded messages. It owns

- the peers: at most one outgoing connection per peer node, opened the first
  time something is sent there (:meth:`NodeOutbox.open_peer`), run in the
  node's nursery, and closed once unused for ``peer_idle_timeout`` (``_idle.py``);
- the reply table: who takes the reply documents that carry a correlation id
  (an ``ask`` waiting for its reply, or an application that registered with
  :meth:`NodeOutbox.expect`): every reply reaches its taker this one way;
- the reply routes (``link/_reply_routes.py``): the reply links callers
  attached to this node, by reply address, on which replies go back
  pre-settled (the reply is the acknowledgement);
- the backlog (``_backlog.py``): durable sends, kept in the node's store until
  their receiver accepts them;
- the node's fence (``_fence.py``): raised while its membership of a cluster
  that spans hosts may have ended, so that what starts work asks it first.

Every wait on a peer is bounded: a peer that cannot be reached within the
connect timeout fails a plain send with ``PeerUnavailable``; a durable send
does not wait for the peer at all.

The actors layer sees it through the ``Outbox`` protocol (``actors/_ref.py``);
peers and inbound connections get the parts they need in their constructors.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import final

import attrs
import trio

from ..._errors import AskTimeout, ConfigError
from ..._log import TRACE, current_action_or, log, trace_here
from ...actors import REPLIER, Address
from ...mailbox import EXPIRED, Envelope, Outcome
from ...store._store import Store
from ...supervision import Breaker
from .._deadletters import DeadLetters
from ..link._engine_set import EngineSet
from ..link._pending import PeerSettings, Pending
from ..link._reply_claims import own_reply_address
from ..link._reply_routes import ReplyRoutes
from ..link.peer._peer import Peer
from ..link.peer._peer_breaker import PeerBreaker
from ..membership._fence import Fence
from ._backlog import Backlog, Done, Reroute
from ._idle import IdlePeers

__all__ = ["NodeOutbox"]


#: Takes the reply documents of one correlation id.
Taker = Callable[[Envelope], None]


@final
class _Waiter:
    """One expected reply: who takes it, which peer may send it, and which actor
    there may answer (None: any)."""

    __slots__ = ("peer", "replier", "take")

    def __init__(self, take: Taker, peer: str | None, replier: str | None = None) -> None:
        self.take = take
        self.peer = peer
        self.replier = replier


@final
class NodeOutbox:
    """Sends every message of one node. The node makes it; see the module docstring.

    Args:
        name: the node's name, for logs and errors.
        node_id: the node's AMQP container id; message ids start with it.
        settings: how the node's outgoing connections are made and signed.
        engines: the node's live connections (each peer's joins it).
        clock: wall-clock time in seconds since the epoch (for message times).
        on_peer_state: told ``("host:port", True, container_id)`` when a connection to a peer
            is ready and ``("host:port", False)`` when it closes (the node's
            monitors learn of a lost node this way).
        store: the node's durable store.
        watched: whether actors at an endpoint (``host:port``) are watched from
            here: the connection there is then never closed as idle.
        peer_idle_timeout: seconds a connection to a peer may go unused before
            it is closed (``_idle.py``).
        max_queued_replies: replies held for a reply link without credit.
        max_queued_reply_bytes: bytes of them held for one caller's connection.
        dead_letters: where the backlog puts what expired while refused.
    """

    def __init__(
        self,
        name: str,
        node_id: str,
        settings: PeerSettings,
        engines: EngineSet,
        clock: Callable[[], float],
        *,
        on_peer_state: Callable[[str, bool, str | None], None] | None = None,
        store: Store,
        watched: Callable[[str], bool] | None = None,
        peer_idle_timeout: float = 120.0,
        max_queued_replies: int = 1000,
        max_queued_reply_bytes: int = 16 << 20,
        dead_letters: DeadLetters | None = None,
    ) -> None:
        self.name = name
        self.store = store
        self._on_peer_state = on_peer_state
        self.node_id = node_id
        self.settings = settings
        self.routes = ReplyRoutes(max_queued_replies, max_queued_reply_bytes)
        self._engines = engines
        #: The Outbox protocol's ``now``: the clock itself, called without a
        #: method in between (the task path reads it several times per task).
        self.now: Callable[[], float] = clock
        self._ids = itertools.count()
        self._peers: dict[tuple[str, int], Peer] = {}
        # Each peer's breaker, kept when its idle connection is closed (made on
        # a peer's first connection, never per message).
        self._breakers: dict[tuple[str, int], PeerBreaker] = {}
        self._waiting: dict[str, _Waiter] = {}
        self._any_peer: _Waiter | None = None  # expect()'s, with no peer
        # It names this node's key, if it has one (docs/protocol.md §8).
        identity = settings.identity
        self._reply_address = own_reply_address(
            node_id, None if identity is None else identity.key_id
        )
        self._nursery: trio.Nursery | None = None
        #: The node's dead letters (None: none kept).
        self.dead_letters = dead_letters
        self.backlog = Backlog(name, self.store, self.open_peer, clock, dead_letters)
        self._watched = watched
        self.idle_peers = IdlePeers(name, self._peers, peer_idle_timeout, self._in_use)
        #: Raised while the node's membership may have ended (``_fence.py``):
        #: what starts work asks it first.
        self.fence = Fence(name)

    def start(self, nursery: trio.Nursery) -> None:
        """Run peers and the backlog in ``nursery`` from now on (the node's own)."""
        self._nursery = nursery
        self.backlog.start(nursery)
        nursery.start_soon(self.idle_peers.run)

    # -- the Outbox protocol -------------------------------------------------------

    def new_message_id(self) -> str:
        return f"{self.node_id}-{next(self._ids)}"

    def reply_address(self, address: Address) -> str:
        """Where replies come back to this node: the source address of the reply
        link each of its outgoing connections attaches (the same on every one)."""
        return self._reply_address

    async def send(
        self,
        address: Address,
        envelope: Envelope,
        *,
        presettled: bool,
        confirm: bool,
        durable: bool = False,
        reroute: Reroute | None = None,
    ) -> None:
        if TRACE not in envelope.headers and current_action_or(None) is not None:
            envelope = _traced(envelope)  # (its first look, inline: most sends are in none)
        if durable:
            await self.backlog.add(address, envelope, reroute=reroute)
            return
        # A plain tell (neither confirmed nor pre-settled) is sent again if its
        # receiver gives it back unrun (``link/peer/_given_back.py``).
        pending = Pending(
            address.name,
            envelope,
            envelope.message_id,
            presettled=presettled,
            again=not confirm and not presettled,
        )
        await self.open_peer(address).transmit(pending)
        if confirm and not presettled:
            await pending.done.wait()
            error = pending.error()
            if error is not None:
                raise error

    async def request(self, address: Address, envelope: Envelope, timeout: float) -> Envelope:
        envelope = _traced(envelope)
        peer = self.open_peer(address)
        done = trio.Event()
        replies: list[Envelope] = []
        failures: list[Pending] = []

        def take(reply: Envelope) -> None:
            replies.append(reply)
            done.set()

        def on_outcome(outcome: Outcome) -> None:
            if outcome.state != "accepted":
                failures.append(pending)
                done.set()

        pending = Pending(address.name, envelope, envelope.message_id, on_outcome=on_outcome)
        # Only the actor asked, on the peer asked, answers (docs/protocol.md §8.1).
        self._waiting[envelope.message_id] = _Waiter(take, peer.name, address.name)
        try:
            with trio.fail_after(timeout):
                await peer.transmit(pending)
                await done.wait()
        except trio.TooSlowError:
            timed_out = True
        else:
            timed_out = False
        finally:
            self.unexpect(envelope.message_id)
        failure = failures[0].outcome if failures else None
        if timed_out or (failure is not None and failure.condition == EXPIRED):
            # The receiver gave up on it at the same deadline: one error either way.
            raise AskTimeout(
                f"no reply from {address} to {envelope.subject!r} "
                f"(message {envelope.message_id}) within {timeout:g} s"
            )
        if failures:
            error = failures[0].error()
            assert error is not None
            raise error
        return replies[0]

    async def hand_over(
        self,
        address: Address,
        envelope: Envelope,
        *,
        on_done: Done | None = None,
        reroute: Reroute | None = None,
    ) -> None:
        """A durable send that reports its final outcome to ``on_done`` and may
        be sent elsewhere when refused (``reroute``): what a router forwards."""
        await self.backlog.add(address, envelope, on_done=on_done, reroute=reroute)

    def reply(self, envelope: Envelope, *, quiet: bool = False) -> int:
        size = self.routes.send(envelope)
        if size:
            return size
        if not quiet:
            log(
                "actorctl:reply:dropped",
                node=self.name,
                reply_to=envelope.to,
                correlation_id=envelope.correlation_id,
                reason="no route to the caller (it disconnected or never attached a reply link)",
            )
        return 0

    def expect(self, correlation_id: str, take: Taker, *, peer: str | None = None) -> None:
        """Have ``take`` receive the reply documents that carry ``correlation_id``
        (until :meth:`unexpect`); with ``peer`` (``host:port``), only those that
        come back from that peer."""
        if peer is not None:
            self._waiting[correlation_id] = _Waiter(take, peer)
            return
        # The same taker for every id, as a caller's result registry has: one
        # waiter (they are never changed) for all of them, not one per id.
        waiter = self._any_peer
        if waiter is None or waiter.take != take:
            waiter = self._any_peer = _Waiter(take, None)
        self._waiting[correlation_id] = waiter

    def unexpect(self, correlation_id: str) -> None:
        """Stop taking replies for ``correlation_id``; later ones are logged as late."""
        self._waiting.pop(correlation_id, None)

    # -- peers -----------------------------------------------------------------------

    def open_peer(self, address: Address) -> Peer:
        """The connection to the node at ``address``: started (in the node's
        nursery) the first time, reused after."""
        endpoint = (address.host, address.port)  # address.endpoint, with no call (per send)
        used = self.idle_peers.used
        if endpoint not in used:  # (marked once per idle check, not per send)
            used.add(endpoint)
        peers = self._peers
        if endpoint in peers:  # (a membership test and an index: no call per send)
            return peers[endpoint]
        if self._nursery is None:
            raise ConfigError(f"node {self.name!r} is not running: use open_node()")
        made: list[Peer] = []

        def on_state(name: str, up: bool, node: str | None) -> None:
            # A connection closed as idle (no longer in the table) is no news:
            # nothing depended on it, and a new one there may be up already.
            if self._on_peer_state is not None and self._peers.get(endpoint) is made[0]:
                self._on_peer_state(name, up, node)

        peer = Peer(
            address.host,
            address.port,
            self.settings,
            self._engines,
            self._on_reply,
            on_state=on_state,
            breaker=self._breakers.get(endpoint),
        )
        self._breakers[endpoint] = peer.breaker
        made.append(peer)
        self._peers[endpoint] = peer
        self._nursery.start_soon(self.idle_peers.run_peer, peer)
        return peer

    def peer_back(self, address: Address) -> None:
        """The node at ``address`` is known to be up again (it registered): if
        its breaker is open, dial it now rather than at the breaker's next probe."""
        guard = self._breakers.get(address.endpoint)
        if guard is not None:
            guard.peer_is_back()
        peer = self._peers.get(address.endpoint)
        if peer is not None:
            peer.dialer.back()

    def peer_lost(self, address: Address, why: str) -> int:
        """The node at ``address`` is known to be gone (its lease ended): drop
        the connection to it and release what it held unsettled at once
        (``Peer.lost``), rather than after the AMQP idle timeout and the
        connect timeout. Returns how many deliveries were released."""
        peer = self._peers.get(address.endpoint)
        if peer is None:
            return 0
        released = peer.lost(why)
        log("actorctl:peer:lost", node=self.name, peer=peer.name, released=released, why=why)
        return released

    def peer_breaker(self, address: Address) -> Breaker | None:
        """The circuit breaker of the peer node at ``address`` (None: never dialled)."""
        guard = self._breakers.get(address.endpoint)
        return None if guard is None else guard.breaker

    @property
    def peers(self) -> int:
        """How many outgoing connections (to distinct peers) the node keeps."""
        return len(self._peers)

    def _in_use(self, endpoint: tuple[str, int], peer: Peer) -> bool:
        """Whether anything but the connection itself needs the one to ``endpoint``."""
        if self.backlog.waiting_for(endpoint):
            return True
        if self._watched is not None and self._watched(peer.name):
            return True
        return any(w.peer is None or w.peer == peer.name for w in self._waiting.values())

    def _on_reply(self, envelope: Envelope, peer: str) -> None:
        """A reply document came back, authenticated (``_reply_auth``), on the reply
        link of the connection to ``peer``: it goes to its taker if it answers an
        ask sent to that peer (and that actor, when the ask named one)."""
        waiter = self._waiting.get(envelope.correlation_id or "")
        if waiter is not None and waiter.peer is not None:
            asked = waiter.replier
            if waiter.peer != peer:
                problem = f"the ask went to {waiter.peer}, not to {peer}"
            elif asked is not None and envelope.headers.get(REPLIER, asked) != asked:
                problem = f"the ask went to actor {asked!r}, not {envelope.headers[REPLIER]!r}"
            else:
                problem = None
            if problem is not None:
                # Logged and dropped: the caller goes on waiting for the real reply.
                log(
                    "actorctl:reply:rejected",
                    node=self.name,
                    reason="wrong peer",
                    description=problem,
                    correlation_id=envelope.correlation_id,
                    message_id=envelope.message_id,
                    peer=peer,
                    expected=waiter.peer,
                )
                return
        if waiter is None:
            log(
                "actorctl:reply:late",
                node=self.name,
                correlation_id=envelope.correlation_id,
                message_id=envelope.message_id,
            )
            return
        waiter.take(envelope)


def _traced(envelope: Envelope) -> Envelope:
    """``envelope`` with the trace of the eliot action it is sent in (a header
    it has already, from the message it continues, is kept). Outside any
    action (a caller's sends, most often) it costs one look-up."""
    if TRACE in envelope.headers or current_action_or(None) is None:
        return envelope
    trace = trace_here()
    if trace is None:
        return envelope
    return attrs.evolve(envelope, headers={**envelope.headers, TRACE: trace})
