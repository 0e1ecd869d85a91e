"""The beat: the actor on the services node that fires periodic tasks.

Celery's ``celery beat``, as an actor next to the scheduler. Each periodic task
(``@app.periodic``, ``app.add_periodic``, ``[[periodic]]`` in cluster.toml) is
sent to its pool when due, as ``delay()`` sends it, durably through the node's
backlog: kept until the pool's router takes it.

**Durable: at most once per due time, never skipped silently.** The last
firing of each schedule is a row of the node's store (table ``beat``), written
*in the same commit* as the firing's backlog entry. A firing's task id and
message id are made from its schedule's name and due time (:func:`firing_id`):
a copy sent again (its node died before its receiver settled it; the backlog
sends it again on restart) is the same message, and the router takes it once.
So a SIGKILL of the services node neither repeats nor skips a firing: when the
beat starts again, a due time that passed while it was down is fired once
(``catch_up = true``, several missed due times make one firing, the latest,
and a log line says how many it stands for) or skipped with a log line saying
how many (``catch_up = false``). A schedule the beat never saw before starts
from now: nothing for the past.

**One beat fires in a cluster.** With a lease grantor (the Controller, under
``cluster up``) the beat fires only while it holds the ``scheduler`` lease
(``cluster/_leases.py``): it renews it every third of the TTL, counts it from
when it sent the request, on its own clock, checks it before every firing
with a margin, and stops firing when it cannot renew. Every renewal reports
its last firings to the grantor, and a renewal follows each firing at once;
a beat that takes the lease over starts from what the last holder reported
(and its own store). A node with no grantor (in-process nodes, tests) fires
without a lease.

**Time.** Due times are on its node's clock (``Node(clock=...)``: wall-clock
seconds); it waits with trio timers, so under trio's ``autojump_clock`` with a
clock derived from ``trio.current_time()`` a test runs days in milliseconds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Final

import trio

from ..._errors import ActorctlError, ConfigError
from ..._log import log
from ...actors import Actor, handler
from ...cluster import ClusterConfig, NodeConfig, Shift
from ...etcd import EtcdRoleLease
from ...store import Store
from ..client._client import Directory, TaskClient, send_task
from ..protocol._protocol import BEAT_NAME, SCHEDULER_ROLE
from ..protocol._send_options import SendOptions
from ..protocol._state import store_of
from ._periodic import PeriodicTask, firing_id

__all__ = ["BEAT_TABLE", "H_PERIODIC", "LEASE_TTL", "Beat"]

#: The store table of the beat: schedule name -> {"last": due or null, "armed": time}.
BEAT_TABLE: Final = "beat"
#: Seconds a scheduler lease lasts unless renewed.
LEASE_TTL: Final = 30.0
#: The header that names the periodic task a message is a firing of.
H_PERIODIC: Final = "periodic"
#: Seconds it waits at most before it reads the wall clock again (it may jump).
_MAX_WAIT: Final = 60.0
#: Due times counted at most when a long outage is caught up or skipped.
_MAX_COUNTED: Final = 100_000


class Beat(Actor):
    """``beat``: fires periodic tasks when due (docs/scheduling.md).

    Args:
        periodics: what it fires.
        directory: where the pools are.
        lease: the address of the lease grantor (the Controller), or the
            scheduler role's lease in etcd (a cluster that spans hosts: each
            firing is recorded there, fenced, before it is sent); None fires
            without a lease.
        lease_ttl: seconds a lease lasts unless renewed.
    """

    name = BEAT_NAME
    mailbox_capacity: ClassVar[int] = 100
    concurrency: ClassVar[int] = 4

    def __init__(
        self,
        periodics: Sequence[PeriodicTask],
        directory: Directory,
        *,
        lease: str | EtcdRoleLease | None = None,
        lease_ttl: float = LEASE_TTL,
        periodics_of: Callable[[ClusterConfig], list[PeriodicTask]] | None = None,
    ) -> None:
        if not lease_ttl > 0:
            raise ConfigError(f"beat lease_ttl: expected seconds > 0, got {lease_ttl!r}")
        self.periodics = {periodic.name: periodic for periodic in periodics}
        #: The periodic tasks of a cluster file (None: outside a cluster).
        self.periodics_of = periodics_of
        self.directory = directory
        self.lease_address = lease if isinstance(lease, str) else None
        self.role_lease = lease if isinstance(lease, EtcdRoleLease) else None
        self.lease_ttl = float(lease_ttl)
        self.margin = self.lease_ttl / 10
        self.last: dict[str, float | None] = {}
        self.armed: dict[str, float] = {}
        self.next: dict[str, float] = {}
        self.fence = 0
        self.fired = 0
        self._valid_until = -math.inf  # trio time until which its lease holds
        self._wake = trio.Event()
        self._report = trio.Event()
        self._standby = False
        self._unreached = False  # the grantor did not answer, and that was said
        self._held = trio.Event()  # set while it holds a lease (or has no grantor)
        self._client: TaskClient | None = None
        self._store: Store | None = None

    # -- lifecycle ----------------------------------------------------------------------

    async def on_start(self) -> None:
        """Load the last firings its node's store keeps; start the timer (and,
        with a grantor, the lease keeper: nothing fires before it holds the lease)."""
        outbox = self._require_cell().outbox
        self._client = TaskClient(outbox, self.directory)
        store = self._store = store_of(outbox)
        self.last.clear()
        self.armed.clear()
        self.next.clear()
        self._valid_until = -math.inf
        self._wake = trio.Event()
        for name, value in store.items(BEAT_TABLE):
            if name not in self.periodics:
                log("actorctl:beat:forgotten", schedule=name, reason="no such periodic task now")
                store.delete(BEAT_TABLE, name)
                continue
            row = json.loads(value)
            self.last[name] = row.get("last")
            self.armed[name] = float(row["armed"])
        self._held = trio.Event()
        if not self._leased:
            self._held.set()
            self._resume({})
        else:
            self.start_soon(self._keep_lease)
        self.start_soon(self._timer)

    @property
    def _leased(self) -> bool:
        """Whether it fires only under a lease (a grantor is set)."""
        return self.lease_address is not None or self.role_lease is not None

    async def on_stop(self) -> None:
        """Across hosts, give the scheduler role up: another node's beat takes
        it at once instead of after the lease's ttl."""
        if self.role_lease is not None:
            await self.role_lease.resign()

    @property
    def client(self) -> TaskClient:
        if self._client is None:
            raise ActorctlError("the beat is not running: host it on a node")
        return self._client

    @property
    def store(self) -> Store:
        if self._store is None:
            raise ActorctlError("the beat is not running: host it on a node")
        return self._store

    def holding(self) -> bool:
        """Whether it may fire now: no grantor, or a lease that holds for more
        than the margin yet, on its own clock."""
        if not self._leased:
            return True
        return trio.current_time() < self._valid_until - self.margin

    async def wait_holding(self) -> None:
        """Wait until it holds the scheduler lease (at once without a grantor)."""
        await self._held.wait()

    # -- commands -----------------------------------------------------------------------

    @handler
    async def schedules(self) -> list[dict[str, Any]]:
        """Each periodic task with its schedule, last and next firing."""
        return self.rows()

    def rows(self) -> list[dict[str, Any]]:
        """:meth:`schedules`' answer, for the node's ``_tasks`` (``overview``)."""
        rows = []
        for name, periodic in sorted(self.periodics.items()):
            row = periodic.describe(self.last.get(name), self.next.get(name))
            row["holding"] = self.holding()
            rows.append(row)
        return rows

    def follow_cluster(self, config: ClusterConfig, node: NodeConfig, shift: Shift) -> list[str]:
        """Follow a reloaded cluster file's [[periodic]] tables."""
        if self.periodics_of is None:
            return []
        return self.replace(self.periodics_of(config))

    def replace(self, periodics: Sequence[PeriodicTask]) -> list[str]:
        """Fire ``periodics`` from now on: one removed is forgotten (its row
        too); one added fires nothing for the past, as a schedule seen for the
        first time; one changed is next due by its new schedule, from now.
        What changed, in lines."""
        new = {periodic.name: periodic for periodic in periodics}
        lines = []
        for name in [n for n in self.periodics if n not in new]:
            del self.periodics[name]
            for table in (self.last, self.armed, self.next):
                table.pop(name, None)
            self.store.delete(BEAT_TABLE, name)
            lines.append(f"beat: periodic {name} removed")
        now = self.outbox_now()
        for name, periodic in new.items():
            before = self.periodics.get(name)
            if before == periodic:
                continue
            self.periodics[name] = periodic
            if before is None:
                self.armed[name] = now
                self._put(name)
            if self._held.is_set():  # it fires: its next due time, from now
                self.next[name] = periodic.schedule.next_after(now)
            lines.append(f"beat: periodic {name} {'added' if before is None else 'changed'}")
        self._wake.set()
        return lines

    # -- due times ----------------------------------------------------------------------

    def _resume(self, handover: dict[str, Any]) -> None:
        """It may fire again (it started, or took the lease): from each
        schedule's last firing (its own or ``handover``'s, the later), fire a
        due time that passed meanwhile once, or skip it, as ``catch_up`` says."""
        now = self.outbox_now()
        for name, periodic in self.periodics.items():
            reported = handover.get(name)
            last = self.last.get(name)
            if isinstance(reported, int | float) and (last is None or reported > last):
                last = self.last[name] = float(reported)
            since = last if last is not None else self.armed.get(name)
            if since is None:  # never seen: nothing for the past
                self.armed[name] = now
                self._put(name)
                self.next[name] = periodic.schedule.next_after(now)
                continue
            count, latest = self._passed(periodic, since, now)
            if not count:
                self.next[name] = periodic.schedule.next_after(since)
            elif periodic.catch_up:
                self.next[name] = latest  # due now: the timer fires it once
                if count > 1:
                    log("actorctl:beat:catching-up", schedule=name, missed=count, fires_once=latest)
            else:
                log(
                    "actorctl:beat:skipped",
                    schedule=name,
                    skipped=count,
                    reason="catch_up = false: due while no beat ran",
                    last_skipped=latest,
                )
                self.last[name] = latest
                self._put(name)
                self.next[name] = periodic.schedule.next_after(now)
        self._wake.set()

    @staticmethod
    def _passed(periodic: PeriodicTask, since: float, now: float) -> tuple[int, float]:
        """How many due times fell in (``since``, ``now``], and the latest."""
        schedule = periodic.schedule
        if schedule.every is not None:
            count = math.floor(now / schedule.every) - math.floor(since / schedule.every)
            return max(0, count), math.floor(now / schedule.every) * schedule.every
        due, count, latest = schedule.next_after(since), 0, since
        while due <= now and count < _MAX_COUNTED:
            count, latest, due = count + 1, due, schedule.next_after(due)
        while due <= now:  # a very long outage: the latest, uncounted beyond the cap
            latest, due = due, schedule.next_after(due)
        return count, latest

    def outbox_now(self) -> float:
        return self.client.outbox.now()

    def _put(self, name: str) -> None:
        row = {"last": self.last.get(name), "armed": self.armed.get(name, self.outbox_now())}
        self.store.put(BEAT_TABLE, name, json.dumps(row).encode())

    # -- firing -------------------------------------------------------------------------

    async def _timer(self) -> None:
        """Fire each schedule when due, while it may: the beat's own task."""
        while True:
            self._wake = trio.Event()
            now = self.outbox_now()
            waits = [_MAX_WAIT]
            if self.holding() and self.next:
                for name in sorted(self.next, key=self.next.__getitem__):
                    if self.next[name] > now:
                        break
                    if not self.holding():  # checked before every firing
                        break
                    await self._fire(self.periodics[name], now)
                    now = self.outbox_now()
                waits.append(min(self.next.values()) - now)
                if self._leased:  # the lease's margin may pass first
                    waits.append(self._valid_until - self.margin - trio.current_time())
            elif self._leased and not self.holding():
                waits = [math.inf]  # the keeper wakes it once it holds the lease
            with trio.move_on_after(max(0.0, min(waits))):
                await self._wake.wait()

    async def _fire(self, periodic: PeriodicTask, now: float) -> None:
        """Send ``periodic``'s firing due now: its last-fired row and its
        backlog entry in one store commit."""
        name = periodic.name
        due = self.next[name]
        count, latest = self._passed(periodic, due, now)
        if count:  # the timer woke late (a stalled loop): one firing, said so
            log("actorctl:beat:late", schedule=name, missed=count, due=due, fires_once=latest)
            due = latest
        self.next[name] = periodic.schedule.next_after(due)
        try:
            self.directory.resolve(periodic.pool)  # before the row: a firing that cannot go
        except ConfigError as exc:
            log("actorctl:beat:no-pool", schedule=name, due=due, error=str(exc))
            return
        if self.role_lease is not None and not await self._record(name, due):
            self.next[name] = due  # still due: fired by whoever holds the role
            return
        task_id = firing_id(name, due)
        self.last[name] = due
        # The row and the firing are one commit: the row's put is queued now and
        # send_task(durable=True) puts the message into the backlog table before
        # it first awaits (the commit): with no await in between, both land in
        # the same store batch, i.e. the same SQLite transaction. A SIGKILL keeps
        # both (the backlog sends the firing on restart, under the same message
        # id) or neither (the beat fires it again on restart, with the same ids).
        self._put(name)
        await send_task(
            self.client,
            task=periodic.task,
            pool=periodic.pool,
            args=periodic.args,
            kwargs=periodic.kwargs,
            task_id=task_id,
            reply_to=None,
            options=SendOptions.of(periodic.options, f"periodic task {name}"),
            headers={H_PERIODIC: name},
            durable=True,
            message_id=task_id,
        )
        self.fired += 1
        log("actorctl:beat:fired", schedule=name, task=periodic.task, task_id=task_id, due=due)
        self._report.set()  # tell the grantor at once

    async def _record(self, name: str, due: float) -> bool:
        """Across hosts: record the firing of ``name`` due at ``due`` in etcd,
        fenced, before it is sent. A beat whose role another has taken (it was
        cut off from etcd, or stalled) is refused here and fires nothing; so is
        one that cannot reach etcd now (it tries again once renewed)."""
        assert self.role_lease is not None
        state = {n: last for n, last in self.last.items() if last is not None}
        state[name] = due
        if await self.role_lease.record(state):
            return True
        log(
            "actorctl:beat:not-fired",
            schedule=name,
            due=due,
            fence=self.fence,
            why="its firing could not be recorded in etcd as the scheduler's",
        )
        self._valid_until = -math.inf
        self._let_go()
        self._report.set()  # ask for the role again at once
        return False

    # -- the lease ----------------------------------------------------------------------

    async def _keep_lease(self) -> None:
        """Acquire, then renew the lease every third of its TTL (and after each
        firing, to report it); the beat's own task."""
        while True:
            self._report = trio.Event()
            await self._renew()
            with trio.move_on_after(self.lease_ttl / 3):
                await self._report.wait()

    async def _renew(self) -> None:
        holder = str(self._require_cell().address)
        held = self.holding()
        sent = trio.current_time()  # the lease counts from here, on its own clock
        try:
            answer = await self._ask_lease(holder, held)
        except ActorctlError as exc:
            grantor = self.role_lease.where if self.role_lease else self.lease_address
            if held:
                log("actorctl:beat:lease-unrenewed", grantor=grantor, error=str(exc))
            elif not self._unreached:  # said once, until a grant
                self._unreached = True
                log(
                    "actorctl:beat:no-lease",
                    grantor=grantor,
                    error=str(exc),
                    why=f"no {'etcd' if self.role_lease else 'Controller'} answers: "
                    "nothing fires until one grants the lease",
                )
            if not self.holding():
                self._let_go()
            return  # it stops firing once the lease it has runs out
        if not answer.get("granted"):
            self._valid_until = -math.inf
            self._let_go()
            if held or not self._standby:  # said once per change
                log("actorctl:beat:standby", holder=answer.get("holder"), fence=answer.get("fence"))
                self._standby = True
            return
        self._standby = self._unreached = False
        self._valid_until = sent + self.lease_ttl
        if not held:
            self.fence = int(answer["fence"])
            log("actorctl:beat:leader", fence=self.fence, holder=holder)
            self._resume(dict(answer.get("state") or {}))
        self._held.set()
        self._wake.set()

    async def _ask_lease(self, holder: str, held: bool) -> dict[str, Any]:
        """Ask the grantor for the scheduler lease: etcd across hosts, else the
        Controller (told the last firings, while it holds the lease)."""
        if self.role_lease is not None:
            return await self.role_lease.request(holder, self.lease_ttl)
        assert self.lease_address is not None
        state = {n: due for n, due in self.last.items() if due is not None} if held else None
        ref = self.ref(self.lease_address).with_options(timeout=min(5.0, self.lease_ttl / 3))
        answer: dict[str, Any] = await ref.ask(
            "lease", SCHEDULER_ROLE, holder, self.lease_ttl, state
        )
        return answer

    def _let_go(self) -> None:
        """It no longer holds the lease: :meth:`wait_holding` waits again."""
        if self._held.is_set():
            self._held = trio.Event()
