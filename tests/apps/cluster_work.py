"""A worker for cluster tests: records every task it runs in a file of its own."""

from __future__ import annotations

import os
from pathlib import Path

import trio

from actorctl import Actor, handler


class Counter(Actor):
    """Writes each task id it runs to $COUNTER_DIR/<pid>.log, one per line."""

    concurrency = 8

    def __init__(self) -> None:
        directory = Path(os.environ.get("COUNTER_DIR", "."))
        self._file = (directory / f"{os.getpid()}.log").open("a", encoding="utf-8")

    @handler
    async def work(self, task: int) -> int:
        await trio.sleep(0.002)  # a little work, so that tasks are in flight
        self._file.write(f"{task}\n")
        self._file.flush()
        return task
