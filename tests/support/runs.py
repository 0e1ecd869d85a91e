"""Counting what ran: every execution of every message a fault test sends.

A fault test numbers what it sends from 0, has each execution recorded here,
waits on ``all_ran`` (set once each number ran at least once), then asserts
that none was lost and reports how many ran twice (at-least-once allows it).
"""

from __future__ import annotations

from collections import Counter

import trio

__all__ = ["Runs"]


class Runs:
    """Every execution of each of ``expected`` numbered messages, and an event
    once each ran."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.counts: Counter[int] = Counter()
        self.all_ran = trio.Event()

    def record(self, n: int) -> None:
        self.counts[n] += 1
        if len(self.counts) == self.expected:
            self.all_ran.set()

    def lost(self) -> list[int]:
        return [n for n in range(self.expected) if n not in self.counts]

    def twice(self) -> int:
        return sum(1 for count in self.counts.values() if count > 1)
