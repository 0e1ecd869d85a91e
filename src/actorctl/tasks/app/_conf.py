"""``app.conf``: Celery's setting names, where they apply to actorctl.

A setting that applies changes what the app's tasks do (their defaults, for
the tasks that did not set the option themselves, whether defined before or
after); one that names something actorctl does without (a broker, a result
backend, a serializer) is refused with the reason, and an unknown one with the
settings there are.
"""

from __future__ import annotations

import datetime
import difflib
import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, Final, final

from ..._errors import ConfigError
from ..protocol._state import RESULT_EXPIRES
from ..services._periodic import zone_of
from ._beat_schedule import check_beat_schedule

__all__ = [
    "CELERY_ONLY_SETTINGS",
    "OLD_NAMES",
    "SETTINGS",
    "TASK_DEFAULTS",
    "Settings",
    "new_name",
]

#: Each setting: its default and what it does.
SETTINGS: Final[Mapping[str, tuple[Any, str]]] = MappingProxyType(
    {
        "task_default_queue": ("celery", "the pool of tasks that name none (App(default_pool=))"),
        "task_time_limit": (None, "hard time limit in seconds of tasks that set none"),
        "task_soft_time_limit": (None, "soft time limit in seconds of tasks that set none"),
        "task_ignore_result": (False, "tasks' callers get no result unless a task says so"),
        "task_track_started": (False, "tasks report STARTED unless a task says otherwise"),
        "task_acks_late": (True, "False: tasks that set no acks_late are at-most-once"),
        "result_expires": (RESULT_EXPIRES, "seconds a worker's node keeps a final result"),
        "task_always_eager": (False, "delay() runs tasks inline, for unit tests (eager mode)"),
        "task_eager_propagates": (False, "in eager mode, delay() raises a failed task's error"),
        "timezone": ("UTC", "the timezone of cron schedules that name none (crontab(...))"),
        "beat_schedule": ({}, "periodic tasks by name: task, schedule, args, kwargs, options"),
        "enable_utc": (True, "True only: times on the wire are UTC (Celery's default too)"),
    }
)

#: The settings that are defaults of a task option: setting → option.
TASK_DEFAULTS: Final = MappingProxyType(
    {
        "task_time_limit": "time_limit",
        "task_soft_time_limit": "soft_time_limit",
        "task_ignore_result": "ignore_result",
        "task_track_started": "track_started",
        "task_acks_late": "acks_late",
    }
)

_EAGER_FLAGS: Final = ("task_always_eager", "task_eager_propagates")
_NO_BROKER = "there is no broker: nodes talk AMQP 1.0 to each other; cluster.toml names them"
#: Celery settings that do not apply, with the reason.
CELERY_ONLY_SETTINGS: Final = MappingProxyType(
    {
        "broker_url": _NO_BROKER,
        "broker_transport_options": _NO_BROKER,
        "broker_connection_retry_on_startup": _NO_BROKER,
        "result_backend": "each worker node keeps the results it sends "
        "(result_expires says how long); app.AsyncResult(id) fetches them",
        "task_serializer": "messages are JSON (docs/protocol.md §6.3)",
        "result_serializer": "results are JSON (docs/protocol.md §14.4)",
        "accept_content": "only JSON is accepted, never pickle",
        "task_routes": "give each task its pool: @app.task(pool=...)",
        "task_queues": "pools are named by tasks (pool=) and hosted as cluster.toml says",
        "worker_concurrency": "app.pool(NAME, concurrency=...) per pool",
        "worker_prefetch_multiplier": "app.pool(NAME, mailbox_capacity=...) is a worker's credit",
    }
)

