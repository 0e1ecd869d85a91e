"""The task the task benchmark runs (the same ``add`` as Celery's reference)."""

from __future__ import annotations

from actorctl import App

app = App("bench")
app.pool("celery", concurrency=1, threads=False)


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task
async def aadd(x: int, y: int) -> int:
    return x + y
