"""Revoking tasks: the caller's side (``app.control``, ``result.revoke()``), the
control actor each task node hosts, and what its workers share.

A revoke goes to the ``_tasks`` control actor of every node that hosts workers
(its own mailbox, so that it never queues behind the tasks it revokes) and to
the scheduler (docs/protocol.md §14.8). Each keeps the ids it was told in its
node's store for REVOKE_EXPIRES seconds, and reloads them when it starts: a
revoke outlives a restart of the node.

``_tasks`` also answers ``result(task_id)`` from its node's store: the final
state of a task whose document that node sent (``_documents.py``); and, for
the Controller's web page (docs/operations.md), ``recent`` (the runs that
ended here lately) and ``overview`` (its workers, limits, running and waiting
tasks, and on the services node the delayed tasks and periodic schedules).
"""

from __future__ import annotations

import difflib
import functools
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, ClassVar, Final, final

import trio

from ..._errors import ConfigError
from ..._log import log
from ...actors import Actor, BadArguments, handler
from ...cluster import ClusterConfig, NodeConfig, RestartNeeded, Shift
from ...mailbox import Envelope, Role
from ..client._client import TaskClient, current_client
from ..client._results import AsyncResult
from ..limits._tuning import Tuning
from ..protocol._protocol import CONTROL, REVOKED_MEMORY, SCHEDULER
from ..protocol._state import (
    StoredResult,
    node_outbox,
    record_revokes,
    store_of,
    stored_result,
    stored_revokes,
)
from ._control_calls import Inspect, answers_list, ask_nodes, rate_of, refuse_control
from ._inspect import Holdings
from ._inspect_answers import Pong

__all__ = ["Control", "TaskControl", "WorkerState", "arevoke", "new_result"]

#: Rows of each list an ``overview`` answer carries at most (with the whole count).
OVERVIEW_ROWS: Final = 50


async def arevoke(client: TaskClient, task_id: str | Sequence[str], terminate: bool) -> None:
    """Send a revoke of ``task_id`` (or of several) to every node that hosts
    workers and to the scheduler, and wait until each has recorded it.

    Raises:
        ConfigError: the directory names no node that hosts workers.
    """
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


def revoke(client: TaskClient, task_id: str | Sequence[str], terminate: bool) -> None:
    """:func:`arevoke` from plain code: blocks until every node recorded it."""
    client.wait_in_client_thread(functools.partial(arevoke, client, task_id, terminate))


def new_result(client: TaskClient, task_id: str, task: str, *, tracked: bool) -> AsyncResult:
    """The handle on task ``task_id`` sent through ``client``. A tracked one is
    registered with the client's results (before the task is sent, so that no
    document can come first); revoking it goes through the same client."""
    registry = client.results if tracked else None
    result = AsyncResult(
        task_id,
        task,
        revoke=functools.partial(revoke, client),
        arevoke=functools.partial(arevoke, client),
        forget=registry.forget if registry is not None else None,
        tracked=registry is not None,
        shared=None if registry is None else registry.shared,
    )
    if registry is not None:
        registry.expect(result)
    return result


