"""A node's fence: whether it may start work, as far as the cluster is concerned.

A node of a cluster that spans hosts is a member while its lease in etcd lives
(``etcd/_membership.py``). Once the lease has ended the others drop it and send
what it held elsewhere (``_member.py``), so a node cut off from etcd and from
them must not also start that work late: it raises its fence, and whoever
starts work on the node (an application's workers) asks :attr:`Fence.why`
before each start and hands the message back (``modified``: sent elsewhere)
while it is raised. The fence comes down when the node registers again.

The runtime keeps the fence and says why; what "work" is, and what to do
instead, is the application's (the task layer's worker refuses a task with
``modified``). A node outside etcd is never fenced.
"""

from __future__ import annotations

from typing import final

import trio

from ..._log import log

__all__ = ["Fence"]


@final
class Fence:
    """Raised while the node's membership may have ended (see the module's text).

    Args:
        node: the node's name, for its log lines.
    """

    def __init__(self, node: str) -> None:
        self.node = node
        #: Why the node must start no work now, or None: it may. An attribute,
        #: not a property: a worker reads it per task (set only by raise_ and lower).
        self.why: str | None = None
        self._since = 0.0
        self.raised_times = 0  # how many times it went up (read by tests and metrics)
        self._lowered = trio.Event()  # set while it is down
        self._lowered.set()

    def raise_(self, why: str) -> None:
        """Start no work until :meth:`lower` (said once, however often raised)."""
        if self.why is None:
            self._since = trio.current_time()
            self.raised_times += 1
            self._lowered = trio.Event()
            log("actorctl:node:fenced", node=self.node, why=why)
        self.why = why

    async def wait_lowered(self) -> None:
        """Wait until the fence is down (at once if it is)."""
        await self._lowered.wait()

    def lower(self) -> None:
        """Work may start again (the node registered again)."""
        if self.why is not None:
            log(
                "actorctl:node:unfenced",
                node=self.node,
                seconds=round(trio.current_time() - self._since, 3),
            )
            self._lowered.set()
        self.why = None
