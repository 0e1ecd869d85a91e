"""The results a caller waits for: where the documents its tasks send back go.

A task's result comes back to its caller as a document on the caller's own
reply link (docs/protocol.md §14.4), with the task id as its correlation id.
The caller's :class:`ResultRegistry` registers each id with the caller's outbox
before the task is sent; the outbox hands each document with an id it expects
to the registry, which hands it to the waiting handle (``_results.py``'s
:class:`AsyncResult`), and lets the id go once the result is final.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, final

import trio

from ...actors import Outbox
from ...mailbox import Envelope
from ..protocol._protocol import FAILURE, H_RETRIES, H_STATE, READY_STATES, SUCCESS
from ..protocol._task_errors import TaskError
from ._results import AsyncResult, SharedWaits

__all__ = ["ResultRegistry"]


@final
class ResultRegistry:
    """The results a caller waits for, by task id.

    It registers each id with the caller's outbox (``expect``) before the task
    is sent, so that the documents that come back on the caller's reply links
    with that id reach it, and unregisters the id (``unexpect``) as soon as the
    result is final, forgotten, or the caller disconnects: an id the registry
    no longer waits for holds nothing in the outbox.

    Args:
        outbox: the caller node's outbox.
    """

    def __init__(self, outbox: Outbox) -> None:
        self._outbox = outbox
        #: What the results it hands documents to share (``AsyncResult``'s ``shared``).
        self.shared = SharedWaits()
        self._waiting: dict[str, AsyncResult] = {}
        self._emptied = trio.lowlevel.ParkingLot()  # wait_empty's

    def expect(self, result: AsyncResult) -> None:
        """Wait for ``result``'s documents from now on."""
        result.mark_delivered()
        self._waiting[result.id] = result
        self._outbox.expect(result.id, self._take)

    def forget(self, task_id: str) -> None:
        """Stop waiting for ``task_id`` (its later documents are logged as late)."""
        if self._waiting.pop(task_id, None) is not None:
            self._outbox.unexpect(task_id)
            if not self._waiting and self._emptied:  # someone waits in wait_empty
                self._emptied.unpark_all()

    async def wait_empty(self) -> None:
        """Wait until every result it waits for is final (or forgotten): no
        task its caller sent is in flight (a test's ``wait_idle``)."""
        while self._waiting:
            await self._emptied.park()

    def __len__(self) -> int:
        return len(self._waiting)

    def fail_all(self, reason: str) -> None:
        """Fail every result still waited for (the caller is going away)."""
        waiting, self._waiting = self._waiting, {}
        self._emptied.unpark_all()
        for result in waiting.values():
            self._outbox.unexpect(result.id)
            result.update(FAILURE, TaskError("Disconnected", reason).wire())

    def deliver(self, task_id: str, state: str, body: Any, headers: Mapping[str, Any]) -> bool:
        """Hand a state document to its result; False if nobody waits for it."""
        result = self._waiting.get(task_id)
        if result is None:
            return False
        retries = headers.get(H_RETRIES, 0)
        result.update(state, body, retries if isinstance(retries, int) else 0)
        if state in READY_STATES:  # final now (a result final before is not waited for)
            self.forget(task_id)
        return True

    def _take(self, envelope: Envelope) -> None:
        """A document the outbox took for a waited-for id: what :meth:`deliver`
        does, written flat (it runs for every reply)."""
        task_id = str(envelope.correlation_id)
        headers = envelope.headers
        state = str(headers[H_STATE]) if H_STATE in headers else SUCCESS
        # A final document lets the id go, as forget() does: taken out at once
        # (one call: pop, not get and then pop). (get and pop, never ``in``
        # and ``[]``: plain code's thread adds ids, and may forget one.)
        final = state in READY_STATES
        result = self._waiting.pop(task_id, None) if final else self._waiting.get(task_id)
        if result is None:
            return
        # (The document's own headers: a membership test and an index, no call.)
        retries = headers[H_RETRIES] if H_RETRIES in headers else 0  # noqa: SIM401
        if type(retries) is not int and not isinstance(retries, int):
            retries = 0
        result.update(state, envelope.body, retries)
        if final:
            self._outbox.unexpect(task_id)
            if not self._waiting and self._emptied:  # someone waits in wait_empty
                self._emptied.unpark_all()
