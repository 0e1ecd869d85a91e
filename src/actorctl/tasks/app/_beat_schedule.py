"""Celery's periodic habits, as the app's periodic tasks (``app.add_periodic``).

- ``app.conf.beat_schedule = {NAME: {"task": ..., "schedule": ..., "args": ...,
  "kwargs": ..., "options": ...}}``: each entry is a periodic task named
  ``NAME``; its shape is checked when it is set, its task when the app's
  periodic tasks are read (a node hosting the app, as ``cluster up`` checks),
  so that the setting may come before the tasks are defined, as in a
  ``celeryconfig`` module.
- ``app.add_periodic_task(schedule, sig, args=(), kwargs=(), name=None,
  **options)``: a signature is the task with its arguments (those given are
  added, as Celery's ``sig.clone`` adds them); the name defaults to how the
  call reads (``proj.say('hello')``), and a second call with the same name
  replaces the first, as in Celery.
- A schedule is seconds, a ``timedelta`` or a ``crontab(...)``; a crontab
  fires in ``app.conf.timezone`` (default UTC).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..._errors import ConfigError
from ..services._crontab import crontab
from ._signature import Signature

__all__ = [
    "ENTRY_KEYS",
    "call_name",
    "celery_periodic",
    "check_beat_schedule",
    "entry_arguments",
    "schedule_of",
]

#: The keys of a ``beat_schedule`` entry (Celery's, less ``relative``).
ENTRY_KEYS: Final = frozenset({"task", "schedule", "args", "kwargs", "options"})


def schedule_of(schedule: object, where: str) -> dict[str, Any]:
    """Celery's ``schedule`` as ``add_periodic``'s arguments: ``every`` for
    seconds or a ``timedelta``, ``cron`` for a ``crontab``.

    Raises:
        ConfigError: any other kind (naming ``where`` and the kinds taken).
    """
    if isinstance(schedule, crontab):
        return {"cron": schedule.expression}
    if isinstance(schedule, datetime.timedelta):
        return {"every": schedule}
    if isinstance(schedule, int | float) and not isinstance(schedule, bool):
        return {"every": float(schedule)}
    raise ConfigError(
        f"{where}: schedule={schedule!r}: give seconds, a timedelta or "
        "crontab(...) (from actorctl import crontab)"
    )


def check_beat_schedule(value: object) -> Mapping[str, Any]:
    """``app.conf.beat_schedule``'s shape: names to entries with a task's name,
    a schedule and known keys. The mapping itself is kept (Celery code adds
    entries to it in place); its tasks are looked up when it is read.

    Raises:
        ConfigError: naming the entry and what is wrong with it.
    """
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"app.conf: beat_schedule={value!r}: give a dict of names to entries "
            '({"task": NAME, "schedule": SECONDS})'
        )
    for name, entry in value.items():
        entry_arguments(name, entry)
    return value


def entry_arguments(name: object, entry: object) -> dict[str, Any]:
    """One ``beat_schedule`` entry as ``add_periodic``'s arguments, with its
    task's name as ``task``.

    Raises:
        ConfigError: a missing task or schedule, an unknown key, a value of
            the wrong kind, naming the entry.
    """
    where = f"beat_schedule[{name!r}]"
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where}: give a dict with task and schedule, got {entry!r}")
    unknown = sorted(set(entry) - ENTRY_KEYS)
    if unknown == ["relative"] and not entry["relative"]:
        unknown = []
    if unknown:
        why = (
            " (relative=True is not taken: due times are counted from the Unix epoch, "
            "whenever the beat started)"
            if "relative" in unknown
            else ""
        )
        raise ConfigError(
            f"{where}: no key {', '.join(map(repr, unknown))}: an entry takes "
            f"{', '.join(sorted(ENTRY_KEYS))}{why}"
        )
    for key in ("task", "schedule"):
        if key not in entry:
            raise ConfigError(f"{where}: no {key!r}: an entry needs task and schedule")
    task = entry["task"]
    if not isinstance(task, str) or not task:
        raise ConfigError(f"{where}: task={task!r}: give the task's name ('proj.tasks.add')")
    options = entry.get("options") or {}
    if not isinstance(options, Mapping):
        raise ConfigError(f"{where}: options={options!r}: give a dict of apply_async options")
    return {
        "task": task,
        **schedule_of(entry["schedule"], where),
        "args": _args(where, entry.get("args", ())),
        "kwargs": _kwargs(where, entry.get("kwargs")),
        "name": name,
        "options": dict(options),
    }


def celery_periodic(
    schedule: object,
    sig: object,
    args: Sequence[Any],
    kwargs: Mapping[str, Any] | Sequence[Any] | None,
    name: str | None,
    options: Mapping[str, Any],
) -> tuple[str, dict[str, Any]]:
    """``app.add_periodic_task``'s arguments as a periodic task's name and
    ``add_periodic``'s arguments: the signature's task, its arguments with
    ``args`` and ``kwargs`` added, its options with ``options``.

    Raises:
        ConfigError: ``sig`` is not a signature or a task, an option of the
            signature a periodic firing cannot carry, a bad schedule.
    """
    where = "add_periodic_task"
    make = getattr(sig, "s", None)
    if not isinstance(sig, Signature) and callable(make):
        sig = make()
    if not isinstance(sig, Signature):
        raise ConfigError(f"{where}: expected a signature (say.s('hello')) or a task, got {sig!r}")
    added = _kwargs(where, kwargs if kwargs else None)
    call = sig.clone(_args(where, args), added)
    carried = {k: v for k, v in call.options.items() if k != "acks_late"}  # the task's own
    key = name if name is not None else call_name(call.task.name, call.args, call.kwargs)
    arguments = {
        "task": call.task.name,
        **schedule_of(schedule, f"{where}({key!r})"),
        "args": call.args,
        "kwargs": call.kwargs,
        "name": key,
        "options": {**carried, **options},
    }
    return key, arguments


def call_name(task: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """How a call reads, Celery's default name of a periodic task added with
    ``add_periodic_task``: ``proj.say('hello')``."""
    shown = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"{task}({', '.join(shown)})"


def _args(where: str, args: object) -> tuple[Any, ...]:
    if isinstance(args, str | bytes) or not isinstance(args, Sequence):
        raise ConfigError(f"{where}: args={args!r}: give a list or a tuple")
    return tuple(args)


def _kwargs(where: str, kwargs: object) -> dict[str, Any]:
    if kwargs is None:
        return {}
    if not isinstance(kwargs, Mapping):
        raise ConfigError(f"{where}: kwargs={kwargs!r}: give a dict")
    return dict(kwargs)
