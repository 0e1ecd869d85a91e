"""The turns of trio's event loop (one per I/O wait), counted: how an ``Engine``'s
writer tells output that keeps coming turn after turn (a busy spell, gathered
into one write) from a lone message (written at once). See ``_output.py``.

The counter also runs what engines arranged for a turn's end (``at_turn_end``:
``Engine._flush``, the write of what the turn produced), when trio has run
every task the turn had and is about to wait for I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, final

import trio

__all__ = ["LoopTurns", "loop_turns"]


@final
class LoopTurns(trio.abc.Instrument):
    """Counts the turns of the event loop (one per I/O wait): how a writer tells
    output that keeps coming turn after turn from a lone message."""

    __slots__ = ("_due", "count")

    def __init__(self) -> None:
        self.count = 0
        self._due: list[Callable[[], None]] = []

    def at_turn_end(self, call: Callable[[], None]) -> None:
        """Have ``call`` run at the end of this turn, before the I/O wait. It
        must not raise (trio drops an instrument that does: the count with it)."""
        self._due.append(call)

    def before_io_wait(self, timeout: float) -> None:
        self.count += 1
        if self._due:
            due, self._due = self._due, []
            for call in due:
                call()


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
