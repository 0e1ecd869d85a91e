"""The task app of tests/tasks/test_foreign_pool.py: one pool, one task."""

from __future__ import annotations

from actorctl import App

app = App("pool")
app.pool("celery", concurrency=2)


@app.task(max_retries=0)
async def add(a: int, b: int) -> int:
    return a + b
