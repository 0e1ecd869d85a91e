"""The ``reports`` app of docs/scheduling.md ("Periodic tasks"): periodic tasks
declared in code; reports.toml declares two more in ``[[periodic]]`` tables."""

from __future__ import annotations

from datetime import timedelta

from actorctl import App

__all__ = ["app", "cleanup", "digest", "ping", "refresh"]

app = App("reports")
app.pool("maintenance")  # where reports.toml's nightly-cleanup sends its firings


@app.periodic(cron="*/5 * * * *", tz="Europe/Paris", kwargs={"scope": "eu"})
def refresh(scope: str) -> None:  # a plain function becomes a task
    """Refresh the reports of one scope."""


@app.periodic(every=timedelta(hours=1), catch_up=False, name="hourly-digest")
@app.task(pool="mail")  # or decorate a task declared already
def digest() -> None:
    """Mail the hour's digest."""


app.add_periodic(refresh, every=30, args=(), kwargs={"scope": "us"}, name="refresh-us")


@app.task
def cleanup(days: int, dry_run: bool = True) -> int:
    """Delete what is older than ``days`` (the nightly-cleanup schedule); how many."""
    return 0 if dry_run else days


@app.task
def ping() -> str:
    """The heartbeat schedule's task."""
    return "pong"
