"""Actors for the two-node example: a word counter and a prime sieve.

Run them on a node with ``actorctl node run examples.workers:actors --listen 127.0.0.1:5680``.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass

from actorctl import Actor, handler


@dataclass
class Document:
    title: str
    text: str


class WordCounter(Actor):
    """Counts words in documents (async handler: runs as a trio task)."""

    name = "words"

    def __init__(self) -> None:
        self.totals: Counter[str] = Counter()

    @handler
    async def count(self, doc: Document) -> dict[str, object]:
        words = [w.strip(".,;:!?\"'").lower() for w in doc.text.split()]
        counts = Counter(w for w in words if w)
        self.totals.update(counts)
        return {"title": doc.title, "words": sum(counts.values()), "top": counts.most_common(3)}

    @handler
    async def totals_top(self, n: int = 5) -> list[list[object]]:
        return [[word, count] for word, count in self.totals.most_common(n)]


class Primes(Actor):
    """CPU-bound work in plain ``def`` handlers: they run in worker threads."""

    name = "primes"
    concurrency = 2

    @handler
    def count_below(self, limit: int) -> int:
        if limit < 2:
            return 0
        sieve = bytearray([1]) * limit
        sieve[0:2] = b"\x00\x00"
        for i in range(2, int(limit**0.5) + 1):
            if sieve[i]:
                sieve[i * i :: i] = bytes(len(range(i * i, limit, i)))
        return sum(sieve)

    @handler
    def digest(self, text: str, rounds: int = 1000) -> str:
        data = text.encode()
        for _ in range(rounds):
            data = hashlib.sha256(data).digest()
        return data.hex()


actors = [WordCounter, Primes]
