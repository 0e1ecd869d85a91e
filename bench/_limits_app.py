"""The tasks bench/limits.py runs: the same ``add`` with no limits, and with a
per-worker and a global rate limit far above any rate it reaches."""

from __future__ import annotations

from actorctl import App

app = App("bench-limits")
app.pool("celery", concurrency=1, threads=False)


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task(rate_limit="1000000/s", global_rate_limit="1000000/s")
def add_limited(x: int, y: int) -> int:
    return x + y
