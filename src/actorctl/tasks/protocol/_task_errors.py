"""A task's errors: what a failed task's documents say of its error
(:class:`TaskError`), why a task did not run to its end (:class:`NotRun`), and
the exceptions ``AsyncResult.get()`` raises for a task that failed: made once,
by name, from the built-in exception types (never imported or unpickled)."""

from __future__ import annotations

import builtins
import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, final

import attrs

from ..._errors import TaskFailed

__all__ = ["NotRun", "NotRunKind", "TaskError", "task_error"]


@final
@attrs.frozen
class TaskError:
    """A task's error as its FAILURE and RETRY documents, its errbacks and its
    dead letter carry it (docs/protocol.md): the name of its type, its
    message and, where the worker has one, its traceback."""

    type: str
    message: str
    traceback: str | None = None

    @classmethod
    def of(cls, error: BaseException, *, traceback: str | None = None) -> TaskError:
        """The error ``error`` is: its type's name and its message."""
        return cls(error.__class__.__name__, str(error), traceback)

    def wire(self) -> dict[str, Any]:
        """Its form in a document: ``{"type", "message"}``, and ``"traceback"``
        when it has one."""
        wire = {"type": self.type, "message": self.message}
        if self.traceback is not None:
            wire["traceback"] = self.traceback
        return wire


class NotRunKind(enum.StrEnum):
    """Why a task was not run, or not to its end."""

    REVOKED = "revoked"  #: revoked before it ran
    EXPIRED = "expired"  #: its expiry passed before it could run
    TERMINATED = "terminated"  #: revoked with terminate while it ran


@final
@attrs.frozen
class NotRun:
    """A task the worker did not run (to its end): why, and the sentence its
    REVOKED document's ``reason`` carries."""

    kind: NotRunKind
    reason: str

    def wire(self) -> dict[str, Any]:
        """Its form in a REVOKED document: ``{"reason"}``."""
        return {"reason": self.reason}


def task_error(type_name: str, message: str, task_id: str | None = None) -> TaskFailed:
    """The exception ``get()`` raises for a task that failed with ``type_name``.

    For a built-in exception type it is also an instance of that built-in
    (``except ZeroDivisionError`` works); the type is looked up by name among the
    built-ins only, never imported or unpickled.
    """
    cls = _ERROR_CLASSES.get(type_name, TaskFailed)
    error = cls.__new__(cls)
    TaskFailed.__init__(error, type_name, message, task_id)
    return error


def _error_class(name: str, builtin: type[Exception]) -> type[TaskFailed] | None:
    """A subclass of TaskFailed and of ``builtin`` called ``name``, if its
    instances can be made as ``task_error`` makes them."""
    try:
        cls: type[TaskFailed] = type(name, (TaskFailed, builtin), {"__module__": "actorctl.tasks"})
        TaskFailed.__init__(cls.__new__(cls), name, "", None)
    except TypeError:  # a built-in that takes its own arguments (UnicodeDecodeError, ...)
        return None
    return cls


#: Built-in exception name to the class ``task_error`` raises for it: made once,
#: when the module is imported, and never changed (the same name always gives the
#: same class, so ``except`` clauses match across results).
_ERROR_CLASSES: Mapping[str, type[TaskFailed]] = MappingProxyType(
    {
        name: cls
        for name, builtin in vars(builtins).items()
        if isinstance(builtin, type)
        and issubclass(builtin, Exception)
        and not issubclass(builtin, TaskFailed)
        and (cls := _error_class(name, builtin)) is not None
    }
)