@final
class Control:
    """``app.control``: revoke tasks across the cluster, through the client of
    the calling context."""

    def __init__(self, app_name: str) -> None:
        self._app_name = app_name

    def revoke(self, task_id: str | Sequence[str], terminate: bool = False) -> None:
        """Revoke tasks: a queued or delayed one never runs anywhere in its pool
        (it reports REVOKED); a running one sees ``ctx.is_aborted()`` turn true,
        and with ``terminate`` an async one is cancelled. Blocks until every
        node that hosts workers (and the scheduler) has recorded it."""
        revoke(current_client(f"app {self._app_name!r}"), task_id, terminate)

    async def arevoke(self, task_id: str | Sequence[str], terminate: bool = False) -> None:
        """:meth:`revoke` for trio code."""
        await arevoke(current_client(f"app {self._app_name!r}"), task_id, terminate)

    def inspect(self, destination: Sequence[str] | None = None, timeout: float = 10.0) -> Inspect:
        """Celery's ``app.control.inspect()``: ``active()``, ``reserved()``,
        ``scheduled()``, ``stats()``, ``registered()``, ``ping()`` of the
        cluster's nodes (or the ``destination`` ones), as ``actorctl inspect``."""
        return Inspect(self._app_name, destination, timeout)

    async def aping(
        self, destination: Sequence[str] | None = None, timeout: float = 10.0
    ) -> list[dict[str, Any]]:
        """:meth:`ping` for trio code."""
        client = current_client(f"app {self._app_name!r}")
        found = await ask_nodes(client, "ping", timeout=timeout, destination=destination)
        return answers_list(found)

    def ping(
        self, destination: Sequence[str] | None = None, timeout: float = 10.0
    ) -> list[dict[str, Any]]:
        """Celery's ``app.control.ping()``: ``[{node: {"ok": "pong"}}, ...]``, one
        per node that answered within ``timeout`` seconds."""
        client = current_client(f"app {self._app_name!r}")
        result: list[dict[str, Any]] = client.wait_in_client_thread(
            functools.partial(self.aping, destination, timeout)
        )
        return result

    async def arate_limit(
        self,
        task_name: str,
        rate_limit: object,
        destination: Sequence[str] | None = None,
        reply: bool = False,
        timeout: float = 10.0,
    ) -> list[dict[str, Any]] | None:
        """:meth:`rate_limit` for trio code."""
        value = rate_of(rate_limit)
        client = current_client(f"app {self._app_name!r}")
        args = [task_name, "rate_limit", value]
        found = await ask_nodes(client, "limit", args, timeout=timeout, destination=destination)
        refused = {node: answer for node, answer in found.items() if isinstance(answer, Exception)}
        if refused:
            said = "; ".join(f"{node}: {exc}" for node, exc in sorted(refused.items()))
            raise ConfigError(f"app.control.rate_limit({task_name!r}, ...): {said}")
        if not found:
            raise ConfigError(
                f"app.control.rate_limit({task_name!r}, ...): no node answered within "
                f"{timeout:g} s (is the cluster up? give timeout=...)"
            )
        done = {node: {"ok": "new rate limit set successfully"} for node in found}
        return answers_list(done) if reply else None

    def rate_limit(
        self,
        task_name: str,
        rate_limit: object,
        destination: Sequence[str] | None = None,
        reply: bool = False,
        timeout: float = 10.0,
    ) -> list[dict[str, Any]] | None:
        """Celery's ``app.control.rate_limit``: set ``task_name``'s per-worker
        rate limit on every node (``"10/m"``, a number per second; 0 or None
        lifts it), as ``actorctl control rate-limit`` does; it blocks until the
        nodes that answered within ``timeout`` keep it. ``reply``: their
        answers, Celery's shape.

        Raises:
            ConfigError: a node refused it (an unknown task, a bad rate), or
                none answered.
        """
        client = current_client(f"app {self._app_name!r}")
        call = functools.partial(
            self.arate_limit, task_name, rate_limit, destination, reply, timeout
        )
        result: list[dict[str, Any]] | None = client.wait_in_client_thread(call)
        return result

    def __getattr__(self, name: str) -> Any:
        raise refuse_control(name)


@final
class WorkerState:
    """What the task actors of one node share: revoked ids, running tasks,
    and the tasks its workers hold (``inspect``)."""

    def __init__(self) -> None:
        self.revoked: OrderedDict[str, bool] = OrderedDict()  # id -> terminate
        self.running: dict[str, trio.CancelScope] = {}
        self.workers = 0  # task workers running (worker_ready, worker_shutdown)
        #: The gates of the node's workers and routers, and the limits set at run time.
        self.tuning = Tuning()
        #: The tasks its workers hold, reserved or active, and what ran (``_inspect.py``).
        self.holdings = Holdings()

    def revoke(self, task_id: str, terminate: bool) -> None:
        """Remember a revoke; a running task being terminated is cancelled."""
        self.revoked[task_id] = terminate
        self.revoked.move_to_end(task_id)
        while len(self.revoked) > REVOKED_MEMORY:
            self.revoked.popitem(last=False)
        scope = self.running.get(task_id)
        if scope is not None and terminate:
            scope.cancel(reason="terminated by revoke")


