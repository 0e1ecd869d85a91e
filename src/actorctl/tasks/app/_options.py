"""The options ``@app.task(...)`` takes, and Celery's names for them.

One table (:data:`TASK_OPTIONS`: option → its Celery name and what it does) is
what ``@app.task`` accepts and what its errors list; :data:`CELERY_ONLY` answers
the Celery options actorctl does not take with the reason. A new option is one
line in the table (and a parameter of ``Task``).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from ..._errors import ConfigError

__all__ = ["CELERY_ONLY", "TASK_OPTIONS", "checked_task_options"]

#: Every option of ``@app.task`` besides ``name`` and ``pool``: its Celery name
#: ("" when Celery has none) and what it does.
TASK_OPTIONS: Final = MappingProxyType(
    {
        "bind": ("bind", "the task gets a TaskContext (Celery's `self`) first"),
        "max_retries": ("max_retries", "retries before the task fails (its retry policy's bound)"),
        "autoretry_for": ("autoretry_for", "the exception types its retry policy retries (on=)"),
        "default_retry_delay": ("default_retry_delay", "seconds before a retry runs"),
        "retry_backoff": ("retry_backoff", "double the delay at each retry"),
        "time_limit": ("time_limit", "hard limit in seconds: the task is stopped"),
        "soft_time_limit": ("soft_time_limit", "soft limit in seconds: SoftTimeLimitExceeded"),
        "ignore_result": ("ignore_result", "its caller gets no result documents"),
        "track_started": ("track_started", "its caller gets a STARTED document"),
        "sinks": ("", "data-sink actors that also get its final result"),
        "boxed": (
            "",
            "True: run it in its pool's long-lived boxed worker process, which its hard "
            'limit can kill (and the pool starts again); "per-call": a process per call',
        ),
        "retry_policy": ("", "a RetryPolicy (or a dict of its fields) over the app's"),
        "breaker": ("", "a circuit breaker: True, a BreakerPolicy, or a name from app.breaker"),
        "rate_limit": (
            "rate_limit",
            'at most this many starts per period on each worker: "10/s", "100/m", "5/h"',
        ),
        "global_rate_limit": (
            "",
            "at most this many starts per period across its pool (its router paces them)",
        ),
        "concurrency": ("", "at most this many of it running at once on each worker (0: none)"),
        "concurrency_key": (
            "",
            "a function of its arguments giving a key: concurrency_per_key run at once per key",
        ),
        "concurrency_per_key": ("", "how many run at once per concurrency_key, on each worker"),
        "acks_late": (
            "acks_late",
            "True (the default): settled after it ran, run again if its worker dies; "
            "False: at-most-once, sent pre-settled, never run twice, lost if its worker dies",
        ),
    }
)

#: Celery task options actorctl does not take, with the reason.
CELERY_ONLY: Final = MappingProxyType(
    {
        "serializer": "messages are JSON (docs/protocol.md §6.3): a client in any language "
        "can read them",
        "compression": "messages are JSON; a long chain header is packed by actorctl itself",
        "backend": "each worker node keeps the results it sends (app.AsyncResult fetches "
        "them): there is no result backend to choose",
        "reject_on_worker_lost": "a task whose worker dies runs again (acks_late=True, the "
        "default), or never (acks_late=False)",
        "acks_on_failure_or_timeout": "a task is acknowledged once its failure is reported",
        "throws": "every failure is reported the same way",
        "typing": "arguments are always checked against the task's signature",
        "store_errors_even_if_ignored": "final states are always kept by the worker's node",
        "priority": "send it per call: apply_async(priority=0..9), highest first",
        "expires": "send it per call: apply_async(expires=...)",
        "base": "a task is a function: use bind=True for the context, signals for hooks",
        "shared": "a task belongs to the app that defines it",
    }
)


def checked_task_options(
    fn_name: str, pool: str | None, options: Mapping[str, Any]
) -> tuple[str | None, dict[str, Any]]:
    """The pool and the ``Task`` options that ``@app.task(pool=..., **options)``
    means: Celery's ``queue`` is the pool; ``acks_late`` is True or False.

    Raises:
        ConfigError: an unknown option (naming the supported ones), a Celery
            option actorctl does not take (saying why), ``queue`` with another
            ``pool``, or an ``acks_late`` that is not a bool.
    """
    where = f"@app.task on {fn_name}"
    given = dict(options)
    if "queue" in given:
        queue = given.pop("queue")
        if not isinstance(queue, str) or not queue:
            raise ConfigError(f"{where}: queue={queue!r}: give a pool name (pool=...)")
        if pool is not None and pool != queue:
            raise ConfigError(
                f"{where}: queue={queue!r} and pool={pool!r}: Celery's queue is "
                "actorctl's pool: give pool= only"
            )
        pool = queue
    if not isinstance(given.get("acks_late", True), bool):
        raise ConfigError(
            f"{where}: acks_late={given['acks_late']!r}: give True (the default: "
            "at-least-once) or False (at-most-once)"
        )
    for option in given:
        if option in TASK_OPTIONS:
            continue
        if option in CELERY_ONLY:
            raise ConfigError(
                f"{where}: Celery's {option}= is not supported: {CELERY_ONLY[option]}"
            )
        raise ConfigError(f"{where}: unknown option {option}={given[option]!r}{_hint(option)}")
    return pool, given


def _hint(option: str) -> str:
    near = difflib.get_close_matches(option, [*TASK_OPTIONS, "name", "pool", "queue"], n=1)
    guess = f" (did you mean {near[0]}=?)" if near else ""
    supported = ", ".join(
        f"{key}" + (f" (Celery: {celery})" if celery and celery != key else "")
        for key, (celery, _) in [
            ("name", ("name", "")),
            ("pool", ("queue", "")),
            *TASK_OPTIONS.items(),
        ]
    )
    return f"{guess}; supported: {supported}"
