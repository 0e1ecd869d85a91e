"""Signals as Celery has them: receivers connected to a named signal, called
with Celery's argument names when it is sent.

This module holds the signals themselves (a plain module-level registry of
receivers, the one global that Celery projects expect) and what they are made
of; the worker sends them from here. ``actorctl.signals`` only re-exports them
for users, and nothing in actorctl imports it (so no import cycle). The worker
first checks that a signal has receivers, so a signal nobody connected to costs
one attribute test per task.
"""

from __future__ import annotations

import traceback as traceback_module
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, final, overload

import attrs

from ..._log import log

__all__ = [
    "ExceptionInfo",
    "Signal",
    "format_traceback",
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

Receiver = Callable[..., Any]


def format_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` as Python prints it: the frames it was raised
    through, where it was raised (a worker's, for a task that failed)."""
    return "".join(traceback_module.format_exception(type(exc), exc, exc.__traceback__))


@final
@attrs.frozen
class ExceptionInfo:
    """Celery's ``einfo``: an exception with its type, traceback and its text."""

    exception: BaseException
    type: type[BaseException]
    tb: TracebackType | None
    traceback: str

    @classmethod
    def of(cls, exc: BaseException) -> ExceptionInfo:
        return cls(exc, type(exc), exc.__traceback__, format_traceback(exc))


@final
class Signal:
    """A named signal: ``@signal.connect`` adds a receiver, ``send`` calls them.

    Receivers are called as ``receiver(signal=..., sender=..., **arguments)``
    with the arguments Celery gives that signal (take ``**kwargs`` for the
    rest). They run in the task's node's event-loop thread, one after another:
    keep them short, and never block in them. A receiver that raises is logged
    (``actorctl:signal:receiver-failed``) and the others still run: a signal
    never fails the task.

    Args:
        name: the signal's name (Celery's).
        arguments: the names of the arguments it is sent with, besides ``sender``.
    """

    def __init__(self, name: str, arguments: Sequence[str]) -> None:
        self.name = name
        self.arguments = tuple(arguments)
        #: (receiver, sender it is for or None, dispatch uid); a list so that
        #: its truth is the test that no receiver is connected.
        self.receivers: list[tuple[Receiver, object, object]] = []

    @overload
    def connect(
        self,
        receiver: Receiver,
        /,
        *,
        sender: object = None,
        dispatch_uid: object = None,
        weak: bool = False,
    ) -> Receiver: ...

    @overload
    def connect(
        self,
        receiver: None = None,
        /,
        *,
        sender: object = None,
        dispatch_uid: object = None,
        weak: bool = False,
    ) -> Callable[[Receiver], Receiver]: ...

    def connect(
        self,
        receiver: Receiver | None = None,
        /,
        *,
        sender: object = None,
        dispatch_uid: object = None,
        weak: bool = False,
    ) -> Any:
        """Connect ``receiver`` (usable as ``@signal.connect`` and
        ``@signal.connect(sender=task)``). ``sender``: only when this task (or
        task name) sends it. ``dispatch_uid``: connected once per uid. Receivers
        are held strongly (``weak`` is accepted and ignored)."""

        def add(fn: Receiver) -> Receiver:
            uid = dispatch_uid if dispatch_uid is not None else fn
            if not any(known == uid for _, _, known in self.receivers):
                self.receivers.append((fn, sender, uid))
            return fn

        return add(receiver) if receiver is not None else add

    def disconnect(
        self,
        receiver: Receiver | None = None,
        *,
        sender: object = None,
        dispatch_uid: object = None,
    ) -> bool:
        """Remove a receiver (by itself or its ``dispatch_uid``); whether it was there."""
        uid = dispatch_uid if dispatch_uid is not None else receiver
        before = len(self.receivers)
        self.receivers[:] = [r for r in self.receivers if r[2] != uid]
        return len(self.receivers) != before

    def send(self, sender: object, **arguments: Any) -> list[tuple[Receiver, Any]]:
        """Call every receiver for ``sender``; their answers, in order (a
        receiver that raised answers its exception)."""
        answers: list[tuple[Receiver, Any]] = []
        for receiver, wanted, _ in list(self.receivers):
            if wanted is not None and not _matches(wanted, sender):
                continue
            try:
                answers.append((receiver, receiver(signal=self, sender=sender, **arguments)))
            except Exception as exc:
                log(
                    "actorctl:signal:receiver-failed",
                    signal=self.name,
                    receiver=getattr(receiver, "__qualname__", repr(receiver)),
                    error_type=type(exc).__name__,
                    error=str(exc),
                )
                answers.append((receiver, exc))
        return answers

    send_robust = send

    def __repr__(self) -> str:
        return f"<Signal {self.name}: {len(self.receivers)} receiver(s)>"


def _matches(wanted: object, sender: object) -> bool:
    """A receiver for ``wanted`` (a task, or its name) takes ``sender``."""
    return wanted is sender or wanted == getattr(sender, "name", sender)


#: Before a task runs.
#: A worker took it (reserved: it may wait for a run slot before it runs);
#: ``request`` is its TaskContext. Sent before the worker checks a revoke or
#: an expiry, as Celery's is.
task_received = Signal("task_received", ["request"])
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
