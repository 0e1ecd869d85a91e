"""The task app of tests/tasks/test_breaker_queue.py: one pool that runs one task at
a time, so that a worker holds many more tasks than it runs, behind a breaker
on a downstream the test turns off and on.

Every call of the downstream is recorded (task key → the nodes it ran on).
"""

from __future__ import annotations

import trio

from actorctl import App, poisonous
from actorctl.tasks.client._client import current_client

app = App("q")
app.pool("celery", concurrency=1)
app.breaker("downstream", failures=3, reset=1.0)

#: Task key → the nodes its runs called the downstream from, in order.
CALLS: dict[str, list[str]] = {}
#: Whether the downstream is down.
DOWN = [False]
#: The task with key "first" waits for this event, if set, before its call
#: (so that the tasks sent after it queue up behind it).
GATE: list[trio.Event] = []


# No retries: a failure is the answer (the breaker is what is tested).
@app.task(breaker="downstream", max_retries=0)
async def fetch(key: str) -> str:
    if key == "first" and GATE:
        await GATE[0].wait()
    node = current_client("fetch").outbox.name  # type: ignore[attr-defined]
    CALLS.setdefault(key, []).append(node)
    if DOWN[0]:
        raise ConnectionError(f"the downstream of {node} is down")
    return node


@app.task(breaker="downstream")
async def misuse(kind: str) -> str:
    """Fails in ways that say nothing of the downstream: a programming error
    (never retried), or poison."""
    CALLS.setdefault(f"misuse-{kind}", []).append(kind)
    if kind == "poison":
        with poisonous():
            raise ValueError("a record that does not parse")
    return "x".join(1, 2)  # type: ignore[call-arg, arg-type]  # a TypeError
