"""Scheduler: where delayed tasks wait, so that no worker holds them.

A task sent with ``countdown`` or ``eta`` goes to the cluster's scheduler, not
to its pool. The scheduler puts the message in its node's store (table
``delayed``, keyed by message id), commits it, and only then accepts it: the
sender is free at once, and the task outlives a restart of the scheduler's
node. A timer (a task the scheduler owns, one loop over a heap of due times)
sends each held task to its pool when it falls due, through the node's backlog
(durable: kept until the pool accepts it), then deletes it from the store. When
the scheduler starts, it arms what its store holds again: a task that fell due
while its node was down is sent at once.

A task revoked meanwhile, or past its expiry when it falls due, is never sent
on: its caller gets a REVOKED document saying why (kept as its result), and it
is deleted from the store. The scheduler keeps the revoked ids in its store too.

A task sent again under the same message id (its sender reconnected) is held
once: the store's key is the message id. The copy sent to the pool has an id
made from it (``ID/due``), so that a copy sent again after a restart (the node
died between handing it to the backlog and deleting it) has the same id as the
first, and the pool's router takes it once.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from typing import Any, ClassVar, Final

import attrs
import trio

from ..._errors import ActorctlError, ConfigError, WireFormatError
from ..._log import log
from ...actors import Actor, Address, Outbox, not_permitted
from ...cluster import AT_MOST_ONCE, DEAD_LETTERS, REASON_EXPIRED
from ...mailbox import ACCEPTED, STATUS_OK, Envelope, Outcome, Role, decode, encode
from ...store import Store
from ..client._client import Directory, TaskClient
from ..protocol._protocol import (
    BAD_ARGUMENTS,
    FAILURE,
    H_ETA,
    H_POOL,
    NO_POOL,
    REVOKED,
    REVOKED_MEMORY,
    SCHEDULER_NAME,
    UNKNOWN_HANDLER,
    envelope_retries,
    envelope_task_id,
)
from ..protocol._state import DELAYED, record_revokes, store_of, stored_revokes
from ..protocol._task_errors import NotRun, NotRunKind, TaskError
from ..worker._documents import send_document
from ..worker._inspect import HeldTask
from ..worker._letters import dead_letter

__all__ = ["Scheduler"]

#: Held tasks the timer sends at once, at most (each waits for a commit: many
#: at once share one).
RELEASE_BATCH: Final = 1000
DUE_SUFFIX: Final = "/due"
#: Its commands that only the operator role may send: a revoke drops tasks, and
#: ``scheduled`` shows their arguments (docs/security.md). ``pending`` is a count.
OPERATOR_ONLY: Final = frozenset({"revoke", "scheduled"})
OPERATOR_ONLY_ROLES: Final = frozenset({Role.OPERATOR})


@attrs.frozen
class _Held:
    task_id: str
    due: float
    envelope: Envelope


class Scheduler(Actor):
    """``scheduler``: holds delayed tasks (in its node's store) until they are due.

    Args:
        directory: where the pools are.
    """

    name = SCHEDULER_NAME
    mailbox_capacity: ClassVar[int] = 10_000
    # Taking a delayed task is a put and a commit: many at once share a commit.
    concurrency: ClassVar[int] = 64
    # A delayed task sent again (its sender reconnected) is answered as the first.
    dedup_count: ClassVar[int] = 10_000

    def __init__(self, directory: Directory) -> None:
        self.directory = directory
        self.held: dict[str, _Held] = {}  # message id -> held task
        self.waiting: dict[str, set[str]] = {}  # task id -> message ids of its held copies
        self.revoked: OrderedDict[str, None] = OrderedDict()
        self._heap: list[tuple[float, str]] = []  # (due, message id); stale ones are skipped
        self._wake = trio.Event()
        self._client: TaskClient | None = None
        self._store: Store | None = None
        self._emptied = trio.lowlevel.ParkingLot()  # wait_empty's

    # -- lifecycle ----------------------------------------------------------------------

    async def on_start(self) -> None:
        """Runs in the task that starts it: reload the revokes and held tasks
        its node's store keeps, and start the timer."""
        outbox = self._require_cell().outbox
        self._client = TaskClient(outbox, self.directory)
        store = self._store = store_of(outbox)
        self.held.clear()  # started again as it was: what it held is in the store
        self.waiting.clear()
        self._heap.clear()
        self._wake = trio.Event()
        for task_id, _ in stored_revokes(store):
            self._remember_revoke(task_id)
        for message_id, value in store.items(DELAYED):
            try:
                self._arm(decode(value))
            except (WireFormatError, ValueError) as exc:
                log("actorctl:scheduler:unreadable", message_id=message_id, error=str(exc))
                store.delete(DELAYED, message_id)
        if self.held:
            log("actorctl:scheduler:resumed", held=len(self.held))
        self.start_soon(self._timer)

    def adopt(self, message_ids: list[str]) -> int:
        """Arm the delayed tasks put in its node's store under ``message_ids``
        while it runs (taken over from another services node's store, a
        replica's), as it arms what the store held when it started. Returns
        how many."""
        store = self.store
        armed = 0
        for message_id in message_ids:
            value = store.get(DELAYED, message_id)
            if value is None or message_id in self.held:
                continue
            try:
                self._arm(decode(value))
            except (WireFormatError, ValueError) as exc:
                log("actorctl:scheduler:unreadable", message_id=message_id, error=str(exc))
                store.delete(DELAYED, message_id)
                continue
            armed += 1
        if armed:
            log("actorctl:scheduler:resumed", held=armed, taken_over=True)
        return armed

    @property
    def client(self) -> TaskClient:
        if self._client is None:
            raise ActorctlError("the scheduler is not running: host it on a node")
        return self._client

    @property
    def outbox(self) -> Outbox:
        return self.client.outbox

    @property
    def store(self) -> Store:
        if self._store is None:
            raise ActorctlError("the scheduler is not running: host it on a node")
        return self._store

    # -- commands -----------------------------------------------------------------------

    async def revoke(self, ids: list[Any], terminate: bool = False) -> int:
        """Drop delayed tasks: each reports REVOKED now instead of running later
        (``terminate`` is for running tasks: none runs here). Answered once the
        store keeps the revokes."""
        names = [str(task_id) for task_id in ids]
        for task_id in names:
            self._remember_revoke(task_id)
        record_revokes(self.store, names, terminate, self.outbox.now())
        dropped = [self.held[m] for t in names for m in sorted(self.waiting.get(t, ()))]
        for held in dropped:
            self._unhold(held)
        await self.store.sync()
        for held in dropped:
            await self._finish(
                held, NotRun(NotRunKind.REVOKED, "revoked while it waited in the scheduler")
            )
            self.store.delete(DELAYED, held.envelope.message_id)
        if dropped:
            self._emptied.unpark_all()
            await self.store.sync()
        return len(names)

    def pending(self) -> int:
        """How many delayed tasks it holds now."""
        return len(self.held)

    def scheduled(self) -> list[dict[str, Any]]:
        """``inspect scheduled``: the delayed tasks it holds, soonest first: each
        one's task id, name, pool, eta (seconds since the epoch) and arguments."""
        rows = []
        for held in sorted(self.held.values(), key=lambda h: (h.due, h.task_id)):
            envelope = held.envelope
            try:
                args, kwargs = envelope.call()
            except WireFormatError:
                args, kwargs = ["(unreadable)"], {}
            rows.append(
                HeldTask(
                    held.task_id, envelope.subject, args, kwargs, self.name,
                    str(envelope.headers.get(H_POOL)), envelope.creation_time or 0.0, None,
                ).answer(eta=held.due).wire()
            )  # fmt: skip
        return rows

    def _remember_revoke(self, task_id: str) -> None:
        self.revoked[task_id] = None
        self.revoked.move_to_end(task_id)
        while len(self.revoked) > REVOKED_MEMORY:
            self.revoked.popitem(last=False)

    # -- taking delayed tasks -------------------------------------------------------------

    async def handle_unmatched(
        self, envelope: Envelope
    ) -> tuple[Outcome, tuple[str, Any] | None] | None:
        # Its own commands are told apart from held tasks by the pool header, so
        # that a task may be called "revoke" or "pending" too.
        if H_POOL not in envelope.headers:
            return await self._control(envelope)
        if not isinstance(envelope.headers.get(H_POOL), str):
            return Outcome.rejected(
                NO_POOL, f"delayed message {envelope.message_id} names no pool"
            ), None
        if envelope.message_id in self.held:
            return ACCEPTED, None  # sent again: held once
        if envelope_task_id(envelope) in self.revoked:
            await self._finish(
                _Held(envelope_task_id(envelope), 0.0, envelope),
                NotRun(NotRunKind.REVOKED, "revoked before it reached the scheduler"),
            )
            return ACCEPTED, None
        self.store.put(DELAYED, envelope.message_id, encode(envelope))
        await self.store.sync()
        self._arm(envelope)
        return ACCEPTED, None

    def _arm(self, envelope: Envelope) -> None:
        eta = envelope.headers.get(H_ETA)
        due = float(eta) if isinstance(eta, int | float) else 0.0
        held = _Held(envelope_task_id(envelope), due, envelope)
        self.held[envelope.message_id] = held
        self.waiting.setdefault(held.task_id, set()).add(envelope.message_id)
        heapq.heappush(self._heap, (due, envelope.message_id))
        if self._heap[0][1] == envelope.message_id:
            self._wake.set()  # due before what the timer waits for

    def _unhold(self, held: _Held) -> None:
        """Take ``held`` out of what the timer and revokes see. Its row stays
        until what ends it (sent on, or its final document kept) is committed."""
        message_id = held.envelope.message_id
        self.held.pop(message_id, None)
        copies = self.waiting.get(held.task_id)
        if copies is not None:
            copies.discard(message_id)
            if not copies:
                del self.waiting[held.task_id]

    # -- sending them when due -----------------------------------------------------------

    async def _timer(self) -> None:
        """Send each held task when it falls due: the scheduler's own task."""
        while True:
            now = self.outbox.now()
            due: list[_Held] = []
            while self._heap and self._heap[0][0] <= now and len(due) < RELEASE_BATCH:
                _, message_id = heapq.heappop(self._heap)
                held = self.held.get(message_id)
                if held is not None:
                    self._unhold(held)
                    due.append(held)
            if due:
                async with trio.open_nursery() as nursery:
                    for held in due:
                        nursery.start_soon(self._release, held)
                await self.store.sync()  # the deletes
                continue
            wait = self._heap[0][0] - now if self._heap else math.inf
            with trio.move_on_after(wait):
                await self._wake.wait()
            self._wake = trio.Event()

    async def _release(self, held: _Held) -> None:
        """``held`` is due: send it to its pool (unless it was revoked or
        expired), then delete its row (the timer syncs)."""
        await self._send_due(held)
        self.store.delete(DELAYED, held.envelope.message_id)
        self._emptied.unpark_all()

    @property
    def holding(self) -> int:
        """Delayed tasks it holds or is sending now (its rows in the store are
        its tasks until their pool has them)."""
        return self.store.count(DELAYED) if self._store is not None else 0

    async def wait_empty(self) -> None:
        """Wait until :attr:`holding` is 0: a test's ``wait_idle``."""
        while self.holding:
            await self._emptied.park()

    async def _send_due(self, held: _Held) -> None:
        envelope = held.envelope
        now = self.outbox.now()
        if held.task_id in self.revoked:
            reason = "revoked while it waited in the scheduler"
            await self._finish(held, NotRun(NotRunKind.REVOKED, reason))
            return
        if envelope.expiry_time is not None and envelope.expiry_time <= now:
            reason = f"expired {now - envelope.expiry_time:.3f} s before it was due"
            await self._finish(held, NotRun(NotRunKind.EXPIRED, reason))
            here = self._require_cell().address
            await dead_letter(
                self.client,
                Address(here.host, here.port, DEAD_LETTERS, here.scheme),
                envelope,
                str(envelope.headers.get(H_POOL)),
                REASON_EXPIRED,
                TaskError("Expired", reason),
                envelope_retries(envelope),
            )
            return
        try:
            target = self.directory.resolve(str(envelope.headers[H_POOL]))
        except ConfigError as exc:
            log("actorctl:scheduler:no-pool", message_id=envelope.message_id, error=str(exc))
            await self._finish(held, TaskError("ConfigError", str(exc)))
            return
        headers = {k: v for k, v in envelope.headers.items() if k != H_ETA}
        due = attrs.evolve(
            envelope,
            message_id=envelope.message_id + DUE_SUFFIX,
            to=str(target),
            creation_time=now,
            headers=headers,
        )
        if headers.get(AT_MOST_ONCE):  # acks_late=False: pre-settled, as it came
            await self.outbox.send(target, due, presettled=True, confirm=False)
            return
        # Across hosts, a pool's router on a services node that lost its role
        # (or its host) is not waited for: the backlog sends it to the holder's.
        reroute = self.directory.elsewhere if self.directory.elected else None
        await self.outbox.send(
            target, due, presettled=False, confirm=False, durable=True, reroute=reroute
        )

    async def _finish(self, held: _Held, end: NotRun | TaskError) -> None:
        """End a held task without sending it: its final document (REVOKED
        for a task not run, FAILURE for an error) to its caller (if it has
        one), kept as its result either way."""
        envelope = held.envelope
        state = REVOKED if isinstance(end, NotRun) else FAILURE
        if isinstance(end, NotRun):
            log("actorctl:scheduler:revoked", task_id=held.task_id, reason=end.reason)
        targets = [envelope.reply_to] if envelope.reply_to else []
        await send_document(self.client, envelope, state, end.wire(), targets)

    # -- control ------------------------------------------------------------------------

    async def _control(self, envelope: Envelope) -> tuple[Outcome, tuple[str, Any] | None]:
        if envelope.subject in OPERATOR_ONLY and envelope.role not in (None, Role.OPERATOR):
            refused = not_permitted(self.name, envelope.subject, envelope, OPERATOR_ONLY_ROLES)
            return refused.outcome, None
        try:
            args, kwargs = envelope.call()
            if envelope.subject == "revoke":
                value: Any = await self.revoke(*args, **kwargs)
            elif envelope.subject in ("pending", "scheduled"):
                value = getattr(self, envelope.subject)(*args, **kwargs)
            else:
                return Outcome.rejected(
                    UNKNOWN_HANDLER,
                    f"the scheduler takes delayed tasks (with a pool header), 'revoke', "
                    f"'pending' and 'scheduled'; not {envelope.subject!r}",
                ), None
        except (WireFormatError, TypeError) as exc:
            return Outcome.rejected(BAD_ARGUMENTS, f"{envelope.subject}: {exc}"), None
        return ACCEPTED, (STATUS_OK, value)
