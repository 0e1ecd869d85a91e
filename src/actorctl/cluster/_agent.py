"""The ``_node`` agent: the actor on every node that answers for the node.

The Controller asks it who the node is (``identity``: how a Controller that
does not start its nodes learns them, ``_attend.py``), for mailbox statistics
and for the node's supervision tree; another node asks it to monitor (or
demonitor, as Erlang says) one of this node's actors for a watcher there.

``actorctl cluster reload`` (``_reloader.py``) asks it to follow a changed
cluster file (``follow``: each actor that has a ``follow_cluster`` method
follows it in place, or says the node must restart), to read its keys and
certificates again (``refresh_security``), and to finish what it holds before
it stops (``drain``).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, final

import trio

from .._errors import ActorctlError, ConfigError
from .._log import log
from ..actors import Actor, BadArguments, handler
from ..mailbox import Role
from ._agent_answers import DrainAnswer, FollowAnswer, MailboxCounts, NodeIdentity
from ._monitors import AGENT, NodeMonitors
from ._reload import Shift
from ._supervised import describe_root
from .config._config import ClusterApp, ClusterConfig
from .config._load import load_cluster

if TYPE_CHECKING:
    from ..actors._cell import ActorCell
    from ..mailbox import MailboxStatistics
    from ..supervision._tree import TreeLevel
    from ._keywatch import KeyringWatch
    from .link._tls import TlsDomains
    from .outbox._outbox import NodeOutbox

__all__ = ["AgentHost", "NodeAgent", "RestartNeeded"]


class RestartNeeded(ActorctlError):
    """Raised by an actor's ``follow_cluster``: what changed can only be
    applied by starting its node again (a pool with no router here, say)."""


class AgentHost(Protocol):
    """What the agent reads of its node (a :class:`~actorctl.cluster.Node`)."""

    name: str
    node_id: str
    monitors: NodeMonitors
    tree: TreeLevel | None
    actors_started: trio.Event
    cells: dict[str, ActorCell]
    outbox: NodeOutbox
    key_watch: KeyringWatch | None
    tls_domains: TlsDomains | None
    cluster_app: ClusterApp | None
    followers: list[Callable[[ClusterConfig | None], Awaitable[None]]]

    @property
    def url(self) -> str: ...

    @property
    def metrics_url(self) -> str | None: ...

    def statistics(self) -> dict[str, MailboxStatistics]: ...


@final
class NodeAgent(Actor):
    """Hosted on every node as ``_node``.

    Args:
        node: the node it answers for.
    """

    name = AGENT
    # A drain waits up to its timeout: the Controller's status and other
    # nodes' monitors must not queue behind it.
    concurrency: ClassVar[int] = 8

    def __init__(self, node: AgentHost) -> None:
        self._node = node

    @handler
    async def identity(self) -> dict[str, Any]:
        """Who this node is, as its ready line says it: ``name``, ``node_id``
        (this process's boot id: a new one at each start), ``pid``,
        ``address``, ``actors`` and ``metrics`` (its /metrics URL, or None).
        Answers once the node's actors have started."""
        node = self._node
        await node.actors_started.wait()
        return NodeIdentity(
            node.name,
            node.node_id,
            os.getpid(),
            node.url,
            tuple(sorted(node.statistics())),
            node.metrics_url,
        ).wire()

    @handler
    async def statistics(self) -> dict[str, dict[str, int]]:
        """Mailbox depth, capacity and messages received, per actor."""
        return {
            name: MailboxCounts(stats.depth, stats.capacity, stats.received).wire()
            for name, stats in self._node.statistics().items()
            if name != AGENT
        }

    @handler
    async def tree(self) -> dict[str, Any]:
        """The node's root supervisor, with its children (actors, supervisors
        and processes, nested), each with its state, restarts and mailbox."""
        return describe_root(self._node.name, self._node.tree).wire()

    @handler
    async def monitor(self, target: str, watcher: str) -> bool:
        """Tell ``watcher`` (an actor's address) Terminated when the actor at
        ``target`` (on this node) ends. False if there is no such actor."""
        return self._node.monitors.watch_here(target, watcher)

    @handler
    async def demonitor(self, target: str, watcher: str) -> None:
        """Stop telling ``watcher`` about ``target``."""
        self._node.monitors.unwatch_here(target, watcher)

    @handler(roles=Role.OPERATOR)
    async def follow(
        self, path: str, away: list[str] | None = None, pending: list[str] | None = None
    ) -> dict[str, Any]:
        """Follow the cluster file at ``path`` (reloaded): each actor with a
        ``follow_cluster(config, node, shift)`` method changes what it can in
        place. ``away``: nodes to route nothing new to for now; ``pending``:
        nodes to route to as now (``Shift``). Returns what changed
        (``changed``) and why the node must restart (``restart``)."""
        try:
            config = load_cluster(path, self._node.cluster_app)
        except ConfigError as exc:
            raise BadArguments(str(exc)) from None
        mine = next((n for n in config.nodes if n.name == self._node.name), None)
        if mine is None:  # it is being removed: nothing to follow
            return FollowAnswer().wire()
        if self._node.key_watch is not None:  # read with the keys (refresh_security)
            self._node.key_watch.keyring.name_members(config.member_names)
        shift = Shift(frozenset(map(str, away or ())), frozenset(map(str, pending or ())))
        changed: list[str] = []
        restart: list[str] = []
        for name, cell in sorted(self._node.cells.items()):
            follow = getattr(cell.actor, "follow_cluster", None)
            if follow is None:
                continue
            try:
                changed += follow(config, mine, shift)
            except RestartNeeded as exc:
                restart.append(f"{name}: {exc}")
        for follower in list(self._node.followers):  # its record in etcd
            await follower(config)
        if changed:
            log("actorctl:node:followed", node=self._node.name, changed=changed, restart=restart)
        return FollowAnswer(tuple(changed), tuple(restart)).wire()

    @handler(roles=Role.OPERATOR)
    async def refresh_security(self) -> list[str]:
        """Read the node's keyring directory and TLS files again now (rotated
        on disk): new connections use the new certificates; a missing file
        keeps what the node had, and says so."""
        node, done = self._node, []
        if node.key_watch is not None:
            await node.key_watch.refresh()
            done.append("keys read again")
        if node.tls_domains is not None:
            node.tls_domains.reload()
            done.append("certificates read again")
        for follower in list(node.followers):  # its record says whom it trusts now
            await follower(None)
        return done

    @handler(roles=Role.OPERATOR)
    async def drain(self, timeout: float = 30.0, backlog: bool = True) -> dict[str, Any]:
        """Wait until the node holds nothing: every actor has settled every
        message it took, and (``backlog``) its backlog has sent everything on.
        Returns ``drained`` and, past ``timeout`` seconds, what was still busy."""
        with trio.move_on_after(float(timeout)):
            while busy := self._busy(backlog):
                await busy[0][1]()
            return DrainAnswer(drained=True).wire()
        return DrainAnswer(False, tuple(what for what, _ in self._busy(backlog))).wire()

    def _busy(self, backlog: bool) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        found: list[tuple[str, Callable[[], Awaitable[None]]]] = []
        for name, cell in sorted(self._node.cells.items()):
            depth = cell.mailbox.statistics().depth
            if name != AGENT and depth:
                found.append((f"{name}: {depth} unsettled", cell.mailbox.wait_settled))
        held = self._node.outbox.backlog
        if backlog and len(held):
            found.append((f"backlog: {len(held)} to send", held.wait_empty))
        return found