#: Celery's old uppercase names (before 4.0), to the new ones: taken as those.
OLD_NAMES: Final = MappingProxyType(
    {
        "CELERY_DEFAULT_QUEUE": "task_default_queue",
        "CELERYD_TASK_TIME_LIMIT": "task_time_limit",
        "CELERYD_TASK_SOFT_TIME_LIMIT": "task_soft_time_limit",
        "CELERY_IGNORE_RESULT": "task_ignore_result",
        "CELERY_TRACK_STARTED": "task_track_started",
        "CELERY_ACKS_LATE": "task_acks_late",
        "CELERY_TASK_RESULT_EXPIRES": "result_expires",
        "CELERY_ALWAYS_EAGER": "task_always_eager",
        "CELERY_EAGER_PROPAGATES_EXCEPTIONS": "task_eager_propagates",
        "CELERY_TIMEZONE": "timezone",
        "CELERYBEAT_SCHEDULE": "beat_schedule",
        "BROKER_URL": "broker_url",
        "BROKER_TRANSPORT_OPTIONS": "broker_transport_options",
        "BROKER_CONNECTION_RETRY_ON_STARTUP": "broker_connection_retry_on_startup",
        "CELERY_RESULT_BACKEND": "result_backend",
        "CELERY_TASK_SERIALIZER": "task_serializer",
        "CELERY_RESULT_SERIALIZER": "result_serializer",
        "CELERY_ACCEPT_CONTENT": "accept_content",
        "ENABLE_UTC": "enable_utc",
        "CELERY_ROUTES": "task_routes",
        "CELERY_QUEUES": "task_queues",
        "CELERYD_CONCURRENCY": "worker_concurrency",
        "CELERYD_PREFETCH_MULTIPLIER": "worker_prefetch_multiplier",
    }
)


@final
class Settings(Mapping[str, Any]):
    """``app.conf``: read and set as a mapping or as attributes, or with
    ``update()``. ``apply`` is called with each setting that changes;
    ``initial`` overrides defaults (unchecked: the app's own).

    Raises (on setting):
        ConfigError: an unknown setting (naming the ones there are), one that
            does not apply (saying why), or a value of the wrong kind.
    """

    _values: dict[str, Any]
    _apply: Callable[[str, Any], None]

    def __init__(
        self, apply: Callable[[str, Any], None], initial: Mapping[str, Any] | None = None
    ) -> None:
        values = {k: v for k, (v, _) in SETTINGS.items()}
        values["beat_schedule"] = {}  # each app's own: Celery code adds to it in place
        object.__setattr__(self, "_values", {**values, **(initial or {})})
        object.__setattr__(self, "_apply", apply)

    def __getitem__(self, key: str) -> Any:
        values = self._values
        if key in values:  # a setting's own name (every delay() reads one: no call)
            return values[key]
        key = new_name(key)
        if key not in self._values:
            raise KeyError(f"{key}: {_unknown(key)}")
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(f"app.conf has no setting {key}: {_unknown(key)}") from None

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value

    def __setitem__(self, key: str, value: Any) -> None:
        self.update({key: value})

    def update(self, settings: Mapping[str, Any] | None = None, /, **more: Any) -> None:
        """Set several settings; all are checked before any is set."""
        given = {**(settings or {}), **more}
        checked = {new_name(key): _checked(new_name(key), value) for key, value in given.items()}
        for key, value in checked.items():
            self._values[key] = value
            self._apply(key, value)

    def from_object(self, obj: object | str, namespace: str | None = None) -> None:
        """Celery's ``app.config_from_object``: the settings a module (or its
        import name, or any object) defines: lowercase names, and Celery's old
        uppercase ones (``CELERY_TASK_RESULT_EXPIRES``). With ``namespace``
        (Django's ``"CELERY"``), only ``CELERY_``-prefixed names, as Celery
        reads them: ``CELERY_TASK_TIME_LIMIT`` is ``task_time_limit``.

        Raises:
            ConfigError: a setting that is unknown or does not apply; an
                uppercase name that looks like Celery's and is not one.
        """
        if isinstance(obj, str):
            module, _, attribute = obj.partition(":")
            obj = importlib.import_module(module)
            if attribute:
                obj = getattr(obj, attribute)
        given: dict[str, Any] = {}
        for key, value in vars(obj).items():
            if key.startswith("_") or inspect.ismodule(value):
                continue
            name = _read_name(key, namespace)
            if name is not None and not (callable(value) and not isinstance(value, Mapping)):
                given[name] = value
        self.update(given)

    def __repr__(self) -> str:
        return f"<Settings {dict(self._values)}>"


