"""The ``_node`` agent: the actor on every node that answers for the node.

The Controller asks it who the node is (``identity``: how a Controller that
does not start its nodes learns them, ``_attend.py``), for mailbox statistics
and for the node's supervision tree; another node asks it to monitor (or
demonitor, as Erlang says) one of this node's actors for a watcher there.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Protocol, final

from ..actors import Actor, handler
from ._monitors import AGENT, NodeMonitors
from ._supervised import describe_root

if TYPE_CHECKING:
    import trio

    from ..mailbox import MailboxStatistics
    from ..supervision._tree import TreeLevel

__all__ = ["AgentHost", "NodeAgent"]


class AgentHost(Protocol):
    """What the agent reads of its node (a :class:`~actorctl.cluster.Node`)."""

    name: str
    node_id: str
    monitors: NodeMonitors
    tree: TreeLevel | None
    actors_started: trio.Event

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
        return {
            "name": node.name,
            "node_id": node.node_id,
            "pid": os.getpid(),
            "address": node.url,
            "actors": sorted(node.statistics()),
            "metrics": node.metrics_url,
        }

    @handler
    async def statistics(self) -> dict[str, dict[str, int]]:
        """Mailbox depth, capacity and messages received, per actor."""
        return {
            name: {"depth": stats.depth, "capacity": stats.capacity, "received": stats.received}
            for name, stats in self._node.statistics().items()
            if name != AGENT
        }

    @handler
    async def tree(self) -> dict[str, Any]:
        """The node's root supervisor, with its children (actors, supervisors
        and processes, nested), each with its state, restarts and mailbox."""
        return describe_root(self._node.name, self._node.tree)

    @handler
    async def monitor(self, target: str, watcher: str) -> bool:
        """Tell ``watcher`` (an actor's address) Terminated when the actor at
        ``target`` (on this node) ends. False if there is no such actor."""
        return self._node.monitors.watch_here(target, watcher)

    @handler
    async def demonitor(self, target: str, watcher: str) -> None:
        """Stop telling ``watcher`` about ``target``."""
        self._node.monitors.unwatch_here(target, watcher)
