"""Task states and result handles: what ``add.delay(1, 2)`` returns.

A task's result comes back to the caller as a document on the caller's own reply
link (docs/protocol.md §14.4): the caller's outbox hands each document that
carries an id the registry expects to the registry (``_result_registry.py``),
which hands it to the handle waiting for it.
``get()`` blocks (for plain Python code, as in Celery); ``aget()`` awaits (for
code that runs in trio).

A result its process is not sent (``AsyncResult(task_id)``, made by a process
that did not send the task) is fetched by id instead: its ``get()``, ``aget()``,
``state`` and ``ready()`` ask the nodes that keep final results (``_lookup.py``)
through the :class:`Lookup` of the calling context, which connecting sets.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Final, Protocol, final

import trio

from ..._errors import ActorctlError, AskTimeout, MisuseError, TaskRevoked
from ..protocol._protocol import (
    FAILURE,
    H_RETRIES,
    PENDING,
    READY_STATES,
    RETRY,
    REVOKED,
    SUCCESS,
)
from ..protocol._task_errors import task_error

#: Seconds a caller waits for a result's document before it also fetches the
#: result by id (in case the document was sent while its reply link was down).
FALLBACK_AFTER: Final = 1.0

__all__ = [
    "READY_YIELD_EVERY",
    "AsyncResult",
    "Lookup",
    "SharedWaits",
    "in_trio",
    "using_lookup",
]


class Lookup(Protocol):
    """Fetches final results by task id from the cluster (``_lookup.py``)."""

    async def fetch(self, task_id: str) -> list[Any] | None:
        """One round of asking: ``[state, body, headers]``, or None."""
        ...

    async def wait(self, task_id: str, timeout: float | None) -> list[Any] | None:
        """Ask until found or ``timeout`` seconds passed (then None)."""
        ...

    def run_blocking(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """Run ``fn(*args)`` in the lookup's trio run, from plain code."""
        ...


# The lookup of the running context, set with the client by connecting. Not
# shared state: a ContextVar is task-local, as the client's own is (_client.py).
_lookup: contextvars.ContextVar[Lookup | None] = contextvars.ContextVar(
    "actorctl_result_lookup", default=None
)


@contextlib.contextmanager
def using_lookup(lookup: Lookup) -> Iterator[Lookup]:
    """Fetch results by id through ``lookup`` in this context, for the block."""
    token = _lookup.set(lookup)
    try:
        yield lookup
    finally:
        _lookup.reset(token)


def _wait(lock: threading.Lock, timeout: float | None) -> bool:
    """Acquire ``lock`` within ``timeout`` seconds (None: however long)."""
    return lock.acquire(timeout=-1 if timeout is None else timeout)


#: A caller that awaits results final already, one after another (pipelined:
#: the oldest of those in flight), yields to trio's scheduler at one such await
#: in this many, as a sender with credit does (``link/peer/_peer.py``): the
#: sends it makes between go out in one write, not one each.
READY_YIELD_EVERY: Final = 16


@final
class SharedWaits:
    """What the results one registry tracks share (``_result_registry.py``
    makes it): the lock that guards their thread waits (held for a few
    assignments, never while waiting), so that a result sent makes no lock
    of its own, and the count of awaits that found a result final already
    (``READY_YIELD_EVERY``), kept by trio code (the client's trio thread: a
    count another run raced would only move a yield)."""

    __slots__ = ("lock", "ready_awaits")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ready_awaits = 0


#: Whether this code runs in a trio task (trio's own thread): trio's own
#: function, with no wrapper (plain code asks twice per ``delay().get()``; it
#: asks without an exception, where a raised and caught RuntimeError cost a
#: tenth of its time in that thread).
in_trio: Final[Callable[[], bool]] = trio.lowlevel.in_trio_task


