"""The ``shop`` app: two tasks that end as dead letters (docs/fault-tolerance.md)."""

from __future__ import annotations

from actorctl import App, RetryPolicy, poisonous

__all__ = ["app", "charge", "refund"]

# Short delays, so that the third retry has failed within a second or so.
app = App("shop", retry_policy=RetryPolicy(max_retries=3, interval_start=0.1, interval_max=0.4))


@app.task
def charge(order_id: int) -> str:
    """Charge an order: the payments service refuses every connection."""
    raise ConnectionError(f"payments service refused order {order_id}")


@app.task
def refund(order_id: int) -> None:
    """Refund an order: one that was never charged is poison, never retried."""
    with poisonous():
        raise ValueError(f"order {order_id} was never charged")
