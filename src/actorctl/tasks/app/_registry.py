"""What an application defines: its tasks, events and pools, and publishing events.

:class:`TaskRegistry` is the definitions half of ``App`` (``_app.py`` adds the
connection and the actors a node hosts for it); workers and the event hub read
it. It holds definitions only: which client sends is never stored here.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, overload

import attrs

from ..._errors import ConfigError
from ...mailbox import KIND_EVENT, Envelope
from ...supervision import DEFAULT_RETRY_POLICY, BreakerPolicy, HealthCheck, RetryPolicy
from ..client._client import current_client
from ..client._validate import check_event, check_references
from ..limits._breakers import policy_of
from ..limits._budget import Concurrency, concurrency_of
from ..protocol._protocol import EVENTS, H_EVENT, H_SINKS
from ..protocol._send_options import SendOptions
from ..services._periodic import PeriodicTask
from ..sources._source import SourceSpec
from ..sources._source_config import source_spec
from ..worker._control import Control
from ._conf import TASK_DEFAULTS, Settings
from ._eager import EagerRuns
from ._options import checked_task_options
from ._periodics import PeriodicDeclarations
from ._signals import Signal
from ._task import Task

__all__ = ["TaskRegistry", "celery_task_name", "name_of_event"]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class TaskRegistry(PeriodicDeclarations):
    """The tasks, events and pools of an application: Celery's app object.

    Args:
        name: the app's name; a task's default name is ``NAME.FUNCTION``.
        default_pool: the pool tasks go to unless they name another.
        retry_policy: how its tasks' failures are retried, unless a task or a
            call says otherwise: a ``RetryPolicy``, or a dict of its fields
            (default: ``DEFAULT_RETRY_POLICY``, docs/fault-tolerance.md).
    """

    def __init__(
        self,
        name: str,
        *,
        default_pool: str = "celery",
        retry_policy: RetryPolicy | Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        if isinstance(retry_policy, Mapping):
            retry_policy = RetryPolicy.from_options(retry_policy, DEFAULT_RETRY_POLICY)
        self.retry_policy = retry_policy or DEFAULT_RETRY_POLICY
        self.default_pool = default_pool
        self.tasks: dict[str, Task] = {}
        self.events: dict[str, type] = {}
        self.subscriptions: dict[str, list[Task]] = {}
        self.pools: dict[str, dict[str, Any]] = {}
        self.breakers: dict[str, BreakerPolicy] = {}
        self.health_checks: list[HealthCheck] = []
        self.control = Control(name)
        #: Celery's ``app.conf`` (``_conf.py``): settings with Celery's names.
        self.conf = Settings(self._apply_setting, {"task_default_queue": default_pool})
        self._explicit: dict[str, frozenset[str]] = {}  # task -> options it set itself
        # Its periodic tasks declared in code (``@app.periodic``, ``app.add_periodic``,
        # ``app.add_periodic_task``); ``periodics`` adds ``conf.beat_schedule``'s.
        self._periodics: dict[str, PeriodicTask] = {}
        self._added_as_celery: set[str] = set()  # by add_periodic_task: replaceable
        self._configured = False
        #: Celery's app signals, sent once with ``sender=app`` (``configure``).
        self.on_after_configure = Signal("on_after_configure", ["source"])
        self.on_after_finalize = Signal("on_after_finalize", [])
        #: Celery's default name of each task that took the default name
        #: (``MODULE.FUNCTION``), to its name here (``APP.FUNCTION``): a task
        #: sent under either runs (docs/celery.md).
        self.aliases: dict[str, str] = {}
        #: Its data sources by name (``app.add_source``, ``@app.source``).
        self.sources: dict[str, SourceSpec] = {}
        #: Runs its tasks inline while ``conf.task_always_eager`` is on (``_eager.py``).
        self.eager = EagerRuns(self.tasks, self.conf)

    # -- definitions ---------------------------------------------------------------

    @overload
    def task(self, fn: F, /) -> Task: ...

    @overload
    def task(
        self, *, name: str | None = None, pool: str | None = None, **options: Any
    ) -> Callable[[F], Task]: ...

    def task(  # type: ignore[misc]
        self, fn: Any = None, /, *, name: str | None = None, pool: str | None = None, **options: Any
    ) -> Any:
        """Register a function (``async def`` or plain ``def``) as a task.

        Options: ``_options.TASK_OPTIONS`` lists them with their Celery names;
        Celery's ``queue=`` is ``pool=``; ``app.conf`` gives the defaults of
        ``time_limit``, ``soft_time_limit``, ``ignore_result``, ``track_started``
        and ``acks_late`` (False: at-most-once, sent pre-settled). ``boxed=True``
        runs the task in its pool's long-lived boxed worker process (which its
        hard time limit can kill); ``boxed="per-call"`` in a process per call.

        Raises:
            ConfigError: an unknown option or one actorctl does not take (the
                message names the supported ones), or a task name used twice.
        """

        def register(fn: Callable[..., Any]) -> Task:
            fn_name = getattr(fn, "__name__", repr(fn))
            task_pool, given = checked_task_options(fn_name, pool, options)
            task_name = name or f"{self.name}.{fn_name}"
            if task_name in self.tasks:
                raise ConfigError(f"two tasks are named {task_name!r}: give one name=...")
            self.aliases.pop(task_name, None)  # a task's own name is never another's alias
            celery_name = celery_task_name(self.name, fn)
            if name is None and celery_name not in self.tasks and celery_name != task_name:
                self.aliases[celery_name] = task_name
            explicit = frozenset(given) | ({"pool"} if task_pool else frozenset())
            defaults = {
                option: self.conf[setting]
                for setting, option in TASK_DEFAULTS.items()
                if option not in given
            }
            task_pool = task_pool or self.default_pool
            given.setdefault("base_policy", self.retry_policy)
            task = Task(fn, name=task_name, pool=task_pool, **given, **defaults)
            task.eager = self.eager
            self.tasks[task_name] = task
            self._explicit[task_name] = explicit
            self.pools.setdefault(task.pool, {})
            return task

        return register(fn) if fn is not None else register

    def find(self, name: str) -> Task | None:
        """The task ``name``: by its name, or by Celery's default name of it."""
        task = self.tasks.get(name)
        if task is None and name in self.aliases:
            task = self.tasks.get(self.aliases[name])
        return task

    def add_source(
        self,
        name: str,
        source: Any,
        *,
        task: Task | str | None = None,
        actor: str | None = None,
        handler: str = "take",
        node: str | None = None,
        poll: float = 1.0,
        batch: int = 100,
        window: int = 100,
        **settings: Any,
    ) -> SourceSpec:
        """Feed ``task`` (each item is its one argument) or ``actor``'s
        ``handler`` from a data source (docs/sources.md), read on the services
        node (or ``node``), at least once, from a checkpoint.

        Args:
            source: a kind (``"directory"``, ``"http"``, ``"sqlite"``,
                ``"module:Class"``) with its ``settings``, or a Source class
                (made with ``settings`` at each start of the source).
            poll: seconds between reads that found nothing new.
            batch: items read at most at once; window: items in flight at most.

        Raises:
            ConfigError: an unknown kind or task ("did you mean"), settings
                that do not fit, a name used twice.
        """
        known = {t.name: t.pool for t in self.tasks.values()}
        if isinstance(task, Task):
            known[task.name] = task.pool
        spec = source_spec(
            known, name=name, source=source, settings=settings,
            task=task.name if isinstance(task, Task) else task, actor=actor, handler=handler,
            node=node, poll=poll, batch=batch, window=window,
        )  # fmt: skip
        if spec.name in self.sources:
            raise ConfigError(f"two sources are named {spec.name!r}: give one another name")
        self.sources[spec.name] = spec
        return spec

    def source(self, name: str, **options: Any) -> Callable[[type[Any]], type[Any]]:
        """Declare a Source class as a data source: ``@app.source("orders",
        task=handle_order)``; ``options`` are :meth:`add_source`'s."""

        def register(cls: type[Any]) -> type[Any]:
            self.add_source(name, cls, **options)
            return cls

        return register

    def _apply_setting(self, setting: str, value: Any) -> None:
        """``app.conf`` changed ``setting``: the tasks that did not set it
        themselves follow it (those defined already, and those to come); the
        eager runner follows ``task_always_eager``."""
        if setting == "task_always_eager":
            self.eager.active = bool(value)
            return
        option = "pool" if setting == "task_default_queue" else TASK_DEFAULTS.get(setting)
        if option is None:
            return  # read where it applies (result_expires: by the workers)
        old = self.default_pool
        if option == "pool":
            self.default_pool = value
        for task_name, task in self.tasks.items():
            if option not in self._explicit.get(task_name, frozenset()):
                setattr(task, option, value)
                if option == "pool":
                    self.pools.setdefault(value, {})
        unused = not any(task.pool == old for task in self.tasks.values())
        if option == "pool" and self.pools.get(old) == {} and unused:
            del self.pools[old]

    def pool(
        self,
        name: str,
        *,
        concurrency: int | tuple[int, int] | Concurrency = 4,
        mailbox_capacity: int = 100,
        threads: bool = True,
    ) -> None:
        """Set how a pool's worker actors run.

        Args:
            concurrency: tasks each worker runs at once (async tasks as trio
                tasks, plain ``def`` ones in that many threads): a number, a
                range ``(min, max)`` the budget moves in with demand, or a
                :class:`Concurrency` (its ``current`` function says the budget).
            mailbox_capacity: messages each worker holds (its link credit).
            threads: False runs plain ``def`` tasks inline on the node's event
                loop, one at a time, as Celery's solo pool does: several times
                faster for short tasks (no thread hand-off, no GIL contention),
                but a long one holds up the node, and its time limits are raised
                in it rather than enforced from outside.

        Raises:
            ConfigError: a budget or capacity out of range, naming it.
        """
        budget = concurrency_of(concurrency, what=f"pool {name!r}")
        if mailbox_capacity < 1:
            raise ConfigError(f"pool {name!r}: mailbox_capacity must be >= 1")
        if not threads and budget.max != 1:
            raise ConfigError(
                f"pool {name!r}: threads=False runs one task at a time: concurrency=1"
            )
        self.pools[name] = {
            "concurrency": budget.max,
            "budget": budget,
            "mailbox_capacity": mailbox_capacity,
            "threads": threads,
        }

    def breaker(self, name: str, **policy: Any) -> None:
        """Declare a circuit breaker shared by the tasks that name it
        (``@app.task(breaker=name)``): one per downstream resource. ``policy``
        takes the options of :class:`~actorctl.supervision.BreakerPolicy`.

        Raises:
            ConfigError: an unknown or wrong option, naming it.
        """
        self.breakers[name] = policy_of(name, policy)

    def health_check(
        self,
        *,
        name: str | None = None,
        interval: float = 30.0,
        timeout: float = 10.0,
        breakers: Sequence[str] = (),
    ) -> Callable[[F], F]:
        """Declare a health check (a function or an async function returning a
        ``Health``, or ``(Health, detail)``) that every node hosting this app's
        pools runs every ``interval`` seconds (a timer in the node, not the
        scheduler); its results feed the breakers it names (``app.breaker`` or
        a task's own, by the task's name).

        Raises:
            ConfigError: a wrong interval or timeout, or a name used twice.
        """

        def register(fn: F) -> F:
            check_name = name or fn.__name__
            if any(c.name == check_name for c in self.health_checks):
                raise ConfigError(f"two health checks are named {check_name!r}: give one name=...")
            try:
                check = HealthCheck(
                    name=check_name,
                    fn=fn,
                    interval=interval,
                    timeout=timeout,
                    breakers=tuple(breakers),
                )
            except ValueError as exc:
                raise ConfigError(f"health check {check_name!r}: {exc}") from None
            self.health_checks.append(check)
            return fn

        return register

    def event(self, cls: type[T] | None = None, /, *, name: str | None = None) -> Any:
        """Make an attrs class or dataclass a domain event: it gains
        ``subscribe(task)``, ``delay(**fields)`` and ``adelay(**fields)``."""

        def register(cls: type[T]) -> type[T]:
            if not (attrs.has(cls) or dataclasses.is_dataclass(cls)):
                raise ConfigError(f"@app.event needs an attrs class or a dataclass, got {cls!r}")
            event_name = name or cls.__name__
            if event_name in self.events:
                raise ConfigError(f"two events are named {event_name!r}: give one name=...")
            self.events[event_name] = cls
            self.subscriptions.setdefault(event_name, [])
            taken = [a for a in ("subscribe", "delay", "adelay") if hasattr(cls, a)]
            if taken:
                raise ConfigError(
                    f"event {cls.__name__} has attributes {taken}: @app.event adds "
                    "those; rename them"
                )
            added: dict[str, Any] = {
                "__actorctl_event__": event_name,
                "subscribe": staticmethod(functools.partial(self.subscribe, cls)),
                "delay": staticmethod(lambda *a, **kw: self.publish(cls(*a, **kw))),
                "adelay": staticmethod(lambda *a, **kw: self.apublish(cls(*a, **kw))),
            }
            for attribute, value in added.items():
                setattr(cls, attribute, value)
            return cls  # type: ignore[return-value]

        return register(cls) if cls is not None else register

    def subscribe(self, event: type, task: Task) -> Task:
        """Have ``task`` receive every ``event`` (its one argument): once per pool
        that subscribes."""
        event_name = name_of_event(event)
        if not isinstance(task, Task):
            raise ConfigError(f"{task!r} is not a task: decorate it with @app.task first")
        subscribed = self.subscriptions.setdefault(event_name, [])
        if task not in subscribed:
            subscribed.append(task)
        return task

    def publish(self, event: Any, *, sinks: Sequence[str] = ()) -> None:
        """Publish one event message (blocking until the event hub took it).

        ``sinks``: data sinks that get the result of every task it reaches."""
        client = current_client(f"app {self.name!r}")
        client.wait_in_client_thread(functools.partial(self.apublish, event, sinks=sinks))

    async def apublish(self, event: Any, *, sinks: Sequence[str] = ()) -> None:
        """:meth:`publish` for trio code.

        Raises:
            BadArguments: a field whose value is not of the event class's type.
            ConfigError: no event hub, or a sink or a subscribing task's pool
                that the directory does not know.
        """
        event_name = name_of_event(type(event))
        fields = check_event(event, event_name, self.events.get(event_name, type(event)))
        client = current_client(f"app {self.name!r}")
        hub = client.directory.resolve(EVENTS)
        where = f"event {event_name}"
        check_references(client.directory, where, "", SendOptions(sinks=tuple(sinks)))
        for task in self.subscriptions.get(event_name, []):  # where the hub sends it
            options = SendOptions(sinks=tuple(task.sinks))
            check_references(client.directory, f"task {task.name}", task.pool, options)
            client.directory.resolve(task.pool)
        outbox = client.outbox
        envelope = Envelope(
            message_id=outbox.new_message_id(),
            to=str(hub),
            subject=event_name,
            body=[[], fields],
            kind=KIND_EVENT,
            creation_time=outbox.now(),
            headers={H_EVENT: event_name, **({H_SINKS: ",".join(sinks)} if sinks else {})},
        )
        await outbox.send(hub, envelope, presettled=False, confirm=True)


def name_of_event(event: type) -> str:
    name = getattr(event, "__actorctl_event__", None)
    if not isinstance(name, str):
        raise ConfigError(f"{event!r} is not an event: decorate it with @app.event")
    return name


def celery_task_name(app: str, fn: Callable[..., Any]) -> str:
    """The name Celery gives ``fn`` by default: its module's import name and
    its own (``proj.tasks.add``), or the app's name for a module run as a
    script (``__main__``)."""
    module = getattr(fn, "__module__", None) or "__main__"
    prefix = app if module == "__main__" else module
    return f"{prefix}.{getattr(fn, '__name__', repr(fn))}"
