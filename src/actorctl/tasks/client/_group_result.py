"""A group's results: what ``group(...).apply_async()`` returns.

One :class:`~._results.AsyncResult` per task of the group, in the order of its
tasks; waiting on the group waits on each in turn, within one deadline for all.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from typing import Any, final

import trio

from ..._errors import AskTimeout
from ._results import AsyncResult

__all__ = ["GroupResult"]


@final
class GroupResult(Sequence[AsyncResult]):
    """The results of a group, in the order of its tasks."""

    def __init__(self, group_id: str, results: Sequence[AsyncResult]) -> None:
        self.id = group_id
        self.results = list(results)

    def __getitem__(self, index: Any) -> Any:
        return self.results[index]

    def __len__(self) -> int:
        return len(self.results)

    def __iter__(self) -> Iterator[AsyncResult]:
        return iter(self.results)

    def ready(self) -> bool:
        return all(r.ready() for r in self.results)

    def successful(self) -> bool:
        return all(r.successful() for r in self.results)

    def completed_count(self) -> int:
        return sum(1 for r in self.results if r.successful())

    def get(self, timeout: float | None = None, *, propagate: bool = True) -> list[Any]:
        """Every task's value, in order; raises the first error (see
        :meth:`AsyncResult.get`). ``timeout`` covers the whole group."""
        deadline = None if timeout is None else time.monotonic() + timeout
        values = []
        for result in self.results:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            values.append(result.get(left, propagate=propagate))
        return values

    async def aget(self, timeout: float | None = None, *, propagate: bool = True) -> list[Any]:
        """:meth:`get` for trio code."""
        try:
            with trio.fail_after(math.inf if timeout is None else timeout):
                return [await r.aget(propagate=propagate) for r in self.results]
        except trio.TooSlowError:
            raise AskTimeout(f"group {self.id} not ready within {timeout:g} s") from None

    def revoke(self, *, terminate: bool = False) -> None:
        for result in self.results:
            result.revoke(terminate=terminate)

    def __repr__(self) -> str:
        return f"<GroupResult {self.id} {len(self.results)} tasks>"
