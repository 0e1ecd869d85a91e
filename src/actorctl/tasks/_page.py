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
the nodes' metrics (``TASK_COUNTERS``), which the Controller samples anyway.
``_page.js`` draws all of it, and the forms of the page's two task actions,
which the Controller broadcasts to every node's ``_tasks`` (docs/operations.md):

- ``revoke`` (``{"task_id": ID}``): ``revoke([ID])``;
- ``suspend`` (``{"task": NAME, "suspended": true}``): ``limit(NAME,
  "suspended", true)``; ``false`` resumes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from typing import Any, Final

from ..cluster import AppPage, PageAction, PageCounters, PageFeed
from ..cluster.config._app import WINDOW
from .protocol._protocol import CONTROL
from .worker._inspect import TASK_COUNTERS

__all__ = ["task_page"]

#: The outcomes of a task's runs the page plots per task (metric suffixes of TASK_COUNTERS).
PLOTTED: Final = ("succeeded", "failed", "retried")


def _revoke(body: Mapping[str, Any]) -> list[Any]:
    return [[str(body["task_id"])]]


def _suspend(body: Mapping[str, Any]) -> list[Any]:
    return [str(body["task"]), "suspended", bool(body.get("suspended", True))]


def task_page() -> AppPage:
    """The task layer's sections of the web page, and what they ask."""
    script = resources.files(__package__).joinpath("_page.js").read_text(encoding="utf-8")
    return AppPage(
        feeds=(
            PageFeed("tasks", CONTROL, "recent", window=WINDOW, split="state", order="finished"),
            PageFeed("overview", CONTROL, "overview"),
        ),
        script=script,
        actions=(
            PageAction("revoke", CONTROL, "revoke", _revoke),
            PageAction("suspend", CONTROL, "limit", _suspend),
        ),
        counters=PageCounters(TASK_COUNTERS, PLOTTED),
    )
