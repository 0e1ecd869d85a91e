"""Fetching a task's result by id, from any process connected to the cluster.

The node that sends a task's final document keeps it in its store for
RESULT_EXPIRES seconds (``_documents.py``): a worker node, or the services node
(the scheduler's REVOKED documents, a chord's failure): across hosts, with
several services nodes, any of them (each held the services role a while).
Each of these hosts ``_tasks``, which answers ``result(task_id)``. A :class:`ResultLookup` asks all
of them at once and takes the first final answer; ``AsyncResult`` uses it for a
result its own process is not sent (``AsyncResult(task_id)``), asking again with
a bounded backoff until its timeout.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar, final

import trio

from ...actors import ActorRef, Address
from ..protocol._protocol import CONTROL, READY_STATES, SCHEDULER
from ..protocol._state import StoredResult
from ._client import TaskClient
from ._directory import Directory

__all__ = ["ResultLookup", "result_addresses"]

T = TypeVar("T")
#: Seconds between two rounds of asking: the first, and the most.
BACKOFF_FIRST: Final = 0.05
BACKOFF_MAX: Final = 1.0
#: Seconds one round waits for a node's answer, at most.
ASK_TIMEOUT: Final = 5.0


def result_addresses(directory: Directory) -> list[Address]:
    """The ``_tasks`` actor of every node that may keep a result: the nodes that
    host workers, and the services node (where the scheduler is); across hosts,
    every services node, not only the one that holds the services role now."""
    found = {address.endpoint: address for address in directory.control_addresses()}
    if SCHEDULER in directory.addresses:
        scheduler = directory.resolve(SCHEDULER)
        found.setdefault(
            scheduler.endpoint, Address(scheduler.host, scheduler.port, CONTROL, scheduler.scheme)
        )
    if directory.elected:
        for url in directory.services.values():
            address = Address.parse(f"{url}/{CONTROL}")
            found.setdefault(address.endpoint, address)
    return [found[endpoint] for endpoint in sorted(found)]


def _final(answer: Any) -> StoredResult | None:
    """``answer`` if it is a final ``[state, body, headers]``, else None."""
    if (
        isinstance(answer, list)
        and len(answer) == 3
        and answer[0] in READY_STATES
        and isinstance(answer[2], dict)
    ):
        return answer
    return None


@final
class ResultLookup:
    """Asks the cluster's ``_tasks`` actors for kept results, through ``client``
    (in the client's trio run: :meth:`run_blocking` gets there from plain code).
    """

    def __init__(self, client: TaskClient) -> None:
        self.client = client

    async def fetch(self, task_id: str, timeout: float = ASK_TIMEOUT) -> StoredResult | None:
        """One round: ask every node at once; the first final answer, or None
        once each has answered (or failed to within ``timeout``) without one."""
        found: list[StoredResult] = []
        outbox = self.client.outbox

        async def ask(address: Address, cancel: trio.CancelScope) -> None:
            try:
                answer = await ActorRef(address, outbox, timeout=timeout).ask("result", task_id)
            except Exception:  # a node down or without _tasks: the others may have it
                return
            result = _final(answer)
            if result is not None:
                found.append(result)
                cancel.cancel(reason="found")

        with trio.move_on_after(timeout):
            async with trio.open_nursery() as nursery:
                for address in result_addresses(self.client.directory):
                    nursery.start_soon(ask, address, nursery.cancel_scope)
        return found[0] if found else None

    async def wait(self, task_id: str, timeout: float | None) -> StoredResult | None:
        """Ask in rounds (BACKOFF_FIRST apart, doubling to BACKOFF_MAX) until a
        node has the final result, or ``timeout`` seconds passed (None)."""
        delay = BACKOFF_FIRST
        with trio.move_on_after(math.inf if timeout is None else timeout):
            while True:
                found = await self.fetch(task_id)
                if found is not None:
                    return found
                await trio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX)
        return None

    def run_blocking(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``fn(*args)`` in the client's trio run, from plain code."""
        return self.client.wait_in_client_thread(fn, *args)
