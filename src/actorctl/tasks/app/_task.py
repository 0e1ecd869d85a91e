"""Tasks: functions registered on an app, and what a bound task gets.

A :class:`Task` is made by ``@app.task``. Calling it runs the function here;
``delay``/``apply_async`` send it to its pool through the client of the calling
context (``adelay``/``aapply_async`` from trio code) and return an
``AsyncResult``. A bound task (``bind=True``) gets a :class:`TaskContext` as its
first argument.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from types import EllipsisType
from typing import Any, Final

import attrs

from ..._errors import ConfigError
from ..._log import log
from ...actors import HandlerSpec
from ...supervision import DEFAULT_RETRY_POLICY, RetryPolicy
from ..client._client import TaskClient, current_client, send_task
from ..client._results import AsyncResult, in_trio
from ..client._validate import check_references, wire_body
from ..limits._rates import rate_limit_of
from ..protocol._protocol import FAILURE, H_GROUP, H_RETRY_POLICY, SCHEDULER, new_task_id
from ..protocol._send_options import SendOptions
from ..protocol._task_errors import TaskError
from ..worker._control import new_result
from ._canvas import group
from ._eager_api import EagerRunner
from ._signature import Signature, wire_options

__all__ = ["PER_CALL", "Retry", "Task", "TaskContext", "check_send_options"]

#: ``boxed=PER_CALL``: a process of its own for each call, as before workers lived long.
PER_CALL: Final = "per-call"


class Retry(Exception):
    """Raised by ``ctx.retry()`` in a bound task: run the task again later."""

    def __init__(self, exc: BaseException | None = None, countdown: float | None = None) -> None:
        super().__init__(f"retry in {countdown} s" if countdown is not None else "retry")
        self.exc = exc
        self.countdown = countdown


class TaskContext:
    """What a bound task (``@app.task(bind=True)``) gets as its first argument:
    its request (``ctx.id``, ``ctx.retries``, ...), ``retry()`` and ``is_aborted()``.
    """

    def __init__(
        self,
        task: Task,
        task_id: str,
        *,
        retries: int = 0,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        aborted: Callable[[], bool] = lambda: False,
    ) -> None:
        self.task = task
        self.id = task_id
        self.retries = retries
        self.args = list(args)
        self.kwargs = dict(kwargs or {})
        self._aborted = aborted

    @property
    def request(self) -> TaskContext:
        """Celery's ``self.request``: this object."""
        return self

    def is_aborted(self) -> bool:
        """Whether the task was revoked while it runs: stop cooperatively."""
        return self._aborted()

    def retry(self, *, exc: BaseException | None = None, countdown: float | None = None) -> Retry:
        """Raise ``Retry``: the worker sends the task again after ``countdown``
        seconds (default: the task's ``default_retry_delay`` if it has one,
        else its retry policy's backoff), up to its ``max_retries``; past that,
        the task fails with ``exc`` and is dead-lettered."""
        raise Retry(exc, countdown)


