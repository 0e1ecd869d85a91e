"""The Celery app for the Celery reference figures (see ``bench/_celery.py``).

One app with Redis as both broker and result backend, at the URL in the environment variable
``BENCH_REDIS_URL`` (e.g. ``redis://127.0.0.1:PORT/0``), and one task, ``add(x, y)``. The same
module is loaded by the worker (``celery -A bench._celery_tasks worker``) and by the client that
drives the measurements, so both agree on the task's name and settings.

The settings are Celery's defaults apart from JSON only (no pickle) and no events; the worker
prefetch multiplier keeps its default.
"""

from __future__ import annotations

import os

from celery import Celery

# No default: falling back to a Redis on the standard port could silently measure (and fill)
# some other server than the one bench/_celery.py started.
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "")
if not REDIS_URL:
    raise RuntimeError("set BENCH_REDIS_URL, e.g. redis://127.0.0.1:6379/0")

app = Celery("bench", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
    worker_send_task_events=False,
    task_send_sent_event=False,
)


@app.task
def add(x: int, y: int) -> int:
    return x + y
