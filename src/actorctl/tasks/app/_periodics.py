"""Periodic tasks declared on the app: actorctl's ``@app.periodic`` and
``app.add_periodic``, Celery's ``app.add_periodic_task`` and
``app.conf.beat_schedule``, and Celery's ``on_after_configure`` and
``on_after_finalize`` signals, where Celery projects add them.

:class:`PeriodicDeclarations` is a part of ``TaskRegistry`` (``_registry.py``):
the beat on the services node fires what :attr:`~PeriodicDeclarations.periodics`
holds (docs/scheduling.md).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..._errors import ConfigError
from ..services._crontab import crontab
from ..services._periodic import PeriodicTask, periodic_task
from ._beat_schedule import celery_periodic, entry_arguments
from ._conf import Settings
from ._signals import Signal
from ._signature import Signature
from ._task import Task

__all__ = ["PeriodicDeclarations"]


class PeriodicDeclarations:
    """The periodic tasks of an app, and when Celery's app signals are sent."""

    tasks: dict[str, Task]
    aliases: dict[str, str]
    conf: Settings
    task: Callable[..., Any]  # TaskRegistry.task
    on_after_configure: Signal
    on_after_finalize: Signal
    _periodics: dict[str, PeriodicTask]
    _added_as_celery: set[str]
    _configured: bool

    def periodic(
        self,
        *,
        cron: str | None = None,
        every: float | datetime.timedelta | None = None,
        tz: str | None = None,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        name: str | None = None,
        catch_up: bool = True,
        **options: Any,
    ) -> Callable[[Any], Task]:
        """Fire a task on a schedule (the beat on the services node sends it):
        decorates a task, or a plain function (making it a task with the
        default options). Exactly one of ``cron`` (five fields, in timezone
        ``tz``, default UTC) and ``every`` (seconds or a timedelta); ``name``
        defaults to the task's name; ``options``: ``queue``, ``expires``,
        ``priority`` of each firing (docs/scheduling.md).

        Raises:
            ConfigError: a bad schedule, timezone or option, or a name used twice.
        """

        def register(fn: Any) -> Task:
            task = fn if isinstance(fn, Task) else self.task(fn)
            self.add_periodic(
                task, cron=cron, every=every, tz=tz, args=args, kwargs=kwargs, name=name,
                catch_up=catch_up, **options,
            )  # fmt: skip
            return task

        return register

    def add_periodic(
        self,
        task: Task | str,
        *,
        cron: str | None = None,
        every: float | datetime.timedelta | None = None,
        tz: str | None = None,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        name: str | None = None,
        catch_up: bool = True,
        **options: Any,
    ) -> PeriodicTask:
        """Fire ``task`` (a task, or the name of one of this app's) on a
        schedule: the arguments of :meth:`periodic`.

        Raises:
            ConfigError: an unknown task ("did you mean"), a bad schedule,
                timezone or option, or a name used twice.
        """
        periodic = self._periodic(
            task, cron=cron, every=every, tz=tz, args=args, kwargs=kwargs, name=name,
            catch_up=catch_up, options=options,
        )  # fmt: skip
        if periodic.name in self._periodics:
            raise ConfigError(f"two periodic tasks are named {periodic.name!r}: give one name=...")
        self._periodics[periodic.name] = periodic
        return periodic

    def add_periodic_task(
        self,
        schedule: float | datetime.timedelta | crontab,
        sig: Signature | Task,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | Sequence[Any] | None = None,
        name: str | None = None,
        **options: Any,
    ) -> str:
        """Celery's ``app.add_periodic_task``: fire ``sig`` (a signature: its
        task with its arguments, ``args`` and ``kwargs`` added) on ``schedule``
        (seconds, a timedelta or ``crontab(...)``); ``name`` (any text) defaults
        to how the call reads (``proj.say('hello')``), and a second call with
        the same name replaces the first, as in Celery. Returns the name.

        Raises:
            ConfigError: not a signature or task, a bad schedule or option, or
                a name another kind of declaration took.
        """
        key, arguments = celery_periodic(schedule, sig, args, kwargs, name, options)
        if key in self._periodics and key not in self._added_as_celery:
            raise ConfigError(f"two periodic tasks are named {key!r}: give one name=...")
        self._periodics.pop(key, None)
        self._periodics[key] = self._periodic(**arguments)
        self._added_as_celery.add(key)
        return key

    @property
    def periodics(self) -> dict[str, PeriodicTask]:
        """Its periodic tasks by name: those declared in code and those of
        ``conf.beat_schedule``, read now (after :meth:`configure`).

        Raises:
            ConfigError: a wrong entry (an unknown task, "did you mean"), or a
                name used twice.
        """
        self.configure()
        found = dict(self._periodics)
        for key, entry in self.conf["beat_schedule"].items():
            arguments = entry_arguments(key, entry)
            try:
                periodic = self._periodic(**arguments)
            except ConfigError as exc:
                raise ConfigError(f"app.conf.beat_schedule: {exc}") from None
            if periodic.name in found:
                raise ConfigError(
                    f"app.conf.beat_schedule: the periodic task name {periodic.name!r} is "
                    "declared in code too: names must be unique"
                )
            found[periodic.name] = periodic
        return found

    def configure(self) -> None:
        """Send Celery's ``on_after_configure`` (with ``source=app.conf``) and
        ``on_after_finalize``, once, with ``sender=app``: when a node hosts the
        app, when it connects, or when its periodic tasks are first read. A
        receiver's error is raised (a wrong ``add_periodic_task`` fails there,
        as ``cluster up`` checks the app), unlike a task signal's."""
        if self._configured:
            return
        self._configured = True
        for signal, extra in (
            (self.on_after_configure, {"source": self.conf}),
            (self.on_after_finalize, {}),
        ):
            for receiver, wanted, _ in list(signal.receivers):
                if wanted is None or wanted is self:
                    receiver(signal=signal, sender=self, **extra)

    def _periodic(
        self, task: Task | str, *, name: str | None = None, tz: str | None = None, **given: Any
    ) -> PeriodicTask:
        """A periodic task of ``task`` (a task, its name, or Celery's default
        name of it); a cron schedule in ``conf.timezone`` unless ``tz``."""
        known = {t.name: t.pool for t in self.tasks.values()}
        if isinstance(task, Task):
            known[task.name] = task.pool
        task_name = task.name if isinstance(task, Task) else self.aliases.get(task, task)
        return periodic_task(
            known, name=name or task_name, task=task_name,
            tz=tz if tz is not None else self.conf["timezone"], **given,
        )  # fmt: skip
