"""Links to an actor its node has not started yet: held, not refused.

A node listens before its actors have started (their addresses name the port
it listens on), so a peer may attach a link to an actor that is not hosted
*yet*: a durable sender's backlog that sends again what it kept, at once, when
the node starts again (its own beat's firings to its own router, say) or when
a peer's connection comes back. Refused (``amqp:not-found``), the message is
refused for good: a backlog drops it (``actorctl:backlog:refused``), and a
periodic task's firing would be lost.

So while the node's actors start, such a link is opened with no credit
(``actorctl:link:held``): its sender waits. Once they have started
(:meth:`StartingLinks.start`), each held link is answered as it would have been
then: attached to its actor (and granted credit), or refused if there is still
no such actor.
"""

from __future__ import annotations

from typing import Protocol, final

from proton import Endpoint, Link

from ..._log import log
from ._credit import CreditKeeper
from ._engine import Engine

__all__ = ["LinkHolder", "StartingLinks"]


class LinkHolder(Protocol):
    """A connection's incoming side, which answers a link it held."""

    def answer(self, engine: Engine, link: Link) -> None:
        """Feed its actor's mailbox from ``link`` (opened), or refuse it."""
        ...


@final
class StartingLinks:
    """Whether a node's actors have started, and the links held until they do
    (one per node, shared by its connections).

    Args:
        keeper: the node's credit keeper: the held links attached at
            :meth:`start` are granted credit in one pass.
    """

    __slots__ = ("_held", "_keeper", "started")

    def __init__(self, keeper: CreditKeeper) -> None:
        #: True once the node's actors have started: an unknown actor is unknown.
        self.started = False
        self._keeper = keeper
        self._held: list[tuple[LinkHolder, Engine, Link]] = []

    def hold(self, holder: LinkHolder, engine: Engine, link: Link, target: str) -> None:
        """Open ``link`` to ``target`` with no credit; ``holder`` answers it at :meth:`start`."""
        link.target.address = target
        link.open()
        self._held.append((holder, engine, link))
        log("actorctl:link:held", peer=engine.peer, target=target, until="the actors started")

    def start(self) -> None:
        """The node's actors have started: answer every held link now (one
        whose connection or sender closed meanwhile is gone: nothing to answer)."""
        self.started = True
        held, self._held = self._held, []
        for holder, engine, link in held:
            if not engine.closed and not link.state & Endpoint.REMOTE_CLOSED:
                holder.answer(engine, link)
                engine.wake()
        self._keeper.rebalance()
