"""Monitors: an actor watches another and hears once when it is gone.

As in Akka (``context.watch(ref)``) and Erlang (``monitor/2``): the watcher gets
one :class:`Terminated` message, through its own inbox like any other message,
when the watched actor stops for good (it stopped, crashed and was not started
again, its supervisor gave up or terminated it, its node stopped) or when the
node it lives on is lost. A crash that its supervisor restarts is not an end:
the actor keeps its address, and its watchers keep watching.

The actor layer only states what it needs (:class:`Monitors`); the node
implements it, as it implements the ``Outbox``.
"""

from __future__ import annotations

from typing import Final, Protocol, final

import attrs

from ._address import Address

__all__ = ["TERMINATED", "Monitors", "Terminated"]

#: The subject (handler name) of a Terminated message.
TERMINATED: Final = "actorctl:terminated"


@final
@attrs.frozen
class Terminated:
    """The actor at ``address`` is gone, and why.

    Attributes:
        address: the watched actor's address, as given to ``watch``.
        reason: ``"stopped"``, the error it crashed with, ``"node lost: ..."``,
            ``"no such actor"``, ...
    """

    address: str
    reason: str


class Monitors(Protocol):
    """What a node offers its actors for watching others."""

    async def watch(self, watcher: Address, target: Address) -> None:
        """Tell ``watcher`` (once) when ``target`` is gone. Returns once the watch
        is in place (for a remote target: once its node has registered it)."""
        ...

    async def unwatch(self, watcher: Address, target: Address) -> None:
        """Stop watching ``target``."""
        ...
