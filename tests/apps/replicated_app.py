"""The task app of tests/hosts/test_replicated_services.py: one pool, one task that
records each run (in the process that runs it: the test's own worker node)."""

from __future__ import annotations

from typing import Any

import trio

from actorctl import App, TaskContext

app = App("replicated")
app.pool("celery", concurrency=8)
#: The task id of each run of ``job``, in order.
RAN: list[str] = []
#: Who waits for which task ids to have run (:func:`ran_all`).
_WAITING: list[tuple[frozenset[str], trio.Event]] = []


def _ran(task_id: str) -> str:
    RAN.append(task_id)
    for ids, event in _WAITING:
        if ids <= set(RAN):
            event.set()
    return task_id


@app.task(bind=True)
async def job(ctx: TaskContext, *args: Any) -> str:
    """Records its run; a chord's body gets its header's values as ``args``."""
    return _ran(ctx.id)


@app.task(bind=True, global_rate_limit="1/s")
async def paced(ctx: TaskContext) -> str:
    """Records its run; paced by the pool's router: what exceeds its rate
    waits there (held, in the services node's store)."""
    return _ran(ctx.id)


async def ran_all(ids: set[str]) -> None:
    """Wait until every task of ``ids`` has run (here) at least once."""
    if not ids <= set(RAN):
        event = trio.Event()
        _WAITING.append((frozenset(ids), event))
        await event.wait()
