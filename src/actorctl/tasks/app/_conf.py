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

__all__ = ["CELERY_ONLY_SETTINGS", "SETTINGS", "TASK_DEFAULTS", "Settings"]

#: Each setting: its default and what it does.
SETTINGS: Final = MappingProxyType(
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
        "timezone": "times on the wire are seconds since the Unix epoch (UTC)",
        "enable_utc": "times on the wire are seconds since the Unix epoch (UTC)",
        "task_routes": "give each task its pool: @app.task(pool=...)",
        "task_queues": "pools are named by tasks (pool=) and hosted as cluster.toml says",
        "worker_concurrency": "app.pool(NAME, concurrency=...) per pool",
        "worker_prefetch_multiplier": "app.pool(NAME, mailbox_capacity=...) is a worker's credit",
        "beat_schedule": "there is no beat: send delayed tasks with countdown= or eta=",
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
        object.__setattr__(self, "_values", {**values, **(initial or {})})
        object.__setattr__(self, "_apply", apply)

    def __getitem__(self, key: str) -> Any:
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
        checked = {key: _checked(key, value) for key, value in given.items()}
        for key, value in checked.items():
            self._values[key] = value
            self._apply(key, value)

    def from_object(self, obj: object | str) -> None:
        """Celery's ``app.config_from_object``: the settings a module (or its
        import name, or any object) defines as lowercase attributes."""
        if isinstance(obj, str):
            obj = importlib.import_module(obj)
        given = {
            key: value
            for key, value in vars(obj).items()
            if not key.startswith("_")
            and key.lower() == key
            and not inspect.ismodule(value)
            and not callable(value)
        }
        self.update(given)

    def __repr__(self) -> str:
        return f"<Settings {dict(self._values)}>"


def _checked(key: str, value: Any) -> Any:
    if key not in SETTINGS:
        if key.upper() == key and key.lower() in SETTINGS:
            raise ConfigError(f"app.conf: {key}: write Celery's new lowercase name {key.lower()}")
        raise ConfigError(f"app.conf: {_unknown(key)}")
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
