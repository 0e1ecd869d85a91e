"""The ``tasks`` app of docs/scheduling.md ("Rate limits", "Concurrency limits,
tokens, suspend and resume"), run by tasks.toml."""

from __future__ import annotations

from actorctl import App

__all__ = ["app", "call_partner_api", "rebuild_index", "send_welcome_email", "sync_customer"]

app = App("tasks")


@app.task(rate_limit="10/s")  # on each worker, as in Celery
def call_partner_api(order_id: int) -> int:
    return order_id


@app.task(global_rate_limit="200/m")  # across every worker of the pool
def send_welcome_email(user_id: int) -> int:
    return user_id


@app.task(concurrency=2)  # at most 2 of it running on each worker
def rebuild_index() -> None:
    """Rebuild the search index."""


@app.task(  # concurrency tokens: at most 3 running per customer, on each worker
    concurrency_key=lambda customer_id, **_: customer_id,
    concurrency_per_key=3,
)
def sync_customer(customer_id: int, since: str) -> None:
    """Sync one customer's records changed since ``since``."""
