"""The turns of trio's event loop (one per I/O wait), counted: how an ``Engine``'s
writer tells output that keeps coming turn after turn (a busy spell, gathered
into one write) from a lone message (written at once). See ``Engine._gather``.
"""

from __future__ import annotations

from typing import Final, final

import trio

__all__ = ["LoopTurns", "loop_turns"]


@final
class LoopTurns(trio.abc.Instrument):
    """Counts the turns of the event loop (one per I/O wait): how a writer tells
    output that keeps coming turn after turn from a lone message."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def before_io_wait(self, timeout: float) -> None:
        self.count += 1


_TURNS: Final = trio.lowlevel.RunVar[LoopTurns]("actorctl_engine_turns")


def loop_turns() -> LoopTurns:
    """This trio run's turn counter (installed by its first engine)."""
    try:
        return _TURNS.get()
    except LookupError:
        turns = LoopTurns()
        trio.lowlevel.add_instrument(turns)
        _TURNS.set(turns)
        return turns
