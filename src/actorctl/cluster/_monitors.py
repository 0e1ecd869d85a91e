"""A node's monitors: who watches its actors, and whose actors its actors watch.

Watching an actor on this node is an entry in a table here. Watching one on
another node asks that node's ``_node`` agent (a signed message, like any
other) to keep the entry in its table; that node tells the watcher
``Terminated`` when the actor ends. This node notices the other one is lost: its
outgoing connection there closed and did not come back within ``lost_after``
seconds (the peer link reports both through :meth:`NodeMonitors.peer_state`);
then every watcher of an actor there is told ``Terminated("node lost ...")``.

Every Terminated goes out through the node's Outbox as an ordinary ``tell``,
even to a watcher on this same node.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final, final

import trio

from .._errors import ActorctlError
from .._log import log
from ..actors import TERMINATED, ActorRef, Address, Outbox, Terminated

__all__ = ["AGENT", "NodeMonitors"]

AGENT: Final = "_node"
#: How long a Terminated may wait for its watcher's node (s): bounded, then logged.
TELL_TIMEOUT: Final = 30.0


@final
class NodeMonitors:
    """Implements the actors' ``Monitors`` for one node.

    Args:
        outbox: the node, to send through.
        is_local: whether an address is on this node.
        alive: whether this node has a live actor of that name.
        lost_after: seconds a peer's connection may stay down before its
            actors count as terminated.
        ask_timeout: how long registering a remote watch may take.
    """

    def __init__(
        self,
        outbox: Outbox,
        *,
        is_local: Callable[[Address], bool],
        alive: Callable[[str], bool],
        lost_after: float = 10.0,
        ask_timeout: float = 10.0,
    ) -> None:
        self._outbox = outbox
        self._is_local = is_local
        self._alive = alive
        self.lost_after = lost_after
        self._ask_timeout = ask_timeout
        # actor name here -> {watcher address: the target address as it watches it}
        self._here: dict[str, dict[str, str]] = {}
        # "host:port" of a peer -> target address there -> watcher addresses here
        self._there: dict[str, dict[str, set[str]]] = {}
        self._down: dict[str, trio.CancelScope] = {}
        self._incarnations: dict[str, str] = {}  # endpoint: the node process last seen there
        self._send, self._receive = trio.open_memory_channel[tuple[str, Terminated]](math.inf)
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Send the Terminated messages and time lost peers, until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            async for watcher, terminated in self._receive:
                nursery.start_soon(self._tell, watcher, terminated)

    # -- the actors' Monitors --------------------------------------------------------

    async def watch(self, watcher: Address, target: Address) -> None:
        if self._is_local(target):
            if not self.watch_here(str(target), str(watcher)):
                self._notify(str(watcher), str(target), "no such actor")
            return
        endpoint = _endpoint(target)
        watchers = self._there.setdefault(endpoint, {}).setdefault(str(target), set())
        watchers.add(str(watcher))
        agent = ActorRef(Address(target.host, target.port, AGENT, target.scheme), self._outbox)
        try:
            alive = await agent.with_options(timeout=self._ask_timeout).ask(
                "monitor", str(target), str(watcher)
            )
        except ActorctlError as exc:
            watchers.discard(str(watcher))
            self._notify(str(watcher), str(target), f"node unreachable: {exc}")
            return
        if not alive:
            watchers.discard(str(watcher))
            self._notify(str(watcher), str(target), "no such actor")

    async def unwatch(self, watcher: Address, target: Address) -> None:
        if self._is_local(target):
            self.unwatch_here(str(target), str(watcher))
            return
        self._there.get(_endpoint(target), {}).get(str(target), set()).discard(str(watcher))
        agent = ActorRef(Address(target.host, target.port, AGENT, target.scheme), self._outbox)
        try:
            with trio.fail_after(self._ask_timeout):
                await agent.tell("demonitor", str(target), str(watcher))
        except (ActorctlError, trio.TooSlowError) as exc:
            # The watcher ignores a Terminated it no longer watches: nothing is lost.
            log("actorctl:monitor:unwatch-failed", target=str(target), error=str(exc))

    # -- this node's actors, watched (by the ``_node`` agent and the trees) --------

    def watch_here(self, target: str, watcher: str) -> bool:
        """Watch an actor of this node; False if there is no such live actor."""
        name = Address.parse(target).name
        if not self._alive(name):
            return False
        self._here.setdefault(name, {})[watcher] = target
        return True

    def unwatch_here(self, target: str, watcher: str) -> None:
        self._here.get(Address.parse(target).name, {}).pop(watcher, None)

    def gone(self, name: str, reason: str) -> None:
        """The actor ``name`` of this node ended for good: tell its watchers."""
        for watcher, target in self._here.pop(name, {}).items():
            self._notify(watcher, target, reason)

    # -- peers ----------------------------------------------------------------------

    def watching(self, endpoint: str) -> bool:
        """Whether an actor here watches an actor at ``endpoint`` ("host:port")."""
        return any(self._there.get(endpoint, {}).values())

    def peer_state(self, endpoint: str, up: bool, node_id: str | None = None) -> None:
        """The connection to the peer at ``endpoint`` ("host:port") is up (to
        the node process ``node_id``), or went down: a peer that stays down
        ``lost_after`` seconds is lost, and one that comes back as another
        process (restarted) has lost the watches the old one held."""
        if up:
            scope = self._down.pop(endpoint, None)
            if scope is not None:
                scope.cancel(reason=f"{endpoint} is back")
            before = self._incarnations.get(endpoint)
            if node_id is not None:
                self._incarnations[endpoint] = node_id
            if before is not None and node_id is not None and before != node_id:
                self._lose(endpoint, f"node restarted: {endpoint} is a new process ({node_id})")
            return
        if endpoint in self._down or not self.watching(endpoint) or self._nursery is None:
            return
        scope = self._down[endpoint] = trio.CancelScope()
        self._nursery.start_soon(self._lose_after, endpoint, scope)

    async def _lose_after(self, endpoint: str, scope: trio.CancelScope) -> None:
        with scope:
            await trio.sleep(self.lost_after)
            self._down.pop(endpoint, None)
            self._lose(
                endpoint, f"node lost: no connection to {endpoint} for {self.lost_after:g} s"
            )

    def _lose(self, endpoint: str, reason: str) -> None:
        """Every watch of an actor at ``endpoint`` ends: tell its watchers."""
        log("actorctl:monitor:node-lost", peer=endpoint, reason=reason)
        for target, watchers in self._there.pop(endpoint, {}).items():
            for watcher in watchers:
                self._notify(watcher, target, reason)

    # -- telling --------------------------------------------------------------------

    def _notify(self, watcher: str, target: str, reason: str) -> None:
        self._send.send_nowait((watcher, Terminated(target, reason)))

    async def _tell(self, watcher: str, terminated: Terminated) -> None:
        ref = ActorRef(Address.parse(watcher), self._outbox)
        try:
            with trio.fail_after(TELL_TIMEOUT):
                await ref.tell(TERMINATED, terminated)
        except (ActorctlError, trio.TooSlowError) as exc:
            log(
                "actorctl:monitor:tell-failed",
                watcher=watcher,
                target=terminated.address,
                reason=terminated.reason,
                error=str(exc) or type(exc).__name__,
            )


def _endpoint(address: Address) -> str:
    return f"{address.host}:{address.port}"