class Task:
    """A function registered as a task; made by ``@app.task``.

    Calling it runs the function here and now; ``delay``/``apply_async`` send it
    to its pool (``adelay``/``aapply_async`` from trio code).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str,
        pool: str,
        bind: bool = False,
        max_retries: int | EllipsisType | None = ...,
        autoretry_for: tuple[type[BaseException], ...] = (),
        default_retry_delay: float | None = None,
        retry_backoff: bool = False,
        retry_policy: RetryPolicy | Mapping[str, Any] | None = None,
        base_policy: RetryPolicy = DEFAULT_RETRY_POLICY,
        time_limit: float | None = None,
        soft_time_limit: float | None = None,
        ignore_result: bool = False,
        track_started: bool = False,
        sinks: Sequence[str] = (),
        boxed: bool | str = False,
        breaker: object = None,
        acks_late: bool = True,
        rate_limit: str | float | None = None,
        global_rate_limit: str | float | None = None,
        concurrency: int | None = None,
        concurrency_key: Callable[..., Any] | None = None,
        concurrency_per_key: int | None = None,
    ) -> None:
        self.fn = fn
        self.name = name
        self.pool = pool
        self.bind = bind
        #: How a failure of this task is retried: the app's policy, with the
        #: task's ``retry_policy``, ``max_retries`` and ``autoretry_for``.
        self.retry_policy = _task_policy(base_policy, retry_policy, max_retries, autoretry_for)
        self.max_retries = self.retry_policy.max_retries
        self.autoretry_for = autoretry_for
        self.default_retry_delay = default_retry_delay
        self.retry_backoff = retry_backoff
        self.time_limit = time_limit
        self.soft_time_limit = soft_time_limit
        self.ignore_result = ignore_result
        self.track_started = track_started
        self.sinks = tuple(sinks)
        self.boxed = boxed
        self.breaker = breaker  # True, a BreakerPolicy or a declared name (``_breakers.py``)
        #: False: at-most-once, sent pre-settled at every hop (never run twice).
        self.acks_late = acks_late
        self.is_async = inspect.iscoroutinefunction(fn)
        #: At most this many starts per period on each worker (Celery's rate_limit).
        self.rate_limit = rate_limit_of(rate_limit, what=f"task {name}: rate_limit")
        #: At most this many starts per period across the pool (its router paces them).
        self.global_rate_limit = rate_limit_of(
            global_rate_limit, what=f"task {name}: global_rate_limit"
        )
        #: At most this many running at once on each worker (0: suspended until
        #: ``actorctl control resume``).
        self.concurrency = _count(name, "concurrency", concurrency, least=0)
        #: At most ``concurrency_per_key`` running at once per key on each
        #: worker, the key computed from the task's arguments.
        self.concurrency_key = concurrency_key
        self.concurrency_per_key = _count(name, "concurrency_per_key", concurrency_per_key, least=1)
        if (concurrency_key is None) != (concurrency_per_key is None):
            raise ConfigError(
                f"task {name}: concurrency tokens need both concurrency_key= (a function of "
                "the task's arguments that returns the key) and concurrency_per_key= (how "
                "many may run at once per key)"
            )
        if concurrency_key is not None and not callable(concurrency_key):
            raise ConfigError(
                f"task {name}: concurrency_key={concurrency_key!r}: give a function of the "
                "task's arguments that returns the key (e.g. lambda customer, **_: customer)"
            )
        if boxed not in (True, False, PER_CALL):
            raise ConfigError(
                f"task {name}: boxed={boxed!r}: expected True (a long-lived boxed worker), "
                f'"{PER_CALL}" (a process for each call) or False'
            )
        if boxed and (self.is_async or bind):
            raise ConfigError(f"task {name}: a boxed task must be a plain `def` without bind=True")
        self.spec = HandlerSpec(name, _as_method(fn, bind))
        #: Its app's eager runner (set when the app registers it): while that
        #: is on, ``delay()`` runs the task here instead of sending it.
        self.eager: EagerRunner | None = None
        # its own send options, and the settings they were made from (_send_options)
        self._own_options: tuple[tuple[object, ...], SendOptions] | None = None
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.bind:
            return self.fn(
                TaskContext(self, new_task_id(), args=args, kwargs=kwargs), *args, **kwargs
            )
        return self.fn(*args, **kwargs)

    # -- signatures and the canvas --------------------------------------------------

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        return Signature(self, args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        return Signature(self, args, kwargs, immutable=True)

    def signature(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> Signature:
        return Signature(self, args, kwargs, options=options)

    def map(self, items: Iterable[Any]) -> Signature:
        """One task that runs this one on each item in turn; its result is the list."""
        return Signature(self, [list(items)], options={"map": "map"}, immutable=True)

    def starmap(self, items: Iterable[Sequence[Any]]) -> Signature:
        """As :meth:`map`, each item being the arguments of one call."""
        return Signature(
            self, [[list(i) for i in items]], options={"map": "starmap"}, immutable=True
        )

    def chunks(self, items: Iterable[Sequence[Any]], size: int) -> group:
        """A group of starmaps over ``items`` split into chunks of ``size``."""
        if size < 1:
            raise ConfigError(f"chunks of {size}: the size must be at least 1")
        listed = [list(i) for i in items]
        return group(self.starmap(listed[i : i + size]) for i in range(0, len(listed), size))

    # -- sending -------------------------------------------------------------------

    def delay(self, *args: Any, **kwargs: Any) -> AsyncResult:
        """Send it to its pool; returns the result handle at once."""
        return self.apply_async(args, kwargs)

    def apply_async(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> AsyncResult:
        """Send it with options: ``countdown``/``eta``, ``expires``, ``priority``,
        ``time_limit``, ``soft_time_limit``, ``link``, ``link_error``, ``sinks``,
        ``ignore_result``, ``task_id``, ``retry_policy`` (a ``RetryPolicy``
        or a dict of its numbers) and ``max_retries``: this call's retries,
        carried in the message (docs/fault-tolerance.md). Through a pool's router (a cluster with
        a services node), it returns once the router's node holds the message:
        sent means it will run, whatever happens to this process after. A pool
        reached directly (one worker, no router) settles a task only after
        running it: then it returns at once, and the message goes out from the
        client's thread, in order. In eager mode (``App(..., eager=True)``) it
        runs the task here instead, and returns its final result
        (``_eager.py``, docs/testing.md).

        Raises:
            ConfigError: the app is not connected, or an unknown option, or a
                pool or sink (of the task, its callbacks or its chain's steps)
                that the cluster's directory does not know.
            WireFormatError: an argument that cannot be sent as JSON.
        """
        if self.eager is not None and self.eager.active:
            return self.eager.apply(self, args, kwargs, options)
        client = current_client(f"task {self.name}")
        if in_trio():  # before anything is registered: it would block trio's thread
            client.refuse_blocking()
        result, send = self._prepare(client, args, kwargs, options, plain=True)

        def failed(exc: Exception) -> None:
            # send() has failed the result the caller holds; the log says it too.
            log("actorctl:task:unsent", task=self.name, task_id=result.id, error=str(exc))

        if self.pool in client.directory.accepting:
            client.wait_in_client_thread(send)
        else:
            client.submit(send, failed, plain=True)
        return result

    async def adelay(self, *args: Any, **kwargs: Any) -> AsyncResult:
        return await self.aapply_async(args, kwargs)

    async def aapply_async(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> AsyncResult:
        """:meth:`apply_async` for trio code; returns once the message is sent."""
        if self.eager is not None and self.eager.active:
            return await self.eager.aapply(self, args, kwargs, options)
        client = current_client(f"task {self.name}")
        result, send = self._prepare(client, args, kwargs, options)
        await send()
        return result

    def _prepare(
        self,
        client: TaskClient,
        args: Sequence[Any],
        kwargs: Mapping[str, Any] | None,
        options: dict[str, Any],
        *,
        plain: bool = False,
    ) -> tuple[AsyncResult, Callable[[], Awaitable[None]]]:
        """Check everything that can be wrong with a call, and register its
        result, in the caller's thread; return the send for the client's.

        ``plain``: a caller in plain code (``apply_async``), which made sure it
        is not in trio's thread already. Its arguments are encoded here too,
        since its send happens in another thread (where a WireFormatError could
        not reach it); a trio caller gets that from the send itself."""
        if not plain:
            client.check_thread()
        directory = client.directory
        target = directory.resolve(self.pool)
        if options:
            check_send_options(self.name, options)
            if ("countdown" in options or "eta" in options) and (
                options.get("countdown") is not None or options.get("eta") is not None
            ):
                directory.resolve(SCHEDULER)
            # Taken out of ``options`` if given (a membership test first: no
            # call for an option not given, such as all three but one here).
            task_id = (options.pop("task_id") if "task_id" in options else None) or (
                client.task_ids.new()
            )
            ignore = (
                options.pop("ignore_result") if "ignore_result" in options else self.ignore_result
            )
            name = options.pop("_name") if "_name" in options else self.name
            headers = self._headers(options) if options else None  # (ignore_result alone: none)
        else:  # delay(): the task's own options only
            task_id, ignore, name = client.task_ids.new(), self.ignore_result, self.name
            headers = None
        body = wire_body(args, kwargs or {}, check=plain)
        sent = self._send_options(options)
        if sent.sinks or sent.link or sent.link_error or sent.chain:  # (else it names none)
            check_references(directory, f"task {self.name}", self.pool, sent)
        result = new_result(client, task_id, name, tracked=not ignore)
        # A client with no results (a worker's, the beat's: a task's subtask)
        # waits for none: its result is tracked by nobody, and goes nowhere.
        # (``result.tracked``, as new_result sets it: no call per send.)
        tracked = not ignore and client.results is not None
        reply_to = client.outbox.reply_address(target) if tracked else None

        async def send() -> None:
            try:
                await send_task(
                    client,
                    task=self.name,
                    pool=self.pool,
                    args=body[0],
                    kwargs=body[1],
                    wired=True,
                    task_id=task_id,
                    reply_to=reply_to,
                    options=sent,
                    headers=headers,
                )
            except Exception as exc:
                if tracked and client.results is not None:
                    # Whoever waits for it hears why it was not sent.
                    error = TaskError(type(exc).__name__, f"not sent: {exc}")
                    client.results.deliver(task_id, FAILURE, error.wire(), {})
                raise

        return result, send

    def _headers(self, options: dict[str, Any]) -> dict[str, Any] | None:
        """The extra headers of a call (its group, its retry policy), taken
        out of ``options``; None if it has none."""
        group_id = options.pop("_group", None)
        headers: dict[str, Any] | None = {H_GROUP: group_id} if group_id else None
        if "retry_policy" in options or "max_retries" in options:
            policy = _call_policy(
                self, options.pop("retry_policy", None), options.pop("max_retries", None)
            )
            if policy is not None:
                headers = {**(headers or {}), H_RETRY_POLICY: policy}
        return headers

    def _send_options(self, options: dict[str, Any]) -> SendOptions:
        """The send options of a call: ``options`` (its own, checked) with the
        task's. A call that gives none (``delay()``) gets the task's, checked
        once and kept (a frozen record) while the settings they come from stay
        (``app.conf`` may change them: ``Registry._apply_setting``)."""
        if not options:
            settings = (self.pool, self.sinks, self.track_started, self.acks_late)
            kept = self._own_options
            if kept is not None and kept[0] == settings:
                return kept[1]
        given = dict(options)
        given.setdefault("sinks", self.sinks)
        if self.track_started:
            given.setdefault("track_started", True)
        if not self.acks_late:
            given.setdefault("acks_late", False)
        sent = SendOptions.of(wire_options(given, self.pool), f"task {self.name}")
        if not options:
            self._own_options = (settings, sent)
        return sent

    def __repr__(self) -> str:
        return f"<Task {self.name} pool={self.pool}>"


#: What ``apply_async`` takes: the options of the send, and its own.
_SEND_OPTIONS: Final = frozenset(attrs.fields_dict(SendOptions)) | {
    "ignore_result", "task_id", "_name", "_group", "max_retries",
}  # fmt: skip


def check_send_options(task: str, options: Mapping[str, Any]) -> None:
    """Refuse an option ``apply_async`` does not take.

    Raises:
        ConfigError: naming the unknown options, the nearest known one, and
            the known ones.
    """
    unknown = set(options) - _SEND_OPTIONS
    if unknown:
        known = sorted(o for o in _SEND_OPTIONS if not o.startswith("_"))
        routing = (
            " (a task runs in its own pool: @app.task(pool=...))"
            if unknown & {"queue", "routing_key", "exchange"}
            else ""
        )
        near = [m for u in sorted(unknown) for m in difflib.get_close_matches(u, known, n=1)]
        hint = f" (did you mean {', '.join(f'{m}=' for m in near)}?)" if near else ""
        raise ConfigError(
            f"task {task}: unknown option(s) {sorted(unknown)}{routing}{hint} (known: {known})"
        )


def _task_policy(
    base: RetryPolicy,
    given: RetryPolicy | Mapping[str, Any] | None,
    max_retries: int | EllipsisType | None,
    autoretry_for: tuple[type[BaseException], ...],
) -> RetryPolicy:
    """A task's retry policy: ``base`` (the app's), then the task's own."""
    policy = base
    if isinstance(given, RetryPolicy):
        policy = given
    elif given is not None:
        policy = RetryPolicy.from_options(given, base)
    if max_retries is not ...:
        policy = attrs.evolve(policy, max_retries=max_retries)
    if autoretry_for:
        policy = attrs.evolve(policy, on=autoretry_for)
    return policy