def new_name(key: str) -> str:
    """The setting ``key`` names: Celery's old uppercase name (``CELERY_ACKS_LATE``)
    is its new one (``task_acks_late``), as Celery takes it."""
    return OLD_NAMES.get(key, key)


def _read_name(key: str, namespace: str | None) -> str | None:
    """The setting a module's attribute ``key`` gives, or None for one that is
    no setting (a constant of the module, or outside ``namespace``).

    Raises:
        ConfigError: an uppercase name that looks like Celery's but is none
            (a misspelling), with the nearest.
    """
    if namespace is not None:
        prefix = f"{namespace}_"
        if not key.startswith(prefix):
            return None
        rest = key[len(prefix) :]
        return OLD_NAMES.get(key, rest.lower())
    if key.lower() == key:
        return key
    if key in OLD_NAMES:
        return OLD_NAMES[key]
    if key.startswith(("CELERY", "BROKER_")):
        near = difflib.get_close_matches(key, list(OLD_NAMES), n=1)
        guess = f"did you mean {near[0]}? " if near else ""
        raise ConfigError(
            f"app.conf: unknown Celery setting {key}; {guess}(its old names: docs/celery.md)"
        )
    return None


def _checked(key: str, value: Any) -> Any:
    if key not in SETTINGS:
        if key.upper() == key and key.lower() in SETTINGS:
            raise ConfigError(f"app.conf: {key}: write Celery's new lowercase name {key.lower()}")
        raise ConfigError(f"app.conf: {_unknown(key)}")
    if key == "timezone":
        if not isinstance(value, str):
            raise ConfigError(f"app.conf: timezone={value!r}: give a name like 'Europe/Paris'")
        zone_of(value)
    if key == "beat_schedule":
        return check_beat_schedule(value)
    if key == "enable_utc" and value is not True:
        raise ConfigError(
            f"app.conf: enable_utc={value!r}: only True (Celery's default) is supported: times "
            "on the wire are seconds since the Unix epoch (UTC); for crontab schedules in "
            "local time, set app.conf.timezone"
        )
    if key in ("task_time_limit", "task_soft_time_limit", "result_expires"):
        if isinstance(value, datetime.timedelta):
            value = value.total_seconds()
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ConfigError(f"app.conf: {key}={value!r}: give seconds (a number) or None")
        if value is not None and value <= 0:
            raise ConfigError(f"app.conf: {key}={value!r}: give a positive number of seconds")
        if key == "result_expires" and value is None:
            raise ConfigError("app.conf: result_expires=None: give seconds (results expire)")
    flags = ("task_ignore_result", "task_track_started", "task_acks_late", *_EAGER_FLAGS)
    if key in flags and not isinstance(value, bool):
        raise ConfigError(f"app.conf: {key}={value!r}: give True or False")
    if key == "task_default_queue" and (not isinstance(value, str) or not value):
        raise ConfigError(f"app.conf: task_default_queue={value!r}: give a pool name")
    return value


def _unknown(key: str) -> str:
    if key in CELERY_ONLY_SETTINGS:
        return f"Celery's {key} does not apply: {CELERY_ONLY_SETTINGS[key]}"
    near = difflib.get_close_matches(key, [*SETTINGS, *CELERY_ONLY_SETTINGS], n=1)
    guess = f"did you mean {near[0]}? " if near else ""
    return f"unknown setting {key}; {guess}supported: {', '.join(SETTINGS)} (docs/celery.md)"
