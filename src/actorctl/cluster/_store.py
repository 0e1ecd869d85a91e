"""Placeholder: the in-memory half of the node's store (the SQLite half lands next)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import final

import trio

__all__ = ["Store"]


@final
class Store:
    def __init__(
        self, path: Path | None, *, name: str, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = path
        self.name = name
        self._clock = clock
        self._tables: dict[str, dict[str, tuple[bytes, float | None]]] = {}

    @classmethod
    def memory(cls, name: str) -> Store:
        return cls(None, name=name)

    @property
    def durable(self) -> bool:
        return False

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep_forever()

    def put(self, table: str, key: str, value: bytes, *, expires: float | None = None) -> None:
        rows = self._tables.setdefault(table, {})
        rows.pop(key, None)
        rows[key] = (value, expires)

    def delete(self, table: str, key: str) -> None:
        self._tables.get(table, {}).pop(key, None)

    def get(self, table: str, key: str) -> bytes | None:
        row = self._tables.get(table, {}).get(key)
        if row is None or (row[1] is not None and row[1] <= self._clock()):
            return None
        return row[0]

    def items(self, table: str) -> list[tuple[str, bytes]]:
        now = self._clock()
        rows = self._tables.get(table, {})
        return [(k, v) for k, (v, e) in rows.items() if e is None or e > now]

    def count(self, table: str) -> int:
        return len(self._tables.get(table, {}))

    async def sync(self) -> None:
        await trio.lowlevel.checkpoint()