@final
class TaskControl(Actor):
    """``_tasks`` on every node that hosts task workers (and on the services
    node): takes revokes at once (its own mailbox, so a revoke never queues
    behind the tasks it revokes), and answers for the results its node keeps.

    It is hosted before the node's workers, so that the revokes its
    :meth:`on_start` reloads are known before any of them takes a task.
    """

    name = CONTROL
    dedup_count: ClassVar[int] = 0
    concurrency: ClassVar[int] = 16  # a revoke waits for a commit; lookups need not

    def __init__(
        self,
        state: WorkerState,
        tasks: Collection[str] = (),
        *,
        aliases: Mapping[str, str] | None = None,
        limits: Callable[[ClusterConfig], dict[str, dict[str, Any]]] | None = None,
        pools: Callable[[ClusterConfig], Collection[str]] | None = None,
        delayed: Callable[[], list[dict[str, Any]]] | None = None,
        periodic: Callable[[], list[dict[str, Any]]] | None = None,
    ) -> None:
        self.state = state
        self.tasks = frozenset(tasks)
        #: Celery's default task names, to the tasks' (``TaskRegistry.aliases``).
        self.aliases = dict(aliases or {})
        #: The [[task]] limits of a cluster file (None: outside a cluster).
        self.limits_of = limits
        #: The pools a cluster file routes on this node (the services node's).
        self.pools_of = pools
        #: The delayed tasks and periodic schedules of the node's scheduler and
        #: beat, for ``overview`` (None: the node hosts none).
        self.delayed = delayed
        self.periodic = periodic

    def follow_cluster(self, config: ClusterConfig, node: NodeConfig, shift: Shift) -> list[str]:
        """Follow a reloaded cluster file: its [[task]] limits, set as
        ``control`` sets them.

        Raises:
            RestartNeeded: the file routes a pool this (services) node has no
                router for.
        """
        if self.pools_of is not None:
            missing = sorted(set(self.pools_of(config)) - self.state.tuning.routers.keys())
            if missing:
                raise RestartNeeded(f"pools {', '.join(missing)} have no router here yet")
        if self.limits_of is None:
            return []
        return self.state.tuning.follow(self.limits_of(config))

    async def on_start(self) -> None:
        """Runs in the task that starts it: reload the revokes its node keeps."""
        store = store_of(self._require_cell().outbox)
        for task_id, terminate in stored_revokes(store):
            self.state.revoke(task_id, terminate)
        self.state.tuning.load(store)

    @handler(roles=Role.OPERATOR)
    async def revoke(self, ids: list[str], terminate: bool = False) -> int:
        """Revoke ``ids`` on this node; answered once its store keeps them."""
        names = [str(task_id) for task_id in ids]
        for task_id in names:
            self.state.revoke(task_id, terminate)
        outbox = self._require_cell().outbox
        store = store_of(outbox)
        record_revokes(store, names, terminate, outbox.now())
        await store.sync()
        log("actorctl:task:revoked", ids=names, terminate=terminate)
        return len(names)

    @handler(roles=Role.OPERATOR)
    async def limit(self, task: str, key: str, value: Any = None) -> dict[str, Any]:
        """Set a limit of ``task`` on this node's workers and routers: its
        ``rate_limit``, ``global_rate_limit`` (``"10/s"``; None lifts it) or
        ``suspended`` (True holds back every start). Answered once kept."""
        task = self.aliases.get(str(task), str(task))
        if self.tasks and task not in self.tasks:
            near = difflib.get_close_matches(task, sorted(self.tasks), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise BadArguments(
                f"no task {task!r} here{hint}; the app's tasks: {', '.join(sorted(self.tasks))}"
            )
        try:
            report = self.state.tuning.set_limit(task, str(key), value)
        except ConfigError as exc:
            raise BadArguments(str(exc)) from None
        await self.state.tuning.sync()
        return report.wire()

    @handler(roles=Role.OPERATOR)
    async def budget(self, pool: str, by: int) -> dict[str, int]:
        """Grow (``by`` > 0) or shrink the budget of this node's workers of
        ``pool``, within the pool's bounds: each worker's budget now."""
        if not isinstance(by, int) or isinstance(by, bool) or by == 0:
            raise BadArguments(f"budget: by={by!r}: give a whole number other than 0")
        try:
            return self.state.tuning.move_budget(str(pool), by)
        except ConfigError as exc:
            raise BadArguments(str(exc)) from None

    @handler
    async def limits(self) -> dict[str, Any]:
        """This node's workers (budget, running, waiting, each task's limits),
        its routers' held tasks, and the limits set at run time."""
        return self.state.tuning.report().wire()

    @handler(roles=Role.OPERATOR)
    async def active(self) -> list[dict[str, Any]]:
        """``inspect active``: the tasks this node's workers run now (id, name,
        args, kwargs, worker, pool, received and started times)."""
        return [row.wire() for row in self.state.holdings.active()]

    @handler(roles=Role.OPERATOR)
    async def reserved(self) -> list[dict[str, Any]]:
        """``inspect reserved``: the tasks this node's workers took and have not
        started (waiting for a run slot or for a limit)."""
        return [row.wire() for row in self.state.holdings.reserved()]

    @handler
    async def stats(self) -> dict[str, Any]:
        """``inspect stats``: per worker its pool, budget, active and reserved
        tasks; per task how many runs ended here; the node's pid and uptime."""
        cell = self._require_cell()
        limits = self.state.tuning.report().workers
        node = node_outbox(cell.outbox).name
        return self.state.holdings.stats(node, cell.outbox.now(), limits).wire()

    @handler
    async def registered(self) -> dict[str, str]:
        """``inspect registered``: the tasks this node's workers run, by name,
        each with its pool."""
        return dict(sorted(self.state.holdings.registered.items()))

    @handler
    async def ping(self) -> dict[str, str]:
        """Celery's ``ping``: this node's task control answers."""
        return Pong().wire()

    @handler
    async def result(self, task_id: str) -> StoredResult | None:
        """The final ``[state, body, headers]`` of ``task_id`` that this node
        keeps, or None (not finished, finished elsewhere, or expired)."""
        return stored_result(store_of(self._require_cell().outbox), str(task_id))

    @handler(roles=Role.OPERATOR)
    async def recent(self, after: Any = None) -> dict[str, Any]:
        """The runs that ended on this node since the cursor ``after`` (the
        last answer's; None: every one it keeps, up to the last 1,000): name,
        arguments, state, result or error, run time, worker, retries. Operator
        only: it shows arguments and results."""
        return self.state.holdings.recent(after)

    @handler(roles=Role.OPERATOR)
    async def overview(self) -> dict[str, Any]:
        """What the web page shows of this node at once: its workers (pool,
        budget, active and reserved), the limits of its tasks (rate limits,
        suspended) and its routers', the tasks running and waiting here, and
        the delayed tasks and periodic schedules of its scheduler and beat (a
        list's first OVERVIEW_ROWS rows, with its whole count)."""
        cell = self._require_cell()
        holdings = self.state.holdings
        limits = self.state.tuning.report()
        stats = holdings.stats(node_outbox(cell.outbox).name, cell.outbox.now(), limits.workers)
        # The page's document: the records' wire forms, each worker's bounds beside its counts.
        wire = stats.wire()
        for worker, row in wire["workers"].items():
            found = limits.workers.get(worker)
            row["bounds"] = None if found is None else list(found.bounds)
        lists = {
            "active": [row.wire() for row in holdings.active()],
            "reserved": [row.wire() for row in holdings.reserved()],
        }
        if self.delayed is not None:
            lists["scheduled"] = self.delayed()
        if self.periodic is not None:
            lists["schedules"] = self.periodic()
        limits_wire = limits.wire()
        return {
            **wire,
            "limits": {w: v["tasks"] for w, v in limits_wire["workers"].items()},
            "routers": limits_wire["routers"],
            "overrides": limits_wire["overrides"],
            **{key: rows[:OVERVIEW_ROWS] for key, rows in lists.items()},
            "counts": {key: len(rows) for key, rows in lists.items()},
        }
