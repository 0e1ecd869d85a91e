"""How task code sends: the cluster's directory, the client, and ``send_task``.

A :class:`TaskClient` is what an app sends through: a node's outbox, the
directory of the cluster's pools and services and, for a caller that wants
results, its result registry. It is never stored on the app (apps are module
globals): code sends through the client of its context (:func:`using_client`),
which ``app.connect`` / ``app.aconnect`` set for the caller and a worker sets
around each task it runs, so that ``add.delay()`` inside a task sends through
that worker's node.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import socket
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, NoReturn, TypeVar, final

import attrs
import trio

from ..._errors import ConfigError, MisuseError, Modified, PeerUnavailable
from ..._log import log
from ...actors import Outbox, to_wire
from ...cluster import AT_MOST_ONCE
from ...mailbox import KIND_COMMAND, STOPPING, Envelope
from ..protocol._protocol import (
    H_CHAIN,
    H_ETA,
    H_LINK,
    H_LINK_ERROR,
    H_MAP,
    H_POOL,
    H_PRIORITY,
    H_RETRIES,
    H_RETRY_POLICY,
    H_SINKS,
    H_TASK_ID,
    H_TIMELIMIT,
    H_TRACK,
    SCHEDULER,
    TaskIds,
    compact,
)
from ..protocol._send_options import SendOptions
from ._directory import Directory
from ._result_registry import ResultRegistry
from ._results import in_trio

__all__ = ["Directory", "TaskClient", "current_client", "send_task", "using_client"]

T = TypeVar("T")
SUBMIT_WINDOW: Final = 1000  # sends plain code may hand over before it waits


_Submitted = tuple[Callable[[], Awaitable[Any]], Callable[[Exception], None]]


@final
class TaskClient:
    """What an app sends through: a node's outbox, the directory, and (for a
    caller that wants results) its result registry.

    Args:
        outbox: the node's outbox.
        directory: where the pools and services are.
        results: the caller's result registry; None for a sender nobody answers
            (a worker: the results of tasks sent from inside tasks go to no one).
        token: the trio run the outbox belongs to (default: the current one).
        window: how many sends plain code may hand over before it waits (:meth:`submit`).
    """

    def __init__(
        self,
        outbox: Outbox,
        directory: Directory,
        *,
        results: ResultRegistry | None = None,
        token: trio.lowlevel.TrioToken | None = None,
        window: int = SUBMIT_WINDOW,
    ) -> None:
        self.outbox = outbox
        self.directory = directory
        self.results = results
        self.token = token or trio.lowlevel.current_trio_token()
        #: The ids of the tasks sent through it (drawn in batches: ``TaskIds``).
        self.task_ids = TaskIds()
        #: Where what a services node that lost its role had not taken goes
        #: (``Directory.elsewhere``), across hosts; None on one host. (Fixed
        #: with the directory: looked up once, not per send.)
        self.reroute = directory.elsewhere if directory.elected else None
        # Sends that plain code hands over without waiting (see submit()).
        self._queue: collections.deque[_Submitted] = collections.deque()
        self._lock = threading.Lock()
        self._idle = False  # the pump waits for the bell (under the lock)
        self._bell: socket.socket | None = None  # rings the pump awake (under the lock)
        self._pumping = False
        # The window: sends handed over (counted under the lock) and sent (by
        # the pump alone); a submit that finds ``window`` unsent waits on
        # ``_room`` (made held, under the lock), which the pump lets go once
        # at most half of them are left.
        self._window = max(window, 1)
        self._low = self._window // 2
        self._submitted = 0
        self._sent = 0
        self._room: threading.Lock | None = None
        self._drained = trio.lowlevel.ParkingLot()  # unparked as the pump goes idle

    def submit(
        self,
        send: Callable[[], Awaitable[Any]],
        on_error: Callable[[Exception], None],
        *,
        plain: bool = False,
    ) -> None:
        """From plain code: hand ``send`` to the client's trio thread and return
        at once (once its window of sends are waiting, it blocks until half of
        them went), so a caller does not pay a thread round trip per task. Sends go out in order;
        one that fails calls ``on_error`` there. Without :meth:`pump` running
        (a worker's client), it waits for the send instead. ``plain``: the
        caller made sure this is not trio's thread (see :meth:`refuse_blocking`)."""
        if not self._pumping or (not plain and in_trio()):
            self.wait_in_client_thread(send)  # in trio's thread this raises, saying what to use
            return
        with self._lock:
            self._queue.append((send, on_error))
            self._submitted += 1
            if self._idle and self._bell is not None:
                # The pump waits on the bell's socket itself: trio wakes it from
                # its I/O wait directly, a scheduler pass sooner than a callback
                # run through the trio token (which would then wake the pump).
                self._idle = False
                _ring(self._bell)
            room = self._room
            if room is None and self._submitted - self._sent >= self._window:
                room = self._room = threading.Lock()
                room.acquire()
        if room is not None:
            # The window is full: wait until the pump sent half of it (a wake
            # per half window, not one per send), and let the next waiter go.
            room.acquire()
            room.release()

    async def pump(self) -> None:
        """Send what :meth:`submit` queued, in order, until cancelled: all of
        it at each wake, with no wake needed while it has more to send."""
        heard, bell = socket.socketpair()
        heard.setblocking(False)
        bell.setblocking(False)
        with self._lock:
            self._bell = bell
        self._pumping = True
        try:
            while True:
                while self._queue:
                    send, on_error = self._queue.popleft()
                    try:
                        await send()
                    except Exception as exc:
                        on_error(exc)
                    self._sent += 1
                    # A submit waits for room: let it go once at most half the
                    # window is unsent. (Looked at without the lock first: a
                    # count read early is lower, so this never skips a release
                    # that _make_room, which looks again under the lock, would make.)
                    if self._room is not None and self._submitted - self._sent <= self._low:
                        self._make_room()
                with self._lock:
                    if self._queue:
                        continue
                    self._idle = True
                    # Everything is sent: a submit that made its room while the
                    # last sends went (after the pump looked) must not wait on.
                    room, self._room = self._room, None
                if room is not None:
                    room.release()
                if self._drained:  # someone waits in wait_drained
                    self._drained.unpark_all()
                await trio.lowlevel.wait_readable(heard)
                _hush(heard)
        finally:
            self._pumping = False
            with self._lock:
                self._bell = None
                self._idle = False
                room, self._room = self._room, None
            if room is not None:
                room.release()  # nothing sends any more: a waiting submit is not kept
            bell.close()
            heard.close()

    def _make_room(self) -> None:
        """Let a submit that waits for room go, once at most half the window
        is unsent. (A submit that makes ``_room`` after the pump looked has a
        window unsent: the pump looks again after the next send.)"""
        with self._lock:
            room = self._room
            if room is None or self._submitted - self._sent > self._low:
                return
            self._room = None
        room.release()

    @property
    def drained(self) -> bool:
        """Whether everything submitted has been sent."""
        with self._lock:
            return not self._queue and (self._idle or not self._pumping)

    async def wait_drained(self) -> None:
        """Wait until everything submitted has been sent."""
        while True:
            with self._lock:
                if not self._queue and (self._idle or not self._pumping):
                    return
            await self._drained.park()

    def check_thread(self) -> None:
        """Refuse to be used from a trio run other than the client's own.

        Raises:
            MisuseError: saying what to use instead.
        """
        try:  # one call (a trio caller checks on every send), not in_trio_run's two more
            token = trio.lowlevel.current_trio_token()
        except RuntimeError:
            return  # plain code
        if token is not self.token:
            raise MisuseError(
                "this app's client runs in another trio run (app.connect() gives it a "
                "thread of its own): from trio code, connect with `async with "
                "app.aconnect(...)` instead"
            )

    def wait_in_client_thread(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``fn(*args)`` in the client's trio thread and block this (plain,
        non-trio) thread until it returns.

        Raises:
            MisuseError: called from trio's own thread, where it would block
                the event loop (saying which awaitable to use).
        """
        if in_trio():
            self.refuse_blocking()
        return trio.from_thread.run(fn, *args, trio_token=self.token)

    def refuse_blocking(self) -> NoReturn:
        """A call that blocks, made in trio's thread: refuse it.

        Raises:
            MisuseError: saying which awaitable to use (or, from another trio
                run than the client's, how to connect there: :meth:`check_thread`).
        """
        self.check_thread()
        raise MisuseError(
            "this call blocks, and this is trio's thread: use the awaitable form "
            "(`await task.adelay(...)`, `await task.aapply_async(...)`, `await result.aget()`)"
        )


def _ring(bell: socket.socket) -> None:
    """Wake the pump: a byte on the bell (a full one already wakes it). (A
    try, not contextlib.suppress: that costs three calls, on every send
    that wakes the pump.)"""
    try:
        bell.send(b"\0")
    except BlockingIOError:
        return


def _hush(heard: socket.socket) -> None:
    """Take the byte that woke the pump. (One: a submit rings only a pump
    that went idle, once; one read takes it, and anything left would only
    wake the pump once more.)"""
    try:
        heard.recv(4096)
    except BlockingIOError:
        return


# The client of the running context. Not shared state: a ContextVar is task-local
# (each trio task and each thread sees the value of the context it was started
# in), so it carries the client through one caller's block or one running task
# (``add.delay()`` inside a task sends through that worker's node), never across.
_current: contextvars.ContextVar[TaskClient | None] = contextvars.ContextVar(
    "actorctl_task_client", default=None
)


def using_client(client: TaskClient) -> contextlib.AbstractContextManager[TaskClient]:
    """Send tasks and events through ``client`` in this context (and in the
    trio tasks and threads it starts) for the duration of the block."""
    return _UsingClient(client)


@final
class _UsingClient:
    """:func:`using_client`'s block. A class, not a generator: a worker enters
    one per task run, and this costs a third of the calls."""

    __slots__ = ("_client", "_token")

    def __init__(self, client: TaskClient) -> None:
        self._client = client
        self._token: contextvars.Token[TaskClient | None] | None = None

    def __enter__(self) -> TaskClient:
        self._token = _current.set(self._client)
        return self._client

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            _current.reset(self._token)
            self._token = None


def current_client(who: str) -> TaskClient:
    """The client of this context.

    Raises:
        ConfigError: there is none, saying how to connect.
    """
    client = _current.get()
    if client is None:
        raise ConfigError(
            f"{who} is not connected to a cluster: use "
            "`with app.connect('cluster.toml'):` (or `async with app.aconnect(...)` in trio)"
        )
    return client


def _task_headers(
    pool: str, task_id: str, options: SendOptions, headers: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The application properties of a task command (§14.2), from its options."""
    meta: dict[str, Any] = {H_TASK_ID: task_id, H_POOL: pool}
    if headers:
        meta.update(headers)
    if (options.time_limit, options.soft_time_limit) != (None, None):
        meta[H_TIMELIMIT] = compact([options.time_limit, options.soft_time_limit])
    if options.link:
        meta[H_LINK] = compact(list(options.link))
    if options.link_error:
        meta[H_LINK_ERROR] = compact(list(options.link_error))
    if options.sinks:
        meta[H_SINKS] = ",".join(options.sinks)
    for value, header in (
        (options.priority, H_PRIORITY), (options.retries, H_RETRIES), (options.map, H_MAP),
        (options.retry_policy, H_RETRY_POLICY),  # a canvas step's (in wire form: wire_options)
    ):  # fmt: skip
        if value is not None:
            meta[header] = value
    if options.track_started:
        meta[H_TRACK] = True
    if options.chain:
        meta[H_CHAIN] = options.chain
    if not options.acks_late:
        meta[AT_MOST_ONCE] = True
    return meta


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
    options: SendOptions | None = None,
    headers: Mapping[str, Any] | None = None,
    kind: str = KIND_COMMAND,
    confirm: bool | None = None,
    durable: bool = False,
    message_id: str | None = None,
    wired: bool = False,
) -> None:
    """Send one task message to its pool (or to the scheduler, when it is due
    later). Used by callers, and by workers for chain steps, callbacks and retries.

    ``options``: checked where they entered (:class:`SendOptions`).
    ``options.acks_late=False`` is at-most-once: sent pre-settled, never held
    by the backlog, and every hop after this one sends it so too; it takes
    precedence over ``durable``, and ``confirm=True`` with it is refused
    (:meth:`SendOptions.delivery`).

    ``confirm``: wait until the receiver settled it; by default, when the
    directory says the receiver takes it on at once (``Directory.accepting``).
    ``durable``: hand it to the node's backlog and return (what a worker sends
    on behalf of a task it runs: the worker slot is free at once). It awaits
    nothing before the backlog's put: a put the caller made just before lands
    in the same store commit. ``message_id``: a deterministic one (a periodic
    task's firing), so that a copy sent again is taken once; default: a new one.
    ``wired``: ``args`` and ``kwargs`` are in wire form already (a list and a
    dict, converted by ``wire_body`` where the call was made).

    Raises:
        ConfigError: an unknown pool, or a delay with no scheduler.
        MisuseError: ``confirm=True`` with ``acks_late=False``.
        DeliveryError: (confirmed) the receiver refused it. (Across hosts, a
            services node that stops refuses it ``modified``, actor-stopping,
            having taken nothing: it goes to the next holder, as below.)
        PeerUnavailable: (not durable) its node could not be reached (across
            hosts, neither it nor, within the directory's ``failover``, the
            services node that took the services role over).
    """
    options = options or SendOptions()
    if options.acks_late:  # SendOptions.delivery's answer for it, without the record
        presettled = False
    else:
        delivery = options.delivery(task, confirm=confirm, durable=durable)
        presettled, confirm = delivery.presettled, delivery.confirm
    outbox = client.outbox
    now = outbox.now()
    meta = _task_headers(pool, task_id, options, headers)
    # Most sends are due now and never expire: no call to say so.
    due = options.countdown is not None or options.eta is not None
    eta = options.due(now) if due else None
    directory = client.directory
    receiver = pool
    if eta is not None and eta > now + 0.001:
        meta[H_ETA] = eta
        receiver = SCHEDULER
    target, to = directory.target(receiver)
    envelope = Envelope(
        message_id=message_id or outbox.new_message_id(),
        to=to,
        subject=task,
        body=[args, kwargs] if wired else [to_wire(list(args)), to_wire(dict(kwargs))],
        kind=kind,
        reply_to=reply_to,
        correlation_id=correlation_id or task_id,
        creation_time=now,
        expiry_time=None if options.expires is None else options.expiry_time(now),
        headers=meta,
    )
    if presettled:
        await outbox.send(target, envelope, presettled=True, confirm=False)
        return
    if confirm is None:
        confirm = receiver in directory.accepting
    # Across hosts, what a services node that lost its role (or its host) had
    # not taken goes to the node that holds the role now: from the backlog
    # (durable), or sent again here (not confirmed: it did not take it).
    reroute = client.reroute
    try:
        await outbox.send(
            target, envelope, presettled=False, confirm=confirm, durable=durable, reroute=reroute
        )
    except (PeerUnavailable, Modified) as exc:
        # Unreachable, or a services node that stops (a warm stop, a rolling
        # upgrade: it took nothing) while its role moves: sent to the next holder.
        if isinstance(exc, Modified) and exc.condition != STOPPING:
            raise
        elsewhere = await directory.moved_from(target)  # None at once on one host
        if elsewhere is None:
            raise
        log("actorctl:client:resent", task_id=task_id, to=str(elsewhere), was=str(exc))
        envelope = attrs.evolve(envelope, to=str(elsewhere))
        await outbox.send(elsewhere, envelope, presettled=False, confirm=confirm)
