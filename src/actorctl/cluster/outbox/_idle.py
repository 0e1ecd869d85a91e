"""Idle outgoing connections: closed, and forgotten by the outbox.

A node keeps one outgoing connection per peer node it has sent to. Without
pruning, a node that talked once to many peers (a client that called many
nodes, a router whose instances come and go) would hold every one of them open
for as long as it lives. :class:`IdlePeers` closes a connection that has gone
unused for ``peer_idle_timeout`` seconds and removes it from the outbox's
table; the next send to that node opens a new one.

A connection is in use, and is never pruned, while anything depends on it:
a delivery sent on it and not yet settled, or to be sent again after a
reconnect; a sender waiting for it or for its credit; a message in the
backlog for that node; a watch of an actor there (closing the connection
would make its watchers think the node was lost); a reply expected from it (or
from anywhere: a reply expected without naming its peer keeps every
connection). So pruning loses nothing: whatever is sent later goes on a new
connection.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, final

import trio

from ..._log import log
from ..link._engine import Engine
from ..link.peer._peer import Peer

__all__ = ["IdlePeers"]

Endpoint = tuple[str, int]
_CLOSE_GRACE: Final = 2.0  # seconds a closed connection gets to say goodbye
_LOOKS: Final = 2  # looks per idle timeout: idle for two looks in a row is pruned


@final
class IdlePeers:
    """Prunes a node's idle outgoing connections (the outbox owns it).

    Args:
        node: the node's name, for logs.
        peers: the outbox's table of connections, by endpoint: pruned in place.
        idle_after: ``peer_idle_timeout``, seconds.
        in_use: whether anything depends on the connection to an endpoint
            besides the connection itself (see the module docstring).
    """

    def __init__(
        self,
        node: str,
        peers: dict[Endpoint, Peer],
        idle_after: float,
        in_use: Callable[[Endpoint, Peer], bool],
    ) -> None:
        self.node = node
        self.idle_after = idle_after
        self._peers = peers
        self._in_use = in_use
        #: Endpoints something was sent to since the last look (the outbox adds them).
        self.used: set[Endpoint] = set()
        self._quiet: dict[Endpoint, int] = {}
        self._scopes: dict[Peer, trio.CancelScope] = {}
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Look for idle connections until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            while True:
                await trio.sleep(self.idle_after / _LOOKS)
                self.look()

    async def run_peer(self, peer: Peer) -> None:
        """Run ``peer`` (its reconnecting loop) until it is pruned."""
        scope = self._scopes[peer] = trio.CancelScope()
        try:
            with scope:
                await peer.run()
        finally:
            del self._scopes[peer]

    def look(self) -> None:
        used, self.used = self.used, set()
        for endpoint, peer in list(self._peers.items()):
            if endpoint in used or peer.busy or self._in_use(endpoint, peer):
                self._quiet.pop(endpoint, None)
                continue
            quiet = self._quiet[endpoint] = self._quiet.get(endpoint, 0) + 1
            if quiet >= _LOOKS:
                self._prune(endpoint, peer)

    def _prune(self, endpoint: Endpoint, peer: Peer) -> None:
        del self._peers[endpoint]
        self._quiet.pop(endpoint, None)
        log(
            "actorctl:peer:pruned",
            node=self.node,
            peer=peer.name,
            reason=f"unused for {self.idle_after:g} s (peer_idle_timeout)",
        )
        scope = self._scopes.get(peer)
        engine = peer.engine
        if engine is not None and not engine.closed:
            engine.connection.close()  # a clean AMQP close: the peer forgets us too
            engine.wake()
        if scope is not None and self._nursery is not None:
            self._nursery.start_soon(_end, scope, engine)


async def _end(scope: trio.CancelScope, engine: Engine | None) -> None:
    """Stop a pruned peer's loop once its connection has closed (or after a grace)."""
    if engine is not None:
        with trio.move_on_after(_CLOSE_GRACE):
            await engine.finished.wait()
    scope.cancel(reason="idle connection pruned")
