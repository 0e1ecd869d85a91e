"""A small shop app, and the app docs/testing.md tests with ``actorctl.testing``.

Two pools, so that a chain crosses nodes when a cluster hosts them on
different ones: ``orders`` prices orders, ``mail`` writes receipts. Its tests
(tests/testing/test_testing_kit.py) run the same assertions twice: in an in-process
cluster of real nodes, and in eager mode, with no cluster at all.

``COUNTS`` counts the runs of ``record`` in this process (the in-process
cluster's nodes run here too): the tests check it after ``wait_idle()``.
"""

from __future__ import annotations

import collections

import trio

from actorctl import App, RetryPolicy

#: Short backoff, so that retries on a real cluster take milliseconds.
POLICY = RetryPolicy(max_retries=3, interval_start=0.01, interval_step=0.01, interval_max=0.05)

app = App("shop", default_pool="orders", retry_policy=POLICY)
app.pool("orders", concurrency=4)
app.pool("mail", concurrency=2)

#: Runs of ``record`` in this process, by label.
COUNTS: collections.Counter[str] = collections.Counter()


class PaymentDown(ConnectionError):
    """The payment service did not answer (retried, being a ConnectionError)."""


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task
def price(order: dict[str, int]) -> int:
    """The order's total in cents: each item's quantity at 250 cents."""
    return sum(order.values()) * 250


@app.task
def total(prices: list[int]) -> int:
    """A chord's body: the sum of its header's prices."""
    return sum(prices)


@app.task(pool="mail")
def receipt(total: int, email: str) -> str:
    return f"{email}: {total / 100:.2f} EUR"


@app.task
async def record(label: str) -> str:
    await trio.lowlevel.checkpoint()
    COUNTS[label] += 1
    return label


@app.task(bind=True)
def charge(ctx: object, cents: int, fails: int) -> str:
    """Fails ``fails`` times with ``PaymentDown`` (retried), then charges."""
    retries: int = ctx.retries  # type: ignore[attr-defined]
    if retries < fails:
        raise PaymentDown(f"payment service down (attempt {retries + 1})")
    return f"charged {cents} after {retries} retries"


@app.task
def divide(a: int, b: int) -> float:
    return a / b


@app.task
async def later(seconds: float) -> float:
    """Waits ``seconds`` of trio's clock (instant under the autojump clock)."""
    await trio.sleep(seconds)
    return seconds


@app.task(pool="mail")
def notify_failure(task_id: str, error: dict[str, str]) -> str:
    COUNTS[f"failed:{error['type']}"] += 1
    return task_id
