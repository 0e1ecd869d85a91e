"""Celery's ``examples/periodic-tasks``, on actorctl.

Celery's example defines a task and adds a periodic task to it from an
``on_after_configure`` receiver, and its user guide adds ``beat_schedule``
entries with a ``timedelta`` and a ``crontab``; ``celery beat`` then sends
them. Here the same code runs as it is written, less the broker: the beat is
an actor on the services node, started with the cluster::

    # cluster.toml: a services node and a worker node that host this app
    # [[node]]  name = "services"  actors = "examples.periodic_tasks:app"  services = true
    # [[node]]  name = "worker"    actors = "examples.periodic_tasks:app"  pools = ["celery"]
    $ actorctl cluster up cluster.toml
    $ actorctl schedule list cluster.toml

``app.start()`` (Celery's ``python myapp.py beat``) says the same: it is
refused, naming ``actorctl cluster up``. tests/tasks/test_celery_periodic.py runs
this app on a cluster of real nodes under trio's autojump clock and counts
every firing.
"""

from __future__ import annotations

import datetime
from typing import Any

from actorctl import App, crontab

app = App("myapp")
app.conf.timezone = "UTC"


@app.task
def say(what: str) -> str:
    return what


@app.on_after_configure.connect
def setup_periodic_tasks(sender: App, **kwargs: Any) -> None:
    # Calls say('hello') every 10 seconds.
    sender.add_periodic_task(10.0, say.s("hello"), name="add every 10")
    # Calls say('world') every 30 seconds; each firing expires after 10.
    sender.add_periodic_task(30.0, say.s("world"), expires=10)
    # Executes every Monday morning at 7:30 a.m.
    sender.add_periodic_task(crontab(hour=7, minute=30, day_of_week=1), say.s("Happy Mondays!"))


app.conf.beat_schedule = {
    "say-every-minute": {
        "task": "myapp.say",
        "schedule": datetime.timedelta(minutes=1),
        "args": ("tick",),
    },
    "say-at-the-quarters": {
        "task": "myapp.say",
        "schedule": crontab(minute="*/15"),
        "args": ("quarter",),
    },
}
