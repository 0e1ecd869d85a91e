"""What one task message asks a worker to run: its calls, and its token key.

A task message is one call of its task, or (``map``/``starmap``) one per item;
each call's arguments are bound to the task's signature (``BadArguments`` if
they do not fit). A task with concurrency tokens (``concurrency_key=``) gets
its key from the arguments of its first call.
"""

from __future__ import annotations

from typing import Any

from ...actors import BadArguments
from ..app._task import Task

__all__ = ["Call", "calls_of", "token_key"]

#: One call: its positional and keyword arguments, bound to the task's signature.
Call = tuple[list[Any], dict[str, Any]]


def calls_of(task: Task, args: list[Any], kwargs: dict[str, Any], mode: object) -> list[Call]:
    """The calls a message of ``task`` makes: one, or one per item of a map.

    Raises:
        BadArguments: they do not fit the task's signature, naming why.
    """
    if not mode:
        return [task.spec.bind(args, kwargs)]
    if len(args) != 1 or not isinstance(args[0], list):
        raise BadArguments(f"task {task.name!r}: a {mode} takes one list of items")
    items = args[0]
    if mode == "starmap":
        if not all(isinstance(item, list) for item in items):
            raise BadArguments(f"task {task.name!r}: each starmap item must be a list")
        return [task.spec.bind(item, {}) for item in items]
    return [task.spec.bind([item], {}) for item in items]


def token_key(task: Task, calls: list[Call]) -> str | None:
    """The concurrency-token key of a run (its first call's arguments given
    to ``task.concurrency_key``), or None for a task without tokens.

    Raises:
        BadArguments: the key function raised, naming what it raised.
    """
    key_of = task.concurrency_key
    if key_of is None or not calls:
        return None
    args, kwargs = calls[0]
    try:
        return str(key_of(*args, **kwargs))
    except Exception as exc:
        raise BadArguments(
            f"task {task.name!r}: its concurrency_key raised {type(exc).__name__}: {exc}"
        ) from None
