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
(``sender`` is the node's name). They are the one registry actorctl keeps
at module level, because Celery projects expect one (docs/celery.md). They live
in ``actorctl.tasks.app._signals``, which the worker sends them from; this module
only re-exports them, and nothing in actorctl imports it.
"""

from __future__ import annotations

from .tasks.app._signals import ExceptionInfo as ExceptionInfo
from .tasks.app._signals import Signal as Signal
from .tasks.app._signals import task_failure as task_failure
from .tasks.app._signals import task_postrun as task_postrun
from .tasks.app._signals import task_prerun as task_prerun
from .tasks.app._signals import task_received as task_received
from .tasks.app._signals import task_retry as task_retry
from .tasks.app._signals import task_revoked as task_revoked
from .tasks.app._signals import task_success as task_success
from .tasks.app._signals import worker_ready as worker_ready
from .tasks.app._signals import worker_shutdown as worker_shutdown

__all__ = [
    "ExceptionInfo",
    "Signal",
    "task_failure",
    "task_postrun",
    "task_prerun",
    "task_received",
    "task_retry",
    "task_revoked",
    "task_success",
    "worker_ready",
    "worker_shutdown",
]
