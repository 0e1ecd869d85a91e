"""The task app of tests/supervision/test_breakers.py: one task behind a named breaker,
whose downstream is down on the nodes the test names, hosted in-process.

Every run is recorded (task key → the nodes it ran on), so the test counts
what was lost and what ran twice.
"""

from __future__ import annotations

from actorctl import App, Health
from actorctl.tasks.client._client import current_client

app = App("b")
app.pool("celery", concurrency=2)
app.breaker("downstream", failures=3, reset=3.0)

#: Task key → the nodes it ran on, in order.
RUNS: dict[str, list[str]] = {}
#: Nodes whose downstream is down: a run there fails.
DOWN: set[str] = set()


# No retries: a failure here is the answer, so the test sees which runs failed
# (the breaker, not the retry policy, is what it tests).
@app.task(breaker="downstream", max_retries=0)
async def charge(key: str) -> str:
    node = current_client("charge").outbox.name  # type: ignore[attr-defined]
    RUNS.setdefault(key, []).append(node)
    if node in DOWN:
        raise ConnectionError(f"the downstream of {node} is down")
    return node


#: What the app's health check of the downstream reports (on every worker node).
HEALTH = [Health.HEALTHY]


@app.health_check(interval=0.05, breakers=["downstream"])
def downstream() -> Health:
    return HEALTH[0]
