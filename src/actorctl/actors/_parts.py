"""What a cell makes only once its actor has something to do.

An idle actor is its cell, its mailbox and its address: a node may host a
million of them (docs/architecture.md, "Who owns what"). What only a message
needs, the cell makes at the actor's first message (or at the first task the
actor starts of its own), and keeps from then on, across the actor's restarts:
its dedup window, its counters, its turns and dispatch, the messages in its
hands and the tasks it started. Until then the cell answers for them with
what an actor that did nothing has: no reply kept, every counter at zero.
"""

from __future__ import annotations

from typing import Final, final

from ..mailbox import Inbound
from ._background import Background
from ._counters import ActorCounters
from ._dedup import SeenWindow
from ._dispatch import Dispatch
from ._turns import Turns

__all__ = ["NO_COUNTERS", "CellParts"]

#: The counters of every actor that has taken no message yet: all at zero,
#: shared, and never written (a cell's own are made with its parts).
NO_COUNTERS: Final = ActorCounters()


@final
class CellParts:
    """An actor's working parts, made by its cell at its first message.

    Attributes:
        seen: its dedup window (``_dedup.py``).
        counters: what it did with its messages (``_counters.py``).
        inflight: the messages it handles now, in the order it took them.
        turns: the task that handles its messages while it has any (``_turns.py``).
        dispatch: how one of its messages is run (``_dispatch.py``).
        background: the tasks it started of its own (``_background.py``).
    """

    __slots__ = ("background", "counters", "dispatch", "inflight", "seen", "turns")

    def __init__(
        self,
        seen: SeenWindow,
        counters: ActorCounters,
        inflight: dict[Inbound, None],
        turns: Turns,
        dispatch: Dispatch,
    ) -> None:
        self.seen = seen
        self.counters = counters
        self.inflight = inflight
        self.turns = turns
        self.dispatch = dispatch
        self.background = Background()
