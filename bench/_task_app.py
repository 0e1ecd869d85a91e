"""The task the task benchmark runs (the same ``add`` as Celery's reference)."""

from __future__ import annotations

import os

from actorctl import App

app = App("bench")
app.pool("celery", concurrency=1, threads=False)


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task
async def aadd(x: int, y: int) -> int:
    return x + y


if os.environ.get("ACTORCTL_TASK_COST"):  # bench/task_cost.py samples this worker
    from bench._stages import install_worker_probe

    install_worker_probe(os.environ["ACTORCTL_TASK_COST"])
