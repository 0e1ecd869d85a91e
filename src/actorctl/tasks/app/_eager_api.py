"""What the task and canvas code needs of eager mode (``_eager.py`` runs it):
an interface, so that neither imports the runner (which imports them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..client._results import AsyncResult

__all__ = ["EagerRunner", "eager_of"]


class EagerRunner(Protocol):
    """Runs tasks inline in the caller instead of sending them: every task of
    an app holds its app's runner, which is on while the app's
    ``task_always_eager`` setting is (``App(..., eager=True)``)."""

    @property
    def active(self) -> bool: ...

    def apply(
        self, task: Any, args: Sequence[Any], kwargs: Mapping[str, Any] | None, options: Any
    ) -> AsyncResult:
        """Run ``task`` now, from plain code; its final result."""
        ...

    async def aapply(
        self, task: Any, args: Sequence[Any], kwargs: Mapping[str, Any] | None, options: Any
    ) -> AsyncResult:
        """Run ``task`` now, in the caller's trio run; its final result."""
        ...

    def chord_values(
        self, header: Sequence[AsyncResult], body: str
    ) -> tuple[str, list[Any] | AsyncResult]:
        """The chord's id and its body's first argument, or its failed result."""
        ...


def eager_of(task: object) -> EagerRunner | None:
    """The eager runner of ``task``'s app while it is on, else None."""
    runner: EagerRunner | None = getattr(task, "eager", None)
    return runner if runner is not None and runner.active else None
