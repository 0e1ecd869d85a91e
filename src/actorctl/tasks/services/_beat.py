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
``cluster up``; etcd across hosts) the beat fires only while it holds the
``scheduler`` lease, checked before every firing; its :class:`BeatLease`
(``_beat_lease.py``) asks for it, renews it (at once after each firing, to
report it) and lets it go. When it takes the lease, the beat starts from
what the last holder reported (and its own store). A node with no grantor
(in-process nodes, tests) fires without a lease.

**Across hosts** the role's lease is in etcd, and each firing is recorded
there, fenced, *before* it is sent, with the address of the beat that
recorded it (``RECORDED_BY``). A beat that died between that record and its
store's commit (milliseconds) finds, when it holds the role again, a firing
recorded by itself that its store does not hold: it fires that due time
again, under the same ids (``actorctl:beat:firing-again``). If another beat
took the role meanwhile, that one starts after the recorded firing, which
then does not run.

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
from ..protocol._protocol import BEAT_NAME
from ..protocol._send_options import SendOptions
from ..protocol._state import store_of
from ._beat_lease import LEASE_TTL, BeatLease
from ._periodic import PeriodicTask, firing_id

__all__ = ["BEAT_TABLE", "H_PERIODIC", "Beat"]

#: The store table of the beat: schedule name -> {"last": due or null, "armed": time}.
BEAT_TABLE: Final = "beat"
#: The header that names the periodic task a message is a firing of.
H_PERIODIC: Final = "periodic"
#: Seconds it waits at most before it reads the wall clock again (it may jump).
_MAX_WAIT: Final = 60.0
#: The key of the role's state in etcd that names the beat that wrote it (a
#: control character: no periodic task's name is this).
RECORDED_BY: Final = "\x1frecorded-by"


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
        self.periodics = {periodic.name: periodic for periodic in periodics}
        #: The periodic tasks of a cluster file (None: outside a cluster).
        self.periodics_of = periodics_of
        self.directory = directory
        self.last: dict[str, float | None] = {}
        #: The last firing of each schedule that its store holds (committed):
        #: what it reports to the Controller.
        self.held: dict[str, float] = {}
        #: Firings it recorded in etcd and died before its store held them:
        #: fired again, under the same ids, once it holds the role.
        self.again: dict[str, float] = {}
        self.armed: dict[str, float] = {}
        self.next: dict[str, float] = {}
        self.fired = 0
        #: Its scheduler lease (held at once with no grantor).
        self.lease = BeatLease(
            lease,
            lease_ttl,
            actor=self,
            firings=lambda: self.held,
            resume=self._resume,
            wake=self._wake_timer,
        )
        self._wake = trio.Event()
        self._client: TaskClient | None = None
        self._store: Store | None = None

    # -- lifecycle ----------------------------------------------------------------------

    async def on_start(self) -> None:
        """Load the last firings its node's store keeps; start the timer (and,
        with a grantor, the lease keeper: nothing fires before it holds the lease)."""
        outbox = self._require_cell().outbox
        self._client = TaskClient(outbox, self.directory)
        store = self._store = store_of(outbox)
        for table in (self.last, self.held, self.again, self.armed, self.next):
            table.clear()
        self._wake = trio.Event()
        for name, value in store.items(BEAT_TABLE):
            if name not in self.periodics:
                log("actorctl:beat:forgotten", schedule=name, reason="no such periodic task now")
                store.delete(BEAT_TABLE, name)
                continue
            row = json.loads(value)
            self.last[name] = row.get("last")
            if row.get("last") is not None:
                self.held[name] = float(row["last"])
            self.armed[name] = float(row["armed"])
        self.lease.begin()
        if not self.lease.leased:
            self._resume({})
        else:
            self.start_soon(self.lease.keep)
        self.start_soon(self._timer)

    async def on_stop(self) -> None:
        """Across hosts, give the scheduler role up: another node's beat takes
        it at once instead of after the lease's ttl."""
        await self.lease.resign()

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
        """Whether it may fire now (:meth:`BeatLease.holding`)."""
        return self.lease.holding()

    async def wait_holding(self) -> None:
        """Wait until it holds the scheduler lease (at once without a grantor)."""
        await self.lease.wait_holding()

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
            for table in (self.last, self.held, self.again, self.armed, self.next):
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
            if self.lease.granted():  # it fires: its next due time, from now
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
        # What it recorded in etcd itself and its store does not hold: it died
        # between the two (a window of milliseconds). That firing never went.
        mine = self.lease.role is not None and handover.get(RECORDED_BY) == self.lease.holder()
        for name, periodic in self.periodics.items():
            reported = handover.get(name)
            last = self.last.get(name)
            if isinstance(reported, int | float) and (last is None or reported > last):
                last = self.last[name] = float(reported)
                if mine:
                    self.again[name] = last
                else:  # its last holder's store holds it (or its host was lost)
                    self.held[name] = last
            since = last if last is not None else self.armed.get(name)
            if since is None:  # never seen: nothing for the past
                self.armed[name] = now
                self._put(name)
                self.next[name] = periodic.schedule.next_after(now)
                continue
            count, latest = periodic.schedule.passed(since, now)
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
                self.last[name] = self.held[name] = latest
                self._put(name)
                self.next[name] = periodic.schedule.next_after(now)
        self._wake.set()

    def _wake_timer(self) -> None:
        self._wake.set()

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
            await self._fire_again()
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
                if self.lease.leased:  # the lease's margin may pass first
                    waits.append(self.lease.holds_until() - trio.current_time())
            elif self.lease.leased and not self.holding():
                waits = [math.inf]  # the keeper wakes it once it holds the lease
            with trio.move_on_after(max(0.0, min(waits))):
                await self._wake.wait()

    async def _fire(self, periodic: PeriodicTask, now: float) -> None:
        """Send ``periodic``'s firing due now: its last-fired row and its
        backlog entry in one store commit."""
        name = periodic.name
        due = self.next[name]
        count, latest = periodic.schedule.passed(due, now)
        if count:  # the timer woke late (a stalled loop): one firing, said so
            log("actorctl:beat:late", schedule=name, missed=count, due=due, fires_once=latest)
            due = latest
        self.next[name] = periodic.schedule.next_after(due)
        if not await self._send(periodic, due):
            self.next[name] = due  # still due: fired by whoever holds the role

    async def _fire_again(self) -> None:
        """Fire again each firing it recorded in etcd before it died, and its
        store never held (:meth:`_resume`): the same due time, the same ids."""
        for name, due in list(self.again.items()):
            if not self.holding():
                return
            periodic = self.periodics.get(name)
            if periodic is None:  # removed meanwhile (a reload)
                self.again.pop(name, None)
                continue
            log(
                "actorctl:beat:firing-again",
                schedule=name,
                due=due,
                why="recorded in etcd as fired by this beat, not in its store: "
                "it stopped between the two",
            )
            if not await self._send(periodic, due):
                return  # not the role's holder now: still to fire again
            self.again.pop(name, None)

    async def _send(self, periodic: PeriodicTask, due: float) -> bool:
        """Send ``periodic``'s firing due at ``due``: its last-fired row and its
        backlog entry in one store commit. False: it may not (across hosts, the
        role is another's), and it fired nothing."""
        name = periodic.name
        try:
            self.directory.resolve(periodic.pool)  # before the row: a firing that cannot go
        except ConfigError as exc:
            log("actorctl:beat:no-pool", schedule=name, due=due, error=str(exc))
            return True  # said so: this due time does not go
        last = max(due, self.last.get(name) or due)
        if self.lease.role is not None and not await self._record(name, last):
            return False
        task_id = firing_id(name, due)
        self.last[name] = last
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
        self.held[name] = max(last, self.held.get(name, last))  # committed
        self.fired += 1
        log("actorctl:beat:fired", schedule=name, task=periodic.task, task_id=task_id, due=due)
        self.lease.report()  # tell the grantor at once
        return True

    async def _record(self, name: str, due: float) -> bool:
        """Across hosts: record the firing of ``name`` due at ``due`` in etcd,
        fenced, before it is sent, with who recorded it (``RECORDED_BY``). A
        beat whose role another has taken (it was cut off from etcd, or
        stalled) is refused here and fires nothing; so is one that cannot
        reach etcd now (it tries again once renewed)."""
        assert self.lease.role is not None
        state: dict[str, Any] = {n: last for n, last in self.last.items() if last is not None}
        state[name] = due
        state[RECORDED_BY] = self.lease.holder()
        if await self.lease.role.record(state):
            return True
        log(
            "actorctl:beat:not-fired",
            schedule=name,
            due=due,
            fence=self.lease.fence,
            why="its firing could not be recorded in etcd as the scheduler's",
        )
        self.lease.lost()  # ask for the role again at once
        return False