def _call_policy(task: Task, given: Any, max_retries: Any) -> str | None:
    """The ``retry_policy`` header of one call (its numbers), or None."""
    if given is None and max_retries is None:
        return None
    policy = task.retry_policy
    if isinstance(given, RetryPolicy):
        policy = given
    elif isinstance(given, Mapping):
        policy = RetryPolicy.from_options(given, policy)
    elif given is not None:
        raise ConfigError(
            f"task {task.name}: retry_policy={given!r} must be a RetryPolicy "
            "or a dict of its fields"
        )
    if max_retries is not None:
        policy = RetryPolicy.from_options({"max_retries": max_retries}, policy)
    return policy.to_wire()


def _count(task: str, option: str, value: object, *, least: int) -> int | None:
    """A whole-number option that may be None.

    Raises:
        ConfigError: naming the task, the option and the value.
    """
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ConfigError(f"task {task}: {option}={value!r}: give a whole number, {least} or more")
    return value


def _as_method(fn: Callable[..., Any], bind: bool) -> Callable[..., Any]:
    """``fn`` with a leading parameter to stand for ``self`` (HandlerSpec binds
    methods): the context of a bound task, or a placeholder."""
    if bind:
        return fn
    signature = inspect.signature(fn)
    placeholder = inspect.Parameter("_task", inspect.Parameter.POSITIONAL_ONLY)

    @functools.wraps(fn)
    def method(_task: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    method.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[placeholder, *signature.parameters.values()]
    )
    return method
