"""Tasks, events and the canvas: the Celery-level API on actors.

A task is a function registered on an app (``@app.task``); underneath it is a
handler on a pool of supervised worker actors (``TaskWorker``). ``add.delay(1,
2)`` sends one command message to the pool and returns an ``AsyncResult``; the
worker sends the result back as a document message to the caller's results
actor. An event (``@app.event``) is a class whose ``delay`` publishes one event
message that the cluster's event hub fans out to every subscribed task, once per
subscribing pool.

Chains travel in the message header as a flat list (the next step last), so a
chain of any length costs one header, never recursion. docs/protocol.md §14
specifies the headers.
"""

from __future__ import annotations

import base64
import binascii
import collections
import dataclasses
import datetime
import functools
import inspect
import itertools
import json
import os
import threading
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar, final, overload

import attrs
import trio

from .._errors import ActorctlError, ConfigError
from .._log import log
from ..mailbox import KIND_COMMAND, KIND_EVENT, Envelope, json_dumps
from ._address import Address
from ._handlers import HandlerSpec
from ._ref import Outbox, to_wire
from ._results import FAILURE, AsyncResult, GroupResult, ResultRegistry, _in_trio

__all__ = [
    "CHORDS",
    "EVENTS",
    "SCHEDULER",
    "Directory",
    "Retry",
    "Signature",
    "Task",
    "TaskApp",
    "TaskClient",
    "TaskContext",
    "chain",
    "chord",
    "group",
    "send_task",
]

# Application-property headers of task messages (docs/protocol.md §14).
H_TASK_ID: Final = "task_id"
H_POOL: Final = "pool"
H_STATE: Final = "state"
H_RETRIES: Final = "retries"
H_ETA: Final = "eta"
H_CHAIN: Final = "chain"
H_LINK: Final = "link"
H_LINK_ERROR: Final = "link_error"
H_SINKS: Final = "sinks"
H_TIMELIMIT: Final = "timelimit"
H_PRIORITY: Final = "priority"
H_MAP: Final = "map"
H_TRACK: Final = "track_started"
H_GROUP: Final = "group"
H_CHORD: Final = "chord"
H_EVENT: Final = "event"
H_REPLY_LINK: Final = "reply_link"
CHAIN_SEPARATOR: Final = "\n"  # compact JSON never contains a raw newline
CHAIN_PACKED: Final = "zlib:"
CHAIN_PACK_OVER: Final = 4096

# Names of the cluster's task services in a directory.
EVENTS: Final = "$events"
SCHEDULER: Final = "$scheduler"
CHORDS: Final = "$chords"
CONTROL: Final = "_tasks"  # the per-node task control actor (revokes)

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

_ids = itertools.count()
_id_prefix = os.urandom(6).hex()


def new_task_id() -> str:
    return f"{_id_prefix}-{next(_ids)}"


class Retry(Exception):
    """Raised by ``ctx.retry()`` in a bound task: run the task again later."""

    def __init__(self, exc: BaseException | None = None, countdown: float | None = None) -> None:
        super().__init__(f"retry in {countdown} s" if countdown is not None else "retry")
        self.exc = exc
        self.countdown = countdown


_parse = functools.lru_cache(maxsize=4096)(Address.parse)


@final
@attrs.frozen
class Directory:
    """Where a cluster's pools and task services are.

    Attributes:
        addresses: pool or service name (``celery``, ``$events``,
            ``$scheduler``, ``$chords``) to the address that takes its messages
            (a router, or one worker).
        nodes: pool name to the endpoints (``amqps://host:port``) of the nodes
            that host its workers: revokes go to each.
    """

    addresses: Mapping[str, str] = attrs.field(factory=dict)
    nodes: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)

    def resolve(self, name: str) -> Address:
        """The address of a pool, a service, or an address given as such.

        Raises:
            ConfigError: naming the unknown name and the known ones.
        """
        if "://" in name:
            return _parse(name)
        address = self.addresses.get(name)
        if address is None:
            known = ", ".join(sorted(self.addresses)) or "none"
            raise ConfigError(
                f"no pool or service named {name!r} in the directory (known: {known})"
            )
        return _parse(address)

    def control_addresses(self) -> list[Address]:
        """The task control actor of every node that hosts workers."""
        endpoints = sorted({e for pool in self.nodes.values() for e in pool})
        return [Address.parse(f"{endpoint}/{CONTROL}") for endpoint in endpoints]


