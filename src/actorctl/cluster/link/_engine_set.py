"""A node's set of live connections, incoming and outgoing.

Each :class:`~._engine.Engine` the node's listener accepts or its peers open
is added here, and discarded when it ends. The set is what the node's stop
closes (:meth:`EngineSet.close_all`), what its metrics read (the bytes every
connection moved and the links open now: :meth:`EngineSet.traffic`), and
what tells a node that cannot reach etcd whether other hosts still talk to
it (:meth:`EngineSet.last_heard`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

import trio
from proton import Endpoint

if TYPE_CHECKING:
    from ._engine import Engine

__all__ = ["EngineSet"]

_LOCAL_ACTIVE: Final = Endpoint.LOCAL_ACTIVE


@final
class EngineSet:
    """A node's live connections, incoming and outgoing: what its stop closes."""

    __slots__ = ("_changed", "_engines", "_gone_received", "_gone_sent", "opened")

    def __init__(self) -> None:
        self._engines: set[Engine] = set()
        self._changed = trio.Event()
        #: Connections added since the node started.
        self.opened = 0
        self._gone_received = 0  # the bytes of connections that have ended
        self._gone_sent = 0

    def add(self, engine: Engine) -> None:
        self._engines.add(engine)
        self.opened += 1

    def discard(self, engine: Engine) -> None:
        if engine in self._engines:
            self._gone_received += engine.received_bytes
            self._gone_sent += engine.sent_bytes
        self._engines.discard(engine)
        self._changed.set()
        self._changed = trio.Event()

    def __len__(self) -> int:
        return len(self._engines)

    def last_heard(self, besides: str) -> float | None:
        """When a connection last received bytes from a peer on another host
        than ``besides`` (an address; None: no such connection is open)."""
        heard = [
            engine.heard_at
            for engine in self._engines
            if engine.peer.rpartition(":")[0].strip("[]") != besides
        ]
        return max(heard, default=None)

    def traffic(self) -> tuple[int, int, int]:
        """Bytes received and sent by every connection since the node started,
        and the links open now (read when the node's metrics are scraped)."""
        received, sent, links = self._gone_received, self._gone_sent, 0
        for engine in self._engines:
            received += engine.received_bytes
            sent += engine.sent_bytes
            link = engine.connection.link_head(_LOCAL_ACTIVE)
            while link is not None:
                links += 1
                link = link.next(_LOCAL_ACTIVE)
        return received, sent, links

    async def close_all(self, timeout: float) -> None:
        """Close every connection, and wait up to ``timeout`` s for them to end."""
        for engine in list(self._engines):
            engine.connection.close()
            engine.wake()
        with trio.move_on_after(timeout):
            while self._engines:
                await self._changed.wait()
