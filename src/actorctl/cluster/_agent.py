"""The ``_node`` agent: the actor on every node that answers for the node.

The Controller asks it for mailbox statistics and the node's supervision tree;
another node asks it to monitor (or demonitor, as Erlang says) one of this
node's actors for a watcher there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, final

from ..actors import Actor, handler
from ..mailbox import MailboxStatistics
from ._monitors import AGENT, NodeMonitors

__all__ = ["NodeAgent"]


@final
class NodeAgent(Actor):
    """Hosted on every node as ``_node``.

    Args:
        statistics: the mailbox statistics of the node's actors, by name.
        tree: the node's supervision tree, described.
        monitors: the node's monitors.
    """

    name = AGENT

    def __init__(
        self,
        statistics: Callable[[], dict[str, MailboxStatistics]],
        tree: Callable[[], dict[str, Any]],
        monitors: NodeMonitors,
    ) -> None:
        self._statistics = statistics
        self._tree = tree
        self._monitors = monitors

    @handler
    async def statistics(self) -> dict[str, dict[str, int]]:
        """Mailbox depth, capacity and messages received, per actor."""
        return {
            name: {"depth": stats.depth, "capacity": stats.capacity, "received": stats.received}
            for name, stats in self._statistics().items()
            if name != AGENT
        }

    @handler
    async def tree(self) -> dict[str, Any]:
        """The node's root supervisor, with its children (actors, supervisors
        and processes, nested), each with its state, restarts and mailbox."""
        return self._tree()

    @handler
    async def monitor(self, target: str, watcher: str) -> bool:
        """Tell ``watcher`` (an actor's address) Terminated when the actor at
        ``target`` (on this node) ends. False if there is no such actor."""
        return self._monitors.watch_here(target, watcher)

    @handler
    async def demonitor(self, target: str, watcher: str) -> None:
        """Stop telling ``watcher`` about ``target``."""
        self._monitors.unwatch_here(target, watcher)