@final
class AsyncResult:
    """The handle on one task's result.

    ``AsyncResult(task_id)`` (or ``app.AsyncResult(task_id)``), in a process
    connected to the cluster, is a handle on a task some other process sent:
    its result is fetched by id (see the module docstring).

    Attributes:
        id: the task id (for a chain, the id of the whole chain).
        task: the task's name ("" when only its id is known).
        state: PENDING, STARTED, RETRY, SUCCESS, FAILURE or REVOKED.
    """

    def __init__(
        self,
        task_id: str,
        task: str = "",
        *,
        revoke: Callable[[str, bool], None] | None = None,
        arevoke: Callable[[str, bool], Awaitable[None]] | None = None,
        forget: Callable[[str], None] | None = None,
        tracked: bool = True,
        lookup: Lookup | None = None,
        shared: SharedWaits | None = None,
    ) -> None:
        self.id = task_id
        self.task = task
        self._state = PENDING
        self.retries = 0
        self._value: Any = None
        self._error: dict[str, Any] | None = None
        self._revoke = revoke
        self._arevoke = arevoke
        self._forget = forget
        self._tracked = tracked
        self._lookup = lookup
        self._delivered = False  # a registry hands it its documents
        self._thread_done: threading.Lock | None = None  # made by a get() that waits
        self._thread_held = False  # it was made held (not final then): update() lets it go
        # Guards both (held for a few assignments, never while waiting): the
        # lock its registry shares among its results (``SharedWaits``), else
        # its own.
        self._shared = shared
        self._thread_lock = shared.lock if shared is not None else threading.Lock()
        # Made by whoever first waits in trio (most results are final before
        # anyone awaits them: then neither is made at all).
        self._done_trio: trio.Event | None = None
        self._changed: trio.Event | None = None

    # -- what it knows -------------------------------------------------------------

    @property
    def tracked(self) -> bool:
        """Whether its caller receives its documents (not sent with
        ``ignore_result``, nor from inside a task)."""
        return self._tracked

    @property
    def state(self) -> str:
        """The task's state. A result fetched by id asks the cluster (once)
        while it is not final, from plain code; in trio, ``await aget()``."""
        if self._state not in READY_STATES and not in_trio():
            lookup = self._lookup_now()
            if lookup is not None:
                lookup.run_blocking(self._refresh, lookup)
        return self._state

    def ready(self) -> bool:
        """Whether the task has finished (SUCCESS, FAILURE or REVOKED)."""
        return self.state in READY_STATES

    def successful(self) -> bool:
        return self.state == SUCCESS

    def failed(self) -> bool:
        return self.state == FAILURE

    @property
    def result(self) -> Any:
        """The value (SUCCESS), the error (FAILURE, RETRY, REVOKED), or None."""
        state = self.state
        if state == SUCCESS:
            return self._value
        if self._error is not None:
            return self._exception()
        return None

    info = result
    status = state  # Celery's other name for it

    @property
    def traceback(self) -> str | None:
        """The traceback of a failed task, as its worker formatted it (the
        worker's frames), or None (not failed, or no traceback was sent)."""
        if self.state != FAILURE or self._error is None:
            return None
        text = self._error.get("traceback")
        return text if isinstance(text, str) else None

    # -- waiting --------------------------------------------------------------------

    def get(self, timeout: float | None = None, *, propagate: bool = True) -> Any:
        """Wait for the task and return its value (blocking: for plain code; in
        trio use :meth:`aget`).

        Raises:
            TaskFailed: the task raised (with its type name and message; also the
                built-in exception type when it was one).
            TaskRevoked: it was revoked, or expired before it ran.
            AskTimeout: no result within ``timeout`` seconds.
            MisuseError: called in trio's thread (it would block the event
                loop), or for a result nobody receives (sent from inside a
                task, or with ``ignore_result``): a programming error, never
                retried in a task.
        """
        if in_trio():
            raise MisuseError(
                "AsyncResult.get() blocks, and this is trio's thread: use `await result.aget()`"
            )
        if self._state not in READY_STATES:  # one final already returns with no lock at all
            self._wait_in_thread(timeout)
            if self._state not in READY_STATES:
                raise AskTimeout(f"{self._name()} not ready within {timeout:g} s")
        if self._state == SUCCESS:  # _outcome's first case, inline (no call per get)
            return self._value
        return self._outcome(propagate)

    def _wait_in_thread(self, timeout: float | None) -> None:
        """:meth:`get`'s wait (or fetch) until it is final or ``timeout`` passed."""
        lookup = None if self._delivered else self._lookup_now()
        if lookup is not None:
            lookup.run_blocking(self._fetch, lookup, timeout)
            return
        if not self._tracked:
            self._check_tracked()  # raises
        first = FALLBACK_AFTER if timeout is None or timeout > FALLBACK_AFTER else timeout
        done = self._done_thread()
        if done.acquire(timeout=first):
            done.release()  # open for any other thread that waits, or waits later
            return
        left = None if timeout is None else max(0.0, timeout - first)  # `first` has passed
        fallback = self._fallback()
        if fallback is not None:
            fallback.run_blocking(self._wait_or_fetch, fallback, left)
        elif _wait(done, left):
            done.release()

    async def aget(self, timeout: float | None = None, *, propagate: bool = True) -> Any:
        """Await the task and return its value: :meth:`get` for trio code.

        A result its registry holds that is final already returns at once:
        such an await yields to trio's scheduler at one in
        ``READY_YIELD_EVERY`` of its registry's, and honours a cancellation at
        every one (a pipelined caller's sends then go out batched)."""
        if self._state in READY_STATES and self._tracked:  # come already: nothing to time
            shared = self._shared
            if shared is None:
                await trio.lowlevel.checkpoint()
            else:
                # One such await in READY_YIELD_EVERY yields; the others only
                # honour a cancellation (checkpoint_if_cancelled yields then).
                shared.ready_awaits = ready = shared.ready_awaits + 1
                if ready % READY_YIELD_EVERY == 0:
                    await trio.lowlevel.checkpoint()
                else:
                    await trio.lowlevel.checkpoint_if_cancelled()
            if self._state == SUCCESS:  # _outcome's first case, inline (no call per aget)
                return self._value
            return self._outcome(propagate)
        lookup = self._lookup_now()
        if lookup is not None:
            await self._fetch(lookup, timeout)
        else:
            self._check_tracked()
            with trio.move_on_after(math.inf if timeout is None else timeout):
                with trio.move_on_after(FALLBACK_AFTER):
                    await self._done_event().wait()
                fallback = self._fallback()
                if fallback is not None:
                    await self._wait_or_fetch(fallback, None)
                else:
                    await self._done_event().wait()
        if self._state not in READY_STATES:
            raise AskTimeout(f"{self._name()} not ready within {timeout:g} s")
        return self._outcome(propagate)

    async def await_state(self, *states: str, timeout: float | None = None) -> str:
        """Wait until the task is in one of ``states`` (or finished); return its
        state. STARTED is reported only for tasks sent with ``track_started``.

        Raises:
            AskTimeout: not within ``timeout`` seconds.
        """
        self._check_tracked()
        with trio.move_on_after(math.inf if timeout is None else timeout):
            while self._state not in states and self._state not in READY_STATES:
                if self._changed is None:
                    self._changed = trio.Event()
                await self._changed.wait()
            return self._state
        raise AskTimeout(f"{self._name()} not in {states} within {timeout:g} s")

    def revoke(self, *, terminate: bool = False) -> None:
        """Revoke the task: see ``app.control.revoke``."""
        if self._revoke is None:
            raise ActorctlError(f"task {self.id}: this result is not connected to a cluster")
        self._revoke(self.id, terminate)

    async def arevoke(self, *, terminate: bool = False) -> None:
        """:meth:`revoke` for trio code."""
        if self._arevoke is None:
            raise ActorctlError(f"task {self.id}: this result is not connected to a cluster")
        await self._arevoke(self.id, terminate)

    def forget(self) -> None:
        """Stop waiting for this result (its caller then holds nothing for it):
        for a result nobody will read. Call it from the client's own thread
        (trio code), or before the result could arrive."""
        if self._forget is not None:
            self._forget(self.id)

    def _done_thread(self) -> threading.Lock:
        """What a thread blocked in :meth:`get` waits on, made by the first
        such get(): most results are awaited in trio's thread, or not at all,
        and the event loop's thread then makes no lock per task. It is held
        until the result is final; a waiter that acquires it releases it at
        once, for the next. (A bare lock, not a threading.Event: the event's
        condition costs a score of Python calls on each side, the trio
        thread's among them, on the path of every result.)"""
        with self._thread_lock:
            if self._thread_done is None:
                self._thread_done = threading.Lock()
                if self._state not in READY_STATES:
                    self._thread_done.acquire()
                    self._thread_held = True
            return self._thread_done

    def _done_event(self) -> trio.Event:
        """The trio event set when it is final, made at the first wait."""
        event = self._done_trio
        if event is None:
            event = self._done_trio = trio.Event()
            if self._state in READY_STATES:
                event.set()
        return event

    def _check_tracked(self) -> None:
        if not self._tracked:
            raise MisuseError(
                f"{self._name()} was sent with ignore_result, or from inside "
                "a task: nobody receives its result (use a chain or a callback instead)"
            )

    def _name(self) -> str:
        return f"task {self.task} ({self.id})" if self.task else f"task {self.id}"

    # -- fetching by id ---------------------------------------------------------------

    def _lookup_now(self) -> Lookup | None:
        """Where to fetch this result from: None for one its process is sent
        (or one already final), else its own lookup or the context's."""
        if self._delivered or not self._tracked or self._state in READY_STATES:
            return None
        return self._lookup or _lookup.get()

    def _fallback(self) -> Lookup | None:
        """Where to fetch a result its process is sent, when its document has
        not come within FALLBACK_AFTER seconds (the caller's reply link was down
        when it was sent, as while a node restarts): None if it is final."""
        if not self._delivered or self._state in READY_STATES:
            return None
        return self._lookup or _lookup.get()

    async def _wait_or_fetch(self, lookup: Lookup, timeout: float | None) -> None:
        """Wait for the document and fetch the result by id, both at once,
        until either brings it or ``timeout`` passed."""
        with trio.move_on_after(math.inf if timeout is None else timeout):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._fetch, lookup, None)
                await self._done_event().wait()
                nursery.cancel_scope.cancel()

    async def _fetch(self, lookup: Lookup, timeout: float | None) -> None:
        """Ask until the result is found (recorded) or ``timeout`` passed."""
        self._record(await lookup.wait(self.id, timeout))

    async def _refresh(self, lookup: Lookup) -> None:
        """Ask once; record the result if found."""
        self._record(await lookup.fetch(self.id))

    def _record(self, found: list[Any] | None) -> None:
        if found is None:
            return
        state, body, headers = found
        retries = headers.get(H_RETRIES, 0)
        self.update(str(state), body, retries if isinstance(retries, int) else 0)
        if self._delivered and self._forget is not None:
            self._forget(self.id)  # its document will not be waited for any more

    def _outcome(self, propagate: bool) -> Any:
        if self._state == SUCCESS:
            return self._value
        error = self._exception()
        if propagate:
            raise error
        return error

    def _exception(self) -> Exception:
        error = self._error or {}
        if self._state == REVOKED:
            return TaskRevoked(self.id, str(error.get("reason", "revoked")))
        return task_error(str(error.get("type", "Error")), str(error.get("message", "")), self.id)

    # -- updates (in the trio thread of the client) ---------------------------------

    def update(self, state: str, body: Any, retries: int = 0) -> None:
        """Record a state document; wakes whoever waits once it is final."""
        if self._state in READY_STATES:
            return  # a duplicate, or a late document after the final one
        self.retries = retries
        if state == SUCCESS:
            self._value = body
        elif state in (FAILURE, RETRY, REVOKED):
            self._error = body if isinstance(body, dict) else {"message": str(body)}
        # The state last: a get() in another thread that sees it final reads
        # the value or error already set (it takes no lock to read them).
        self._state = state
        if state in READY_STATES:
            # A thread's lock is looked at under the lock only if one was made
            # (most results are final before anyone waits in a thread). A get()
            # that makes its lock after this look sees the state final, set
            # before it, and makes that lock free.
            if self._thread_done is not None:
                with self._thread_lock:  # after the state: a get() making its lock now sees it
                    # Released only if it was made held: one made after the state
                    # was set is free already, and a waiter may hold it a moment.
                    done = self._thread_done if self._thread_held else None
                    self._thread_held = False
                if done is not None:
                    done.release()
            if self._done_trio is not None:
                self._done_trio.set()
        changed, self._changed = self._changed, None  # the next waiter makes a fresh one
        if changed is not None:
            changed.set()

    def mark_delivered(self) -> None:
        """Its documents are handed to it from now on (by a :class:`ResultRegistry`,
        ``_result_registry.py``): it fetches by id only as a fallback."""
        self._delivered = True

    def __repr__(self) -> str:
        return f"<AsyncResult {self.task or '?'} {self.id} {self._state}>"