_Submitted = tuple[Callable[[], Awaitable[Any]], Callable[[Exception], None]]
SUBMIT_WINDOW: Final = 1000  # sends plain code may hand over before it waits


@final
class TaskClient:
    """What an app sends through: a node's outbox, the directory, and (for a
    caller that wants results) its results registry and address."""

    def __init__(
        self,
        outbox: Outbox,
        directory: Directory,
        *,
        results: ResultRegistry | None = None,
        results_address: str | None = None,
        token: trio.lowlevel.TrioToken | None = None,
    ) -> None:
        self.outbox = outbox
        self.directory = directory
        self.results = results
        self.results_address = results_address
        self.token = token or trio.lowlevel.current_trio_token()
        # Sends that plain code hands over without waiting (see submit()).
        self._queue: collections.deque[
            tuple[Callable[[], Awaitable[Any]], Callable[[Exception], None]]
        ]
        self._queue = collections.deque()
        self._window = threading.BoundedSemaphore(SUBMIT_WINDOW)
        self._lock = threading.Lock()
        self._idle = False
        self._lot = trio.lowlevel.ParkingLot()
        self._pumping = False
        self._drained = trio.Event()

    def submit(
        self, send: Callable[[], Awaitable[Any]], on_error: Callable[[Exception], None]
    ) -> None:
        """From plain code: hand ``send`` to the client's trio thread and return
        at once (blocking only while SUBMIT_WINDOW sends are still waiting), so a
        caller does not pay a thread round trip per task. Sends go out in order;
        one that fails calls ``on_error`` there."""
        if not self._pumping or _in_trio():
            self.run_sync(send)  # in trio's own thread this raises, saying what to use
            return
        self._window.acquire()
        with self._lock:
            self._queue.append((send, on_error))
            wake = self._idle
            self._idle = False
        if wake:
            self.token.run_sync_soon(self._lot.unpark_all)

    async def pump(self) -> None:
        """Send what :meth:`submit` queued, in order, until cancelled."""
        self._pumping = True
        try:
            while True:
                while self._queue:
                    send, on_error = self._queue.popleft()
                    try:
                        await send()
                    except Exception as exc:
                        on_error(exc)
                    finally:
                        self._window.release()
                with self._lock:
                    if self._queue:
                        continue
                    self._idle = True
                self._drained.set()
                await self._lot.park()
                self._drained = trio.Event()
        finally:
            self._pumping = False

    async def drain(self) -> None:
        """Wait until everything submitted has been sent."""
        while True:
            with self._lock:
                if not self._queue and (self._idle or not self._pumping):
                    return
            await self._drained.wait()

    def check_thread(self) -> None:
        """Refuse to be used from a trio run other than the client's own.

        Raises:
            ActorctlError: saying what to use instead.
        """
        try:
            token = trio.lowlevel.current_trio_token()
        except RuntimeError:
            return  # plain code
        if token is not self.token:
            raise ActorctlError(
                "this app's client runs in another trio run (app.connect() gives it a "
                "thread of its own): from trio code, connect with `async with "
                "app.aconnect(...)` instead"
            )

    def run_sync(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``fn`` in the client's trio thread from plain (non-trio) code."""
        if _in_trio():
            self.check_thread()
            raise ActorctlError(
                "this call blocks, and this is trio's thread: use the awaitable form "
                "(`await task.adelay(...)`, `await task.aapply_async(...)`, `await result.aget()`)"
            )
        return trio.from_thread.run(fn, *args, trio_token=self.token)


def _timestamp(value: float | datetime.datetime | None) -> float | None:
    if value is None or isinstance(value, int | float):
        return value
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.astimezone()
        return value.timestamp()
    raise ConfigError(f"expected a datetime or seconds since the epoch, got {value!r}")


def pack_chain(text: str) -> str:
    """A chain header as sent: the text itself, or, past CHAIN_PACK_OVER
    characters, ``zlib:`` and the base64 of its zlib compression (a long chain
    would otherwise cost each step time in proportion to its length, several
    times over: signing, checking, routing)."""
    if len(text) <= CHAIN_PACK_OVER:
        return text
    return CHAIN_PACKED + base64.b64encode(zlib.compress(text.encode(), 1)).decode()


def unpack_chain(header: str) -> str:
    """The text of a chain header.

    Raises:
        ValueError: a packed header that does not unpack.
    """
    if not header.startswith(CHAIN_PACKED):
        return header
    try:
        return zlib.decompress(base64.b64decode(header[len(CHAIN_PACKED) :])).decode()
    except (zlib.error, binascii.Error, UnicodeDecodeError) as exc:
        raise ValueError(f"packed chain header does not unpack: {exc}") from None


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


async def send_task(
    client: TaskClient,
    *,
    task: str,
    pool: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    task_id: str,
    reply_to: str | None,
    correlation_id: str | None = None,
    options: Mapping[str, Any] | None = None,
    headers: Mapping[str, Any] | None = None,
    kind: str = KIND_COMMAND,
    confirm: bool = False,
) -> None:
    """Send one task message to its pool (or to the scheduler, when it is due
    later). Used by callers, and by workers for chain steps, callbacks and retries.

    Options: ``countdown`` or ``eta``, ``expires`` (seconds from now, or a
    datetime), ``priority``, ``time_limit``, ``soft_time_limit``, ``link``,
    ``link_error`` (signatures), ``sinks`` (names or addresses of data sinks),
    ``chain`` (the rest of a chain, as its header text), ``retries``, ``map``.

    Raises:
        ConfigError: an unknown pool, or a delay with no scheduler.
    """
    options = options or {}
    outbox = client.outbox
    now = outbox.now()
    meta: dict[str, Any] = {H_TASK_ID: task_id, H_POOL: pool}
    if headers:
        meta.update(headers)
    eta = _timestamp(options.get("eta"))
    countdown = options.get("countdown")
    if countdown is not None:
        eta = now + float(countdown)
    expires = options.get("expires")
    expiry_time = None
    if expires is not None:
        expiry_time = (
            now + float(expires) if isinstance(expires, int | float) else _timestamp(expires)
        )
    limits = (options.get("time_limit"), options.get("soft_time_limit"))
    if limits != (None, None):
        meta[H_TIMELIMIT] = _compact(list(limits))
    for key, header in (("link", H_LINK), ("link_error", H_LINK_ERROR)):
        linked = options.get(key)
        if linked:
            sigs = linked if isinstance(linked, list | tuple) else [linked]
            meta[header] = _compact([_wire(s, pool) for s in sigs])
    sinks = options.get("sinks")
    if sinks:
        meta[H_SINKS] = sinks if isinstance(sinks, str) else ",".join(sinks)
    for key, header in (("priority", H_PRIORITY), ("retries", H_RETRIES), ("map", H_MAP)):
        if options.get(key) is not None:
            meta[header] = options[key]
    if options.get("track_started"):
        meta[H_TRACK] = True
    if options.get("chain"):
        meta[H_CHAIN] = options["chain"]
    target = client.directory.resolve(pool)
    delayed = eta is not None and eta > now + 0.001
    if reply_to is not None and reply_to == client.results_address and not delayed:
        # The caller's own reply link: a worker it sends to directly answers on
        # the same connection; any other (behind a router, in a chain) at reply_to.
        meta[H_REPLY_LINK] = outbox.reply_address(target)
    if delayed:
        meta[H_ETA] = eta
        target = client.directory.resolve(SCHEDULER)
    envelope = Envelope(
        message_id=outbox.new_message_id(),
        to=str(target),
        subject=task,
        body=[to_wire(list(args)), to_wire(dict(kwargs))],
        kind=kind,
        reply_to=reply_to,
        correlation_id=correlation_id or task_id,
        creation_time=now,
        expiry_time=expiry_time,
        headers=meta,
    )
    await outbox.send(target, envelope, presettled=False, confirm=confirm)


def _wire(sig: Any, pool: str | None = None) -> dict[str, Any]:
    if isinstance(sig, Task):
        sig = sig.s()
    if isinstance(sig, dict):
        return sig
    if not isinstance(sig, Signature):
        raise ConfigError(f"expected a task signature (task.s(...)), got {sig!r}")
    return sig.to_wire(pool)


def signature_from_wire(
    data: Any, pool: str
) -> tuple[str, str, list[Any], dict[str, Any], bool, dict[str, Any]]:
    """(task, pool, args, kwargs, immutable, options) of a signature in a header.

    Raises:
        ValueError: it is not a signature.
    """
    if not isinstance(data, dict) or not isinstance(data.get("t"), str):
        raise ValueError(f"not a task signature: {data!r:.80}")
    args = data.get("a", [])
    kwargs = data.get("k", {})
    options = data.get("o", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict) or not isinstance(options, dict):
        raise ValueError(f"malformed task signature: {data!r:.80}")
    return data["t"], str(data.get("p", pool)), args, kwargs, bool(data.get("i")), options


# -- the user-facing API --------------------------------------------------------


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
        seconds (default: the task's ``default_retry_delay``), up to its
        ``max_retries``; past that, the task fails with ``exc``."""
        raise Retry(exc, countdown)


class Signature:
    """A task call not made yet: ``add.s(2, 2)``; ``add.si(2, 2)`` ignores the
    result of a previous step. Options (``countdown``, ``link``, ...) are kept and
    used when it is sent."""

    def __init__(
        self,
        task: Task,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        options: Mapping[str, Any] | None = None,
        immutable: bool = False,
    ) -> None:
        self.task = task
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.options = dict(options or {})
        self.immutable = immutable

    def clone(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> Signature:
        """A copy with more arguments (appended, unless immutable) and options."""
        return Signature(
            self.task,
            self.args if self.immutable else (*self.args, *args),
            {**self.kwargs, **(kwargs or {})},
            options={**self.options, **options},
            immutable=self.immutable,
        )

    def set(self, **options: Any) -> Signature:
        self.options.update(options)
        return self

    def link(self, callback: Signature) -> Signature:
        """Run ``callback`` with this task's result when it succeeds."""
        self.options.setdefault("link", []).append(callback)
        return callback

    def link_error(self, errback: Signature) -> Signature:
        """Run ``errback(task_id, error)`` when this task fails (``error`` is
        ``{"type", "message"}``)."""
        self.options.setdefault("link_error", []).append(errback)
        return errback

    def on_error(self, errback: Signature) -> Signature:
        self.link_error(errback)
        return self

    def __or__(self, other: Signature | chain) -> chain:
        return chain(self, other)

    def to_wire(self, pool: str | None = None) -> dict[str, Any]:
        wire: dict[str, Any] = {"t": self.task.name}
        if self.task.pool != pool:
            wire["p"] = self.task.pool
        if self.args:
            wire["a"] = to_wire(list(self.args))
        if self.kwargs:
            wire["k"] = to_wire(self.kwargs)
        if self.immutable:
            wire["i"] = True
        options = {k: v for k, v in self.options.items() if k in _STEP_OPTIONS}
        for key in ("link", "link_error"):
            if key in options:
                options[key] = [_wire(s, self.task.pool) for s in options[key]]
        if options:
            wire["o"] = options
        return wire

    # sending
    def delay(self, *args: Any, **kwargs: Any) -> AsyncResult:
        return self.apply_async(args, kwargs)

    def apply_async(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> AsyncResult:
        sig = self.clone(args, kwargs, **options)
        return sig.task.apply_async(sig.args, sig.kwargs, **sig.options)

    async def adelay(self, *args: Any, **kwargs: Any) -> AsyncResult:
        return await self.aapply_async(args, kwargs)

    async def aapply_async(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> AsyncResult:
        sig = self.clone(args, kwargs, **options)
        return await sig.task.aapply_async(sig.args, sig.kwargs, **sig.options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run it here, now (as calling the task does)."""
        sig = self.clone(args, kwargs)
        return sig.task(*sig.args, **sig.kwargs)

    def __repr__(self) -> str:
        call = ", ".join([*map(repr, self.args), *(f"{k}={v!r}" for k, v in self.kwargs.items())])
        return f"{self.task.name}.{'si' if self.immutable else 's'}({call})"


_STEP_OPTIONS = frozenset(
    {
        "countdown",
        "expires",
        "time_limit",
        "soft_time_limit",
        "link",
        "link_error",
        "priority",
        "sinks",
        "map",
    }
)


class chain:
    """Tasks one after another, each getting the previous one's result as its
    first argument (unless made with ``.si``). Its result is the last step's;
    an error in any step stops it and reaches the caller."""

    def __init__(self, *tasks: Signature | chain | Iterable[Signature]) -> None:
        steps: list[Signature] = []
        items: Iterable[Any] = tasks
        if len(tasks) == 1 and not isinstance(tasks[0], Signature | chain):
            items = list(tasks[0])  # chain(generator)
        for item in items:
            if isinstance(item, chain):
                steps.extend(item.steps())
            elif isinstance(item, Signature):
                steps.append(item)
            else:
                raise ConfigError(f"a chain takes task signatures (task.s(...)), got {item!r}")
        if not steps:
            raise ConfigError("a chain needs at least one task")
        self.tasks = steps

    def __or__(self, other: Signature | chain) -> chain:
        return chain(self, other)

    def steps(self) -> list[Signature]:
        return self.tasks

    def header(self) -> str | None:
        """The rest of the chain after its first step, as its header text: the
        next step last, each step's pool written unless it is the previous one's
        (a worker reads a step relative to the pool of the step it just ran)."""
        if len(self.tasks) < 2:
            return None
        steps = [
            _compact(step.to_wire(previous.task.pool))
            for previous, step in itertools.pairwise(self.tasks)
        ]
        return pack_chain(CHAIN_SEPARATOR.join(reversed(steps)))

    def _first(
        self, args: Sequence[Any], kwargs: Mapping[str, Any] | None, options: Mapping[str, Any]
    ) -> Signature:
        header = self.header()
        extra = {"chain": header} if header else {}
        return self.tasks[0].clone(args, kwargs, **extra, **options)

    def apply_async(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> AsyncResult:
        first = self._first(args, kwargs, options)
        return first.task.apply_async(
            first.args, first.kwargs, _name=self.tasks[-1].task.name, **first.options
        )

    async def aapply_async(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> AsyncResult:
        first = self._first(args, kwargs, options)
        return await first.task.aapply_async(
            first.args, first.kwargs, _name=self.tasks[-1].task.name, **first.options
        )

    def delay(self, *args: Any, **kwargs: Any) -> AsyncResult:
        return self.apply_async(args, kwargs)

    async def adelay(self, *args: Any, **kwargs: Any) -> AsyncResult:
        return await self.aapply_async(args, kwargs)

    __call__ = delay

    def __repr__(self) -> str:
        return " | ".join(map(repr, self.tasks))


class group:
    """Tasks run in parallel; the result is a ``GroupResult`` of theirs, in order."""

    def __init__(self, *tasks: Signature | Iterable[Signature]) -> None:
        items: Iterable[Any] = tasks
        if len(tasks) == 1 and not isinstance(tasks[0], Signature):
            items = list(tasks[0])
        self.tasks = [_signature(item) for item in items]

    def apply_async(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> GroupResult:
        if not self.tasks:
            return GroupResult(new_task_id(), [])
        return (
            self.tasks[0]
            .task.app._client_or_raise()
            .run_sync(functools.partial(self.aapply_async, args, kwargs, **options))
        )

    async def aapply_async(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> GroupResult:
        group_id = new_task_id()
        results = []
        for sig in self.tasks:
            sig = sig.clone(args, kwargs, **options)
            results.append(
                await sig.task.aapply_async(sig.args, sig.kwargs, _group=group_id, **sig.options)
            )
        return GroupResult(group_id, results)

    def delay(self, *args: Any, **kwargs: Any) -> GroupResult:
        return self.apply_async(args, kwargs)

    async def adelay(self, *args: Any, **kwargs: Any) -> GroupResult:
        return await self.aapply_async(args, kwargs)

    __call__ = delay

    def __or__(self, other: Signature) -> chord:
        return chord(self, other)


def _signature(item: Any) -> Signature:
    if isinstance(item, Signature):
        return item
    raise ConfigError(f"expected a task signature (task.s(...)), got {item!r}")


class chord:
    """A group (the header) and a callback (the body): the body runs once every
    task of the header has succeeded, with the list of their results as its first
    argument. The barrier is held by the cluster's chord actor, which counts the
    results as they arrive (no store is polled)."""

    def __init__(self, header: group | Iterable[Signature], body: Signature | None = None) -> None:
        self.header = header if isinstance(header, group) else group(header)
        self.body = body

    def __call__(self, body: Signature | None = None, **options: Any) -> AsyncResult:
        if body is not None:
            self.body = body
        return self.apply_async(**options)

    def _body(self) -> Signature:
        if self.body is None:
            raise ConfigError("a chord needs a body: chord(header)(body) or chord(header, body)")
        return self.body

    def apply_async(self, **options: Any) -> AsyncResult:
        return (
            self._body()
            .task.app._client_or_raise()
            .run_sync(functools.partial(self.aapply_async, **options))
        )

    async def aapply_async(self, **options: Any) -> AsyncResult:
        body = self._body().clone(**options)
        app = body.task.app
        client = app._client_or_raise()
        if not self.header.tasks:  # nothing to wait for: the body runs on []
            if not body.immutable:
                body = Signature(body.task, [[], *body.args], body.kwargs, options=body.options)
            return await body.aapply_async()
        chord_id = new_task_id()
        result = app._expect(chord_id, body.task.name, client)
        ids = [new_task_id() for _ in self.header.tasks]
        # The barrier first, confirmed: no result may reach it before it exists.
        opening = Envelope(
            message_id=client.outbox.new_message_id(),
            to="",
            subject="open",
            body=[
                [],
                {
                    "chord_id": chord_id,
                    "tasks": ids,
                    "body": body.to_wire(),
                    "reply_to": result and client.results_address,
                },
            ],
            creation_time=client.outbox.now(),
        )
        barrier = client.directory.resolve(CHORDS)
        await client.outbox.send(
            barrier, attrs.evolve(opening, to=str(barrier)), presettled=False, confirm=True
        )
        for task_id, sig in zip(ids, self.header.tasks, strict=True):
            await send_task(
                client,
                task=sig.task.name,
                pool=sig.task.pool,
                args=sig.args,
                kwargs=sig.kwargs,
                task_id=task_id,
                reply_to=str(barrier),
                correlation_id=chord_id,
                options=sig.options,
                headers={H_CHORD: chord_id},
            )
        return (
            result if result is not None else AsyncResult(chord_id, body.task.name, tracked=False)
        )


class Task:
    """A function registered as a task; made by ``@app.task``.

    Calling it runs the function here and now; ``delay``/``apply_async`` send it
    to its pool (``adelay``/``aapply_async`` from trio code).
    """

    def __init__(
        self,
        app: TaskApp,
        fn: Callable[..., Any],
        *,
        name: str,
        pool: str,
        bind: bool = False,
        max_retries: int | None = 3,
        autoretry_for: tuple[type[BaseException], ...] = (),
        default_retry_delay: float = 1.0,
        retry_backoff: bool = False,
        time_limit: float | None = None,
        soft_time_limit: float | None = None,
        ignore_result: bool = False,
        track_started: bool = False,
        sinks: Sequence[str] = (),
        boxed: bool = False,
    ) -> None:
        self.app = app
        self.fn = fn
        self.name = name
        self.pool = pool
        self.bind = bind
        self.max_retries = max_retries
        self.autoretry_for = autoretry_for
        self.default_retry_delay = default_retry_delay
        self.retry_backoff = retry_backoff
        self.time_limit = time_limit
        self.soft_time_limit = soft_time_limit
        self.ignore_result = ignore_result
        self.track_started = track_started
        self.sinks = tuple(sinks)
        self.boxed = boxed
        self.is_async = inspect.iscoroutinefunction(fn)
        if boxed and (self.is_async or bind):
            raise ConfigError(f"task {name}: a boxed task must be a plain `def` without bind=True")
        self.spec = HandlerSpec(name, _as_method(fn, bind))
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
        ``ignore_result``, ``task_id``. Returns at once: the message goes out from
        the client's thread, in order.

        Raises:
            ConfigError: the app is not connected, or an unknown pool or option.
            WireFormatError: an argument that cannot be sent as JSON.
        """
        client = self.app._client_or_raise()
        result, send = self._prepare(client, args, kwargs, options, check_json=True)

        def failed(exc: Exception) -> None:
            # send() has failed the result the caller holds; the log says it too.
            log("actorctl:task:unsent", task=self.name, task_id=result.id, error=str(exc))

        client.submit(send, failed)
        return result

    async def adelay(self, *args: Any, **kwargs: Any) -> AsyncResult:
        return await self.aapply_async(args, kwargs)

    async def aapply_async(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> AsyncResult:
        """:meth:`apply_async` for trio code; returns once the message is sent."""
        client = self.app._client_or_raise()
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
        check_json: bool = False,
    ) -> tuple[AsyncResult, Callable[[], Awaitable[None]]]:
        """Check everything that can be wrong with a call, and register its
        result, in the caller's thread; return the send for the client's.

        ``check_json``: encode the arguments here too, for a caller whose send
        happens in another thread (where a WireFormatError could not reach it);
        a trio caller gets it from the send itself."""
        client.check_thread()
        unknown = set(options) - _SEND_OPTIONS
        if unknown:
            raise ConfigError(
                f"task {self.name}: unknown option(s) {sorted(unknown)} "
                f"(known: {sorted(o for o in _SEND_OPTIONS if not o.startswith('_'))})"
            )
        client.directory.resolve(self.pool)
        if options.get("countdown") is not None or options.get("eta") is not None:
            client.directory.resolve(SCHEDULER)
        kwargs = dict(kwargs or {})
        if check_json:
            json_dumps([to_wire(list(args)), to_wire(kwargs)])  # raises WireFormatError
        task_id = options.pop("task_id", None) or new_task_id()
        ignore = options.pop("ignore_result", self.ignore_result)
        name = options.pop("_name", self.name)
        group_id = options.pop("_group", None)
        options.setdefault("sinks", self.sinks)
        if self.track_started:
            options.setdefault("track_started", True)
        expected = None if ignore else self.app._expect(task_id, name, client)
        result = expected or AsyncResult(
            task_id,
            name,
            revoke=self.app.control.revoke,
            arevoke=self.app.control.arevoke,
            tracked=False,
        )

        async def send() -> None:
            try:
                await send_task(
                    client,
                    task=self.name,
                    pool=self.pool,
                    args=args,
                    kwargs=kwargs,
                    task_id=task_id,
                    reply_to=client.results_address if expected is not None else None,
                    options=options,
                    headers={H_GROUP: group_id} if group_id else None,
                )
            except Exception as exc:
                if expected is not None and client.results is not None:
                    # Whoever waits for it hears why it was not sent.
                    error = {"type": type(exc).__name__, "message": f"not sent: {exc}"}
                    client.results.deliver(task_id, FAILURE, error, {})
                raise

        return result, send

    def __repr__(self) -> str:
        return f"<Task {self.name} pool={self.pool}>"


_SEND_OPTIONS = frozenset(
    {
        "countdown", "eta", "expires", "priority", "time_limit", "soft_time_limit", "link",
        "link_error", "sinks", "ignore_result", "task_id", "chain", "retries", "map",
        "track_started", "_name", "_group",
    }
)  # fmt: skip


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


@final
class Control:
    """``app.control``: revoke tasks across the cluster."""

    def __init__(self, app: TaskApp) -> None:
        self._app = app

    def revoke(self, task_id: str | Sequence[str], terminate: bool = False) -> None:
        """Revoke tasks: a queued or delayed one never runs anywhere in its pool
        (it reports REVOKED); a running one sees ``ctx.is_aborted()`` turn true,
        and with ``terminate`` an async one is cancelled. Blocks until every
        node that hosts workers (and the scheduler) has recorded it."""
        client = self._app._client_or_raise()
        client.run_sync(functools.partial(self.arevoke, task_id, terminate))

    async def arevoke(self, task_id: str | Sequence[str], terminate: bool = False) -> None:
        """:meth:`revoke` for trio code."""
        client = self._app._client_or_raise()
        ids = [task_id] if isinstance(task_id, str) else list(task_id)
        targets = client.directory.control_addresses()
        if SCHEDULER in client.directory.addresses:
            targets.append(client.directory.resolve(SCHEDULER))
        if not targets:
            raise ConfigError("revoke: the directory names no node that hosts task workers")
        outbox = client.outbox
        async with trio.open_nursery() as nursery:
            for target in targets:
                envelope = Envelope(
                    message_id=outbox.new_message_id(),
                    to=str(target),
                    subject="revoke",
                    body=[[ids], {"terminate": terminate}],
                    creation_time=outbox.now(),
                )
                nursery.start_soon(
                    functools.partial(outbox.send, target, envelope, presettled=False, confirm=True)
                )


class TaskApp:
    """The tasks, events and pools of an application: Celery's app object.

    Args:
        name: the app's name; a task's default name is ``NAME.FUNCTION``.
        default_pool: the pool tasks go to unless they name another.
    """

    def __init__(self, name: str, *, default_pool: str = "celery") -> None:
        self.name = name
        self.default_pool = default_pool
        self.tasks: dict[str, Task] = {}
        self.events: dict[str, type] = {}
        self.subscriptions: dict[str, list[Task]] = {}
        self.pools: dict[str, dict[str, Any]] = {}
        self.control = Control(self)
        self._client: TaskClient | None = None

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

        Options: ``bind`` (first argument is a ``TaskContext``), ``max_retries``,
        ``autoretry_for``, ``default_retry_delay``, ``retry_backoff``,
        ``time_limit``, ``soft_time_limit``, ``ignore_result``, ``track_started``,
        ``sinks`` (data-sink actors that also get its results), ``boxed`` (run it
        in a process of its own, which its hard time limit can kill).
        """

        def register(fn: Callable[..., Any]) -> Task:
            task_name = name or f"{self.name}.{fn.__name__}"
            if task_name in self.tasks:
                raise ConfigError(f"two tasks are named {task_name!r}: give one name=...")
            task = Task(self, fn, name=task_name, pool=pool or self.default_pool, **options)
            self.tasks[task_name] = task
            self.pools.setdefault(task.pool, {})
            return task

        return register(fn) if fn is not None else register

    def pool(
        self, name: str, *, concurrency: int = 4, mailbox_capacity: int = 100, threads: bool = True
    ) -> None:
        """Set how a pool's worker actors run.

        Args:
            concurrency: tasks each worker runs at once (async tasks as trio
                tasks, plain ``def`` ones in that many threads).
            mailbox_capacity: messages each worker holds (its link credit).
            threads: False runs plain ``def`` tasks inline on the node's event
                loop, one at a time, as Celery's solo pool does: several times
                faster for short tasks (no thread hand-off, no GIL contention),
                but a long one holds up the node, and its time limits are raised
                in it rather than enforced from outside.
        """
        if concurrency < 1 or mailbox_capacity < 1:
            raise ConfigError(f"pool {name!r}: concurrency and mailbox_capacity must be >= 1")
        if not threads and concurrency != 1:
            raise ConfigError(
                f"pool {name!r}: threads=False runs one task at a time: concurrency=1"
            )
        self.pools[name] = {
            "concurrency": concurrency,
            "mailbox_capacity": mailbox_capacity,
            "threads": threads,
        }

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
        event_name = _event_name(event)
        if not isinstance(task, Task):
            raise ConfigError(f"{task!r} is not a task: decorate it with @app.task first")
        subscribed = self.subscriptions.setdefault(event_name, [])
        if task not in subscribed:
            subscribed.append(task)
        return task

    def publish(self, event: Any, *, sinks: Sequence[str] = ()) -> None:
        """Publish one event message (blocking until the event hub took it).

        ``sinks``: data sinks that get the result of every task it reaches."""
        self._client_or_raise().run_sync(functools.partial(self.apublish, event, sinks=sinks))

    async def apublish(self, event: Any, *, sinks: Sequence[str] = ()) -> None:
        """:meth:`publish` for trio code."""
        event_name = _event_name(type(event))
        client = self._client_or_raise()
        hub = client.directory.resolve(EVENTS)
        outbox = client.outbox
        envelope = Envelope(
            message_id=outbox.new_message_id(),
            to=str(hub),
            subject=event_name,
            body=[[], to_wire(event)],
            kind=KIND_EVENT,
            creation_time=outbox.now(),
            headers={H_EVENT: event_name, **({H_SINKS: ",".join(sinks)} if sinks else {})},
        )
        await outbox.send(hub, envelope, presettled=False, confirm=True)

    # -- the connection --------------------------------------------------------------

    def attach(self, client: TaskClient | None) -> None:
        """Send through ``client`` from now on (None detaches)."""
        self._client = client

    @property
    def client(self) -> TaskClient | None:
        return self._client

    def _client_or_raise(self) -> TaskClient:
        if self._client is None:
            raise ConfigError(
                f"app {self.name!r} is not connected to a cluster: use "
                "`with app.connect('cluster.toml'):` (or `async with app.aconnect(...)` in trio)"
            )
        return self._client

    def _expect(self, task_id: str, name: str, client: TaskClient) -> AsyncResult | None:
        if client.results is None or client.results_address is None:
            return None
        result = AsyncResult(
            task_id, name, revoke=self.control.revoke, arevoke=self.control.arevoke
        )
        client.results.expect(result)
        return result

    def __repr__(self) -> str:
        return f"<App {self.name!r} tasks={len(self.tasks)} events={len(self.events)}>"


def _event_name(event: type) -> str:
    name = getattr(event, "__actorctl_event__", None)
    if not isinstance(name, str):
        raise ConfigError(f"{event!r} is not an event: decorate it with @app.event")
    return name
