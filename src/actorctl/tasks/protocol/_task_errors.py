"""The exceptions ``AsyncResult.get()`` raises for a task that failed: made once,
by name, from the built-in exception types (never imported or unpickled)."""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from types import MappingProxyType

from ..._errors import TaskFailed

__all__ = ["task_error"]


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
