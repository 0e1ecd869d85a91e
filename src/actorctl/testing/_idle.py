"""What "idle" means for an in-process cluster, and waiting for it.

A cluster is idle when, at one instant, nothing holds a task: every actor's
mailbox has settled every message it took (a worker runs nothing and queues
nothing), every node's backlog is empty (no follow-up or routed task waits for
its next hop), no pool's router holds a task back, the scheduler holds no
delayed task, and the caller's client has sent everything handed to it and
has every result it waits for.

The runtime settles a message only once what follows it is accepted or
stored by its next hop (acks-late, docs/guarantees.md), so a task is always
counted by one of these. Each has a ``wait_*`` method that returns when its
own count is zero: :func:`wait_idle` waits on the first one that is busy, then
looks at them all again, until all are zero in one look (no polling, no
sleep). Then it waits until every trio task is blocked (bytes written to a
loopback socket are read before that) and looks once more: a pre-settled
message (``acks_late=False``) is counted by nobody while it is on the wire.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable

import trio
import trio.testing

from .._errors import ActorctlError
from ..cluster import Node, NodeOutbox
from ..tasks import PoolRouter, ResultRegistry, Scheduler, TaskClient

__all__ = ["busy_parts", "wait_idle"]

#: A busy part: what it is (for the error), and how to wait until it is not.
Busy = tuple[str, Callable[[], Awaitable[None]]]


def busy_parts(nodes: Iterable[Node], client: TaskClient | None) -> list[Busy]:
    """Every part of the cluster that holds a task now, with its wait."""
    found: list[Busy] = []
    for node in nodes:
        for name, cell in node.cells.items():
            depth = cell.mailbox.statistics().depth
            if depth:
                found.append((f"{node.name}/{name}: {depth} unsettled", cell.mailbox.wait_settled))
            actor = cell.actor
            if isinstance(actor, PoolRouter) and actor.held:
                found.append((f"{node.name}/{name}: {actor.held} held", actor.wait_released))
            if isinstance(actor, Scheduler) and actor.holding:
                found.append((f"{node.name}/{name}: {actor.holding} delayed", actor.wait_empty))
        backlog = node.outbox.backlog
        if len(backlog):
            found.append((f"{node.name}: backlog of {len(backlog)}", backlog.wait_empty))
    if client is not None:
        found.extend(_client_parts(client))
    return found


def _client_parts(client: TaskClient) -> list[Busy]:
    found: list[Busy] = []
    backlog = client.outbox.backlog if isinstance(client.outbox, NodeOutbox) else None
    if backlog is not None and len(backlog):
        found.append((f"client: backlog of {len(backlog)}", backlog.wait_empty))
    if not client.drained:
        found.append(("client: sends handed over by plain code", client.wait_drained))
    results: ResultRegistry | None = client.results
    if results is not None and len(results):
        found.append((f"client: {len(results)} results awaited", results.wait_empty))
    return found


async def wait_idle(
    nodes: Callable[[], Iterable[Node]], client: TaskClient | None, timeout: float | None
) -> None:
    """Wait until nothing in ``nodes`` (and ``client``) holds a task.

    Raises:
        ActorctlError: not idle within ``timeout`` seconds (of trio's clock),
            naming what was still busy.
    """
    busy: list[Busy] = []
    with trio.move_on_after(math.inf if timeout is None else timeout):
        while True:
            busy = busy_parts(nodes(), client)
            if busy:
                await busy[0][1]()
                continue
            # Nothing counted: let what is on the loopback wire land, and look again.
            await trio.testing.wait_all_tasks_blocked()
            busy = busy_parts(nodes(), client)
            if not busy:
                return
    raise ActorctlError(
        f"the cluster was not idle within {timeout:g} s: still busy: "
        + "; ".join(what for what, _ in busy)
        + " (a suspended task, or one that never ends, keeps it busy; give a longer timeout)"
    )
