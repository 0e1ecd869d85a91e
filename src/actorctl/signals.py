"""Celery's signals, with Celery's names and arguments: ``celery.signals`` is
``actorctl.signals``.

Connect a receiver as in Celery; it is called with ``sender`` and the
arguments listed, so take ``**kwargs`` for those you do not use::

    from actorctl import signals

    @signals.task_failure.connect
    def report(sender=None, task_id=None, exception=None, **kwargs):
        ...

Task signals are sent on the worker's node, in its event-loop thread, around
each run of a task (``sender`` is the ``Task``); ``worker_ready`` when a node's
first task worker has started and ``worker_shutdown`` when its last one stops
(``sender`` is the node's name). This module is the one registry actorctl
keeps at module level, because Celery projects expect one (docs/celery.md).
"""

from __future__ import annotations

from .tasks._signals import ExceptionInfo as ExceptionInfo
from .tasks._signals import Signal as Signal

__all__ = [
    "ExceptionInfo",
    "Signal",
    "task_failure",
    "task_postrun",
    "task_prerun",
    "task_retry",
    "task_revoked",
    "task_success",
    "worker_ready",
    "worker_shutdown",
]

#: Before a task runs.
task_prerun = Signal("task_prerun", ["task_id", "task", "args", "kwargs"])
#: After it ran, whatever the outcome; ``state`` is SUCCESS, FAILURE or RETRY.
task_postrun = Signal("task_postrun", ["task_id", "task", "args", "kwargs", "retval", "state"])
#: It returned ``result``.
task_success = Signal("task_success", ["result"])
#: It raised (or ran past its hard time limit, or gave up retrying).
task_failure = Signal(
    "task_failure", ["task_id", "exception", "args", "kwargs", "traceback", "einfo"]
)
#: It will run again: ``request`` is its TaskContext, ``reason`` the exception.
task_retry = Signal("task_retry", ["request", "reason", "einfo"])
#: It was revoked or expired before it ran, or terminated while it ran.
task_revoked = Signal("task_revoked", ["request", "terminated", "signum", "expired"])
#: The node's first task worker has started (``sender``: the node's name).
worker_ready = Signal("worker_ready", [])
#: The node's last task worker has stopped (``sender``: the node's name).
worker_shutdown = Signal("worker_shutdown", [])
