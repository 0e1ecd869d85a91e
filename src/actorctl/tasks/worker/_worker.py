"""The worker actor: runs every task of one pool of an app.

A ``TaskWorker`` checks that a task was not revoked and has not expired, binds
its arguments, runs it under its time limits (``_running.py``: with its node's
client as the client of the running task, so that ``add.delay()`` inside a task
sends through this node), and then sends what follows: its result, or its
failure or retry (``_verdict.py`` decides, ``_followups.py`` sends). It
settles the message only after that (acks-late); a task sent with
``acks_late=False`` arrived pre-settled, so nothing sends it again if the worker
dies while it runs (at-most-once).

A worker holds more messages at once than it runs (``concurrency`` is its
pool's ``runs`` plus SETTLING): a run slot is held only while the task runs,
so the next task starts while the last one's follow-ups are being stored.
The wait for its result's commit holds no runner: ``send_document`` hands it
to the turn's settler (``actors/_settling.py``), which settles the task once
the result is committed, with the others of that commit.

When its node begins a graceful stop (a warm shutdown: SIGTERM, or the first
Ctrl-C), the worker starts nothing more: the tasks it holds that wait for a
run slot are given back at once, unsettled (``released``: the pool's router
sends each to another worker, a direct sender sends it again after the next
start), and those running finish within the node's grace (docs/guarantees.md).

A worker on a fenced node (``cluster/membership/_fence.py``: its lease in etcd ended while
it was cut off, and the others sent its work elsewhere) starts no task: it
hands each back ``modified`` (``actorctl:fenced``), before it waits for a run
slot and again once it has one, so that a task sent again elsewhere does not
also run here late.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any, ClassVar, Final

import trio

from ..._errors import ActorctlError, WireFormatError
from ..._log import log
from ...actors import Actor, Address, BadArguments, NamedCounters
from ...cluster import (
    DEAD_LETTERS,
    REASON_EXPIRED,
    Fence,
)
from ...mailbox import ACCEPTED, FENCED, STOPPING, Envelope, Outcome
from ...supervision import Boxed
from ..app import _signals as signals
from ..app._registry import TaskRegistry
from ..app._task import Retry, Task
from ..client._client import Directory, TaskClient
from ..limits._breakers import record, refuse, task_breakers
from ..limits._budget import Concurrency, worker_gate
from ..limits._gate import PRIORITY_DEFAULT, GateClosed, priority_of
from ..limits._pacing import task_limits
from ..limits._policies import (
    foreign_task,
    unknown_task,
    warn_no_scheduler,
)
from ..protocol._arguments import calls_of, token_key
from ..protocol._protocol import (
    BAD_ARGUMENTS,
    DECODE_ERROR,
    FAILURE,
    H_MAP,
    H_PRIORITY,
    H_RETRIES,
    H_SINKS,
    H_TASK_ID,
    H_TRACK,
    REVOKED,
    SCHEDULER,
    STARTED,
    SUCCESS,
    UNKNOWN_SINK,
    UNKNOWN_TASK,
    header_sinks,
)
from ..protocol._state import node_outbox
from ..protocol._task_errors import NotRun, NotRunKind, TaskError
from . import _hooks as hooks
from ._control import WorkerState
from ._followups import FollowUps
from ._inspect import TASK_COUNTERS, HeldTask
from ._running import Runner
from ._verdict import follow

__all__ = ["TaskWorker"]

Handled = tuple[Outcome, None]
#: Messages a worker holds beyond those it runs: tasks whose follow-ups are
#: being stored (and waiting for a run slot, in the order they came).
SETTLING: Final = 64


class TaskWorker(Actor):
    """Runs every task of one pool of ``app``; one or more per node.

    Args:
        app: the tasks.
        pool: the pool's name.
        directory: where the pools and services are (for chains, callbacks,
            retries and sinks, and for tasks that send tasks).
        state: shared with the node's ``TaskControl``.
        boxed: the pool's boxed worker (docs/boxed.md), if it has one: it runs
            the pool's ``boxed=True`` tasks, or the tasks a process in another
            language serves (a ``[[boxed]]`` table with ``pool = ...``).
    """

    #: Plain ``def`` tasks run in worker threads (True), or inline on the
    #: node's event loop, one at a time, as Celery's solo pool runs them (False).
    threads: ClassVar[bool] = True
    #: Tasks it runs at once (the pool's concurrency).
    runs: ClassVar[int] = 4
    concurrency: ClassVar[int] = 4 + SETTLING
    #: The pool's budget when it is a range (``_budget.py``); None: ``runs``, fixed.
    budget_spec: ClassVar[Concurrency | None] = None

    def __init__(
        self,
        app: TaskRegistry,
        pool: str,
        directory: Directory,
        state: WorkerState,
        boxed: Boxed | None = None,
    ) -> None:
        self.boxed = boxed
        self._foreign: dict[str, Task] = {}
        self.app = app
        self.pool = pool
        self.directory = directory
        self.state = state
        threads = trio.CapacityLimiter(type(self).runs)
        #: How one call of a task runs here (``_running.py``).
        self._runner = Runner(state, threads, inline=not type(self).threads, boxed=boxed)
        self.gate, self.budget = worker_gate(type(self).budget_spec, threads, pool)
        # A task's global rate limit is its pool's router's to keep; a pool
        # reached directly has no router, and its one worker keeps it.
        routed = pool in directory.accepting
        for task in app.tasks.values():
            task_limits(self.gate, task, routed=routed)
        self._followups: FollowUps | None = None
        self._name = ""  # its actor name, once it runs (read per task)
        self._fence: Fence | None = None  # its node's, once it runs
        #: Per task: messages, outcomes, run times (read when /metrics is scraped).
        self.named_counters = NamedCounters(TASK_COUNTERS)
        # Its circuit breakers, by task, and each once by name (its actor state).
        self._breakers, self.breakers = task_breakers(app.tasks, app.breakers)

    async def on_start(self) -> None:
        """Runs in the actor's task: the client of the node it runs on."""
        cell = self._require_cell()
        outbox = cell.outbox
        client = TaskClient(outbox, self.directory)
        here = cell.address
        self._name = here.name
        dead_letters = Address(here.host, here.port, DEAD_LETTERS, here.scheme)
        self._followups = FollowUps(client, self.pool, dead_letters, self.app.conf.result_expires)
        self._followups.counters = self.named_counters
        self._runner.attach(client)
        self._fence = node_outbox(outbox).fence
        hooks.worker_up(self.state, node_outbox(outbox).name)
        most = type(self).concurrency - SETTLING
        self.state.tuning.add_worker(cell.address.name, self.pool, self.gate, self.budget, most)
        mine = {t.name: t.pool for t in self.app.tasks.values() if t.pool == self.pool}
        self.state.holdings.add_worker(cell.address.name, self.pool, mine, outbox)
        if self.budget is not None:
            self.start_soon(self.budget.run)
        if SCHEDULER not in self.directory.addresses:
            warn_no_scheduler(self.app.tasks.values(), self.pool)

    async def on_stop(self) -> None:
        """Runs in the actor's last task: the node's last worker sends worker_shutdown."""
        hooks.worker_down(self.state, node_outbox(self._require_cell().outbox).name)

    def on_drain(self) -> None:
        """Its node begins a graceful stop (in the node's task): the tasks that
        wait for a run slot are given back, never begun, and none starts
        from now on; those running finish (within the node's grace). The gate
        says so to each (GateClosed): nothing is spent per task for it."""
        self.gate.close()

    @property
    def followups(self) -> FollowUps:
        if self._followups is None:
            raise ActorctlError(f"task worker {self.pool!r} is not running: host it on a node")
        return self._followups

    async def handle_unmatched(
        self, envelope: Envelope
    ) -> tuple[Outcome, tuple[str, Any] | None] | None:
        counters = self.named_counters
        counters.add(envelope.subject, "received")
        # Read once per task: its id and its retry count (from its headers;
        # envelope_task_id and envelope_retries, inline: per message).
        headers = envelope.headers
        task_id = headers.get(H_TASK_ID) or envelope.correlation_id or envelope.message_id
        task_id = task_id if type(task_id) is str else str(task_id)
        retries = headers.get(H_RETRIES, 0)
        retries = retries if isinstance(retries, int) else 0
        try:
            with self.state.holdings.action(envelope, self._name, task_id, retries):
                handled = await self._task(envelope, task_id, retries)
            if handled[0].state not in ("accepted", "released"):
                counters.add(envelope.subject, f"rejected:{handled[0].condition}")
            return handled
        except Exception as exc:
            # What follows the run could not be sent (an unknown pool, a result
            # that is not JSON, no scheduler for a delayed retry, a malformed
            # option in a signature): the caller hears of it, and the worker
            # goes on with the other tasks it holds.
            error = TaskError.of(exc)
            log("actorctl:task:unsendable", message_id=envelope.message_id, **error.wire())
            try:
                await self.followups.report(envelope, FAILURE, error.wire())
            except ActorctlError as again:
                log("actorctl:task:unreported", message_id=envelope.message_id, error=str(again))
            return ACCEPTED, None

    async def _task(self, envelope: Envelope, task_id: str, retries: int) -> Handled:
        # No await may come before the gate's enter on the way to a run (nor
        # in handle_unmatched before this): the cell's runners begin messages
        # in the order they came, each up to its first checkpoint, and the
        # gate's order among equal priorities is the order tickets are taken.
        # tests/tasks/test_limits.py's test_priority_nine_tasks_... fails at
        # once if a checkpoint comes first (tried); tests/actors/test_concurrency.py
        # guards the runners' side.
        followups = self._followups or self.followups  # (the property raises if not running)
        headers = envelope.headers
        # By its own name (most messages), else by an alias or as a foreign task.
        task = self.app.tasks.get(envelope.subject) or self._other_task(envelope)
        if task is None:
            kind, why = unknown_task(
                self.boxed, self.app.tasks.values(), envelope.subject, self.pool
            )
            await followups.report(envelope, FAILURE, TaskError(kind, why).wire())
            return Outcome.rejected(UNKNOWN_TASK, why), None
        mapped = headers.get(H_MAP)
        try:
            args, kwargs = envelope.call()
            # calls_of and token_key, inline for the usual message (one call, no tokens)
            if mapped:
                calls = calls_of(task, args, kwargs, mapped)
            else:
                calls = [task.spec.bind(args, kwargs)]
            key = None if task.concurrency_key is None else token_key(task, calls)
        except WireFormatError as exc:
            error = TaskError("WireFormatError", str(exc))
            await followups.report(envelope, FAILURE, error.wire())
            return Outcome.rejected(DECODE_ERROR, str(exc)), None
        except BadArguments as exc:
            error = TaskError("BadArguments", str(exc))
            await followups.report(envelope, FAILURE, error.wire())
            return Outcome.rejected(BAD_ARGUMENTS, str(exc)), None
        if H_SINKS in headers and (bad := self._unknown_sink(envelope)) is not None:
            await followups.report(envelope, FAILURE, TaskError("ConfigError", bad).wire())
            return Outcome.rejected(UNKNOWN_SINK, bad), None
        fence = self._fence  # fenced: see the module's text (checked inline: per task)
        if fence is not None and fence.why is not None:
            return self._fenced(task, fence.why)
        now = followups.client.outbox.now
        breaker = self._breakers.get(task.name) if self._breakers else None
        if breaker is not None and not breaker.closed and (refused := breaker.admit()):
            return await self._refuse(envelope, task, refused)
        # Admitted while closed: the breaker may trip while the task waits for
        # a run slot (the worker holds runs + SETTLING messages), so it is
        # asked again once the slot is taken. (A half-open probe is not.)
        admitted_closed = breaker is not None and breaker.closed
        # Reserved until a run slot is free, then active until the run ends (inspect).
        received = now()
        held = HeldTask(task_id, task.name, args, kwargs, self._name, self.pool, received)
        holdings = self.state.holdings
        if signals.task_received.receivers:
            hooks.received(task, task_id, retries, args, kwargs)
        # Taken before this task's first checkpoint: the cell begins messages
        # in the order they came (actors/_runners.py), and so their tickets
        # are taken in that order (the gate's order among equal priorities).
        # (Holdings.enter, inline: held while it waits at the gate.)
        priority = PRIORITY_DEFAULT if H_PRIORITY not in headers else priority_of(headers)
        holdings.held[envelope.message_id] = held
        try:
            ticket = await self.gate.enter(task.name, priority, key)
        except BaseException as exc:
            del holdings.held[envelope.message_id]
            if isinstance(exc, GateClosed):
                return self._given_back(envelope, task_id)
            raise
        try:
            if (
                admitted_closed
                and breaker is not None
                and not breaker.closed
                and (refused := breaker.admit())
            ):
                return await self._refuse(envelope, task, refused)
            # Raised while it waited for a slot? (No wait: no checkpoint since.)
            if ticket.event is not None and fence is not None and fence.why is not None:
                return self._fenced(task, fence.why)
            # One clock read: whether it expired, and when it started; none
            # more if it had no wait (no checkpoint since it was received).
            begun = received if ticket.event is None else now()
            why_not, runtime = None, None
            if self.state.revoked or envelope.expiry_time is not None:
                why_not = self._why_not_run(envelope, task_id, begun)
            if why_not is None:
                held.started = begun  # (Holdings.start, inline: active now)
                if headers.get(H_TRACK):
                    await followups.report(envelope, STARTED, None)
                if signals.task_prerun.receivers:
                    hooks.prerun(task, task_id, args, kwargs)
                started = perf_counter()
                ran: list[Any] | BaseException
                run = self._runner.run
                try:  # its values (each call of a map), or what it raised
                    if not mapped or len(calls) == 1:  # not a map (one call), or a map of one
                        call_args, call_kwargs = calls[0]
                        ran = [await run(task, task_id, retries, call_args, call_kwargs, headers)]
                    else:
                        ran = [
                            await run(task, task_id, retries, call_args, call_kwargs, headers)
                            for call_args, call_kwargs in calls
                        ]
                except (Retry, Exception) as exc:
                    ran = exc
                runtime = perf_counter() - started
                # Its run time, and (counted before its result goes: a scrape
                # after it sees it) its success.
                succeeded = type(ran) is list
                self.named_counters.ran(task.name, runtime, "success" if succeeded else None)
        finally:
            holdings.leave(envelope.message_id)
            self.gate.leave(ticket)
            if self.budget is not None:
                self.budget.ran()
        if breaker is not None:
            record(breaker, None if why_not is not None else ran, task, envelope)
        if why_not is not None:
            self.named_counters.add(task.name, REVOKED.lower())
            hooks.revoked(task, task_id, args, kwargs, why_not)
            holdings.end(held, REVOKED, why_not.reason, None, retries, now())
            await followups.report(envelope, REVOKED, why_not.wire())
            if why_not.kind is NotRunKind.EXPIRED:
                error = TaskError("Expired", why_not.reason)
                await followups.dead_letter(envelope, REASON_EXPIRED, error, retries)
            return ACCEPTED, None
        # What the page's window of runs shows (_inspect.py): hooks.outcome_of,
        # its values read here for a run that returned (most: no call per task).
        if isinstance(ran, list):  # it returned: its result, next step and callbacks
            outcome = ran if mapped else ran[0]
            await followups.succeed(envelope, outcome)
            if signals.task_success.receivers:
                hooks.succeeded(task, outcome)
            state = SUCCESS
        else:
            state = await follow(followups, envelope, task, task_id, retries, ran)
            self.named_counters.add(task.name, state.lower())  # failure, retry, revoked
            outcome = hooks.outcome_of(envelope, ran)
        holdings.end(held, state, outcome, runtime, retries, now())
        if signals.task_postrun.receivers:
            hooks.postrun(task, task_id, args, kwargs, hooks.retval_of(envelope, ran), state)
        return ACCEPTED, None

    def _other_task(self, envelope: Envelope) -> Task | None:
        """The task a message names by an alias (Celery's default name), or a
        foreign task its pool's boxed worker serves; None: neither."""
        return self.app.find(envelope.subject) or foreign_task(
            self.boxed, self._foreign, envelope.subject, self.pool
        )

    def _given_back(self, envelope: Envelope, task_id: str) -> Handled:
        """The node stops before the task could begin: it goes back unsettled
        (``released``), to run on another worker, or here after the next start
        (the cell logs it: ``actorctl:delivery:released``)."""
        why = f"worker {self.address.name!r} is stopping: task {task_id} was not begun"
        return Outcome("released", STOPPING, why), None

    def _fenced(self, task: Task, why: str) -> Handled:
        """``modified``: the node is fenced, for ``why`` (see the module's text)."""
        self.named_counters.add(task.name, "fenced")
        return Outcome.modified(FENCED, f"task {task.name}: not started here: {why}"), None

    async def _refuse(self, envelope: Envelope, task: Task, refused: str) -> Handled:
        routed = self.pool in self.directory.accepting
        outbox = self.followups.client.outbox
        return await refuse(
            envelope, task.name, refused, routed=routed, here=self.address, outbox=outbox
        )

    def _unknown_sink(self, envelope: Envelope) -> str | None:
        """Why a sink the task names cannot get its result, or None: a task
        never reports SUCCESS while its sink gets nothing."""
        for sink in header_sinks(envelope.headers):
            try:
                self.directory.resolve(sink)
            except ActorctlError as exc:
                return f"task {envelope.subject}: sink {sink!r} does not resolve: {exc}"
        return None

    def _why_not_run(self, envelope: Envelope, task_id: str, now: float) -> NotRun | None:
        """Why the task must not run (revoked, or expired by ``now``, the node's
        clock), or None."""
        revoked = self.state.revoked
        if task_id in revoked or (envelope.correlation_id or "") in revoked:
            return NotRun(NotRunKind.REVOKED, "revoked")
        if envelope.expiry_time is not None and envelope.expiry_time <= now:
            late = now - envelope.expiry_time
            return NotRun(NotRunKind.EXPIRED, f"expired {late:.3f} s before it could run")
        return None
