"""What the task layer adds to the Controller's web page (the runtime's
:class:`~actorctl.cluster.AppPage`): Flower's views of a cluster's tasks.

The page asks every node's ``_tasks`` actor (``worker/_control.py``) each
second while it is open:

- ``recent``: the runs that ended there since the last ask (name, arguments,
  state, result or error, run time, worker, retries); the Controller keeps the
  last 1,000 of every node together (``[cluster] web_window``), and lists
  them apart by state (the failed, the retried);
- ``overview``: its workers (pool, budget, active and reserved), the limits of
  its tasks (rate limits, suspended), the tasks running and waiting there,
  and on the services node the delayed tasks and the periodic schedules.

Counts and failure rates per task over time come from the task counters in
the nodes' metrics, which the Controller samples anyway. ``_page.js`` draws
all of it.
"""

from __future__ import annotations

from importlib import resources

from ..cluster import AppPage, PageFeed
from ..cluster.config._app import WINDOW
from .protocol._protocol import CONTROL

__all__ = ["task_page"]


def task_page() -> AppPage:
    """The task layer's sections of the web page, and what they ask."""
    script = resources.files(__package__).joinpath("_page.js").read_text(encoding="utf-8")
    return AppPage(
        feeds=(
            PageFeed("tasks", CONTROL, "recent", window=WINDOW, split="state", order="finished"),
            PageFeed("overview", CONTROL, "overview"),
        ),
        script=script,
    )
