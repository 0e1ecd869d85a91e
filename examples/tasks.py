"""Celery's first example, on actorctl.

Celery's tutorial starts with::

    app = Celery('tasks', broker='pyamqp://guest@localhost//')

    @app.task
    def add(x, y):
        return x + y

    >>> add.delay(1, 2).get()
    3

Here the app is ``actorctl.App`` and, instead of a broker, ``app.connect`` takes
the cluster's file: the task goes straight to a worker actor over an AMQP 1.0
link (mutual TLS, signed), and its result comes back on the same connection.
Run it with ``python -m examples.tasks``: it starts the cluster that
examples/tasks.toml describes (one worker node hosting the ``celery`` pool),
calls the task as Celery's tutorial does, and stops the cluster.
"""

from __future__ import annotations

from pathlib import Path

from actorctl import App

app = App("tasks")


@app.task
def add(x: int, y: int) -> int:
    return x + y


def main() -> None:
    from examples._cluster import running_cluster

    with running_cluster(Path(__file__).with_suffix(".toml")) as cluster, app.connect(cluster):
        result = add.delay(1, 2)
        value = result.get(timeout=10)
        assert value == 3
        print(f"add.delay(1, 2).get() == {value}  ({result.state}, task {result.id})")
        results = [add.delay(i, i) for i in range(100)]
        total = sum(r.get(timeout=10) for r in results)
        print(f"100 more tasks in flight at once: their results sum to {total}")
    print("cluster stopped")


if __name__ == "__main__":
    main()
