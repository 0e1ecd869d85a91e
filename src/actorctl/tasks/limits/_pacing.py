"""What holds a task back: its own limits on a worker, and its pool's router.

A worker's gate (``_gate.py``) keeps each task's per-worker limits, which
:func:`task_limits` sets from the task's options.

Every task of a pool passes its router on the services node (``_hosting.py``).
The router hands each one to its node's backlog for the least loaded worker
and settles it once the backlog holds it (``cluster/_router.py``); the backlog
sends each worker its tasks highest ``priority`` first, as that worker grants
credit.

Three things make the router hold a task back first, rather than pass it on:

- its **per-worker rate limit** (``rate_limit="10/s"``): the router paces it
  for each worker, and sends a worker the next one only when that worker's
  turn has come (each worker's gate keeps the limit too);
- its **global rate limit** (``@app.task(global_rate_limit="100/m")``, or
  ``actorctl control rate-limit --global``): the router lets one through each
  ``period / N`` seconds (5 % wider: the hop to the worker adds jitter, and a
  limit is a ceiling), whichever worker runs it;
- a **suspend** (``actorctl control suspend TASK``): none goes through until
  ``resume``.

A task held back is kept in the node's store (table ``held``) before the router
accepts it, so its sender is free at once, no worker holds it (it takes none
of a worker's credit or run slots), and it outlives a restart of the router's
node. When its turn comes, its row is deleted in the same commit that puts it
in the backlog. Tasks that nothing holds back go straight through, at the
cost of one dict lookup.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Final, final

import trio

from ..._errors import WireFormatError
from ..._log import log
from ...actors import Address
from ...cluster import AT_MOST_ONCE, ClusterConfig, NodeConfig, Router, Shift
from ...mailbox import ACCEPTED, Envelope, Outcome, decode, encode
from ..app._registry import TaskRegistry
from ..app._task import Task
from ..protocol._state import store_of
from ..worker._control import WorkerState
from ._gate import Gate, TaskLimits, priority_of
from ._rates import Pacer, RateLimit
from ._tuning import ROUTER_WIDEN

__all__ = ["HELD", "PoolRouter", "task_limits"]

HELD: Final = "held"
_Held = tuple[tuple[int, int], str, Envelope]  # ((-priority, arrival), row key, message)


def task_limits(gate: Gate, task: Task, *, routed: bool) -> None:
    """Set ``task``'s own limits on a worker's ``gate``: its rate limit, its
    concurrency and its tokens. With no router in front (``routed`` False),
    the one worker of the pool keeps its global rate limit too."""
    rate, pool_rate = task.rate_limit, task.global_rate_limit
    if not routed and pool_rate and (rate is None or pool_rate.interval > rate.interval):
        rate = pool_rate
    if rate is None and task.concurrency is None and task.concurrency_per_key is None:
        return
    limits = gate.limits(task.name)
    limits.pacer.set(rate)
    # concurrency=0 is a task declared suspended: `actorctl control resume` lets it go.
    limits.suspended = task.concurrency == 0
    limits.cap = task.concurrency or None
    limits.per_key = task.concurrency_per_key


@final
class PoolRouter(Router):
    """A task pool's router: tasks run as long as they run (a worker settles a
    task once it has run it), so it holds many at once and re-routes one only
    when its worker refuses it or its node is gone, not after a few seconds.
    It forwards every task as it is: the worker answers the caller itself. It
    hands each task to its node's backlog and settles it once held there, so a
    caller's send is confirmed as soon as the pool has the task.

    Args:
        instances: the pool's workers.
        attempt_timeout: as for any router.
        app: the tasks (their rate limits).
        state: the node's task state (limits changed at run time).
    """

    mailbox_capacity: ClassVar[int] = 1000
    concurrency: ClassVar[int] = 1000
    relays_replies: ClassVar[bool] = False
    hands_over: ClassVar[bool] = True

    def __init__(
        self,
        instances: Sequence[Address | str],
        *,
        attempt_timeout: float,
        app: TaskRegistry | None = None,
        state: WorkerState | None = None,
        workers: Callable[[ClusterConfig], list[str]] | None = None,
        pool: str | None = None,
    ) -> None:
        super().__init__(instances, attempt_timeout=attempt_timeout)
        #: Its pool: on a cluster that spans hosts, it routes to the pool's
        #: workers that etcd lists (``cluster/membership/_member.py``).
        self.follows_pool = pool
        #: The pool's workers in a cluster file (None: outside a cluster).
        self.workers_of = workers
        #: Global rate limits and suspends: for the pool as a whole.
        self.gate = Gate(None, widen=ROUTER_WIDEN)
        #: Per-worker rate limits, paced here for each instance, so that a
        #: task waits here rather than at a worker that holds it for nothing.
        self.per_worker: dict[str, dict[Address, Pacer]] = {}
        self._rates_changed = trio.Event()
        for task in app.tasks.values() if app is not None else ():
            if task.global_rate_limit is not None:
                self.gate.limits(task.name).pacer.set(task.global_rate_limit)
            if task.rate_limit is not None:
                self.set_worker_rate(task.name, task.rate_limit)
            if task.concurrency == 0:  # declared suspended: held here until resumed
                self.gate.suspend(task.name, True)
        #: Celery's default task names, to the tasks' (a task sent under one is paced as itself).
        self._aliases: dict[str, str] = dict(app.aliases) if app is not None else {}
        self._state = state
        self._held: dict[str, list[_Held]] = {}  # task -> a heap, best first
        self._releasing: set[str] = set()
        self._arrivals = itertools.count()
        self._emptied = trio.lowlevel.ParkingLot()  # wait_released's

    @property
    def held(self) -> int:
        """Tasks it holds back now."""
        return sum(len(heap) for heap in self._held.values())

    async def wait_released(self) -> None:
        """Wait until it holds no task back (``held`` is 0): a test's ``wait_idle``."""
        while self.held:
            await self._emptied.park()

    def set_worker_rate(self, task: str, limit: RateLimit | None) -> None:
        """Pace ``task`` for each instance at ``limit`` (None: not at all)."""
        if limit is None:
            self.per_worker.pop(task, None)
        else:
            pacers = self.per_worker.setdefault(task, {})
            for address in self.instances:
                pacer = pacers.setdefault(address, Pacer(None, widen=ROUTER_WIDEN))
                pacer.set(limit)
        self._rates_changed.set()
        self._rates_changed = trio.Event()

    def follow_cluster(self, config: ClusterConfig, node: NodeConfig, shift: Shift) -> list[str]:
        """Follow a reloaded cluster file: route to the pool's workers it
        names (as ``shift`` says for the nodes a reload changes), each paced
        for the per-worker limits."""
        wanted = self.workers_of(config) if self.workers_of is not None else []
        if not wanted:
            return []  # a pool with no workers left: what it holds waits for them
        return self.route_to(config, wanted, shift)

    def retarget(
        self, instances: Sequence[Address | str], why: str = "cluster reload"
    ) -> tuple[list[str], list[str], int]:
        """Route to ``instances`` (``Router.retarget``), each paced for the
        per-worker limits."""
        changed = super().retarget(instances, why)
        for pacers in self.per_worker.values():
            limit = next(iter(pacers.values())).limit if pacers else None
            for address in [a for a in pacers if a not in self.instances]:
                del pacers[address]
            for address in self.instances:
                if address not in pacers:
                    pacers[address] = Pacer(None, widen=ROUTER_WIDEN)
                    pacers[address].set(limit)
        self._rates_changed.set()
        self._rates_changed = trio.Event()
        return changed

    async def on_start(self) -> None:
        """Take back the tasks its node held for its instances, and those it
        held back itself when its node stopped."""
        await super().on_start()
        name = self.address.name
        if self._state is not None:
            self._state.tuning.add_router(name, self)
        store = store_of(self._require_cell().outbox)
        self._hold_stored([key for key, _ in store.items(HELD)])
        if self._held:
            log("actorctl:router:holding", router=name, tasks=self.held)

    def adopt(self, keys: list[str]) -> int:
        """Hold back again the tasks put in its node's store under ``keys``
        (those of this router: ``NAME/message id``) while it runs: taken over
        from another services node's store (a replica's). Returns how many."""
        held = self._hold_stored(keys)
        if held:
            log("actorctl:router:holding", router=self.address.name, tasks=held, taken_over=True)
        return held

    def _hold_stored(self, keys: list[str]) -> int:
        name = self.address.name
        store = store_of(self._require_cell().outbox)
        prefix = f"{name}/"
        held = 0
        for key in keys:
            value = store.get(HELD, key)
            if value is None or not key.startswith(prefix):
                continue
            try:
                self._hold(decode(value), key)
            except (WireFormatError, ValueError) as exc:
                log("actorctl:router:unreadable", router=name, key=key, error=str(exc))
                store.delete(HELD, key)
                continue
            held += 1
        return held

    async def handle_unmatched(
        self, envelope: Envelope
    ) -> tuple[Outcome, tuple[str, Any] | None] | None:
        task = self._aliases.get(envelope.subject, envelope.subject)
        limits = self.gate.tasks.get(task)
        if (limits is None and task not in self.per_worker) or envelope.headers.get(AT_MOST_ONCE):
            return await super().handle_unmatched(envelope)
        go, target = self._turn_now(task, limits)
        if go:  # its turn is now
            if target is None:
                return await super().handle_unmatched(envelope)
            await self.pass_on(envelope, target)
            return ACCEPTED, None
        store = store_of(self._require_cell().outbox)
        key = f"{self.address.name}/{envelope.message_id}"
        if store.get(HELD, key) is None:
            store.put(HELD, key, encode(envelope))
            await store.sync()
            self._hold(envelope, key)
        return ACCEPTED, None

    def _turn_now(self, task: str, limits: TaskLimits | None) -> tuple[bool, Address | None]:
        """Whether ``task`` may go now (nothing of it held, nothing holding it
        back), and to which instance, if a per-worker limit chooses one. Takes
        the turns only when it may go."""
        if self._held.get(task) or (limits is not None and limits.held(None)):
            return False, None
        pacers = self.per_worker.get(task)
        target = None
        if pacers is not None:
            target = self._ready_instance(pacers)
            if target is None:
                return False, None
        if limits is not None and not limits.pacer.take():
            return False, None
        if pacers is not None and target is not None:
            pacers[target].take()
        return True, target

    def _ready_instance(self, pacers: dict[Address, Pacer]) -> Address | None:
        """The least loaded instance whose pacer lets a start through now."""
        now = trio.current_time()
        ready = [a for a in self.instances if pacers[a].ready_at() <= now]
        return min(ready, key=lambda a: self.load[a]) if ready else None

    async def _instance_turn(self, task: str) -> Address | None:
        """Wait until an instance may take ``task`` under its per-worker limit,
        and take that turn (None: it has no such limit, any instance may)."""
        while True:
            pacers = self.per_worker.get(task)
            if pacers is None:
                return None
            target = self._ready_instance(pacers)
            if target is not None:
                pacers[target].take()
                return target
            changed = self._rates_changed
            with trio.move_on_at(min(p.ready_at() for p in pacers.values())):
                await changed.wait()

    def _hold(self, envelope: Envelope, key: str) -> None:
        task = self._aliases.get(envelope.subject, envelope.subject)
        order = (-priority_of(envelope.headers), next(self._arrivals))
        heapq.heappush(self._held.setdefault(task, []), (order, key, envelope))
        if task not in self._releasing:
            self._releasing.add(task)
            self.start_soon(self._release, task)

    async def _release(self, task: str) -> None:
        """Pass ``task``'s held messages on, best first, as its limits allow:
        one releaser per task that has some held (the router's own task)."""
        heap = self._held[task]
        store = store_of(self._require_cell().outbox)
        try:
            while heap:
                ticket = await self.gate.enter(task, -heap[0][0][0])
                try:
                    target = await self._instance_turn(task)
                    _, key, envelope = heapq.heappop(heap)
                    # No await between the delete and the backlog's put: one
                    # commit holds both, so a crash keeps it in one or the other.
                    store.delete(HELD, key)
                    await self.pass_on(envelope, target)
                finally:
                    self.gate.leave(ticket)
        finally:
            self._releasing.discard(task)
            if not heap:
                self._held.pop(task, None)
                self._emptied.unpark_all()
