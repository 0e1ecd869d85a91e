"""What ``actorctl inspect`` asks of a node: the tasks its workers hold.

A worker holds more tasks than it runs (``_worker.py``): a task it took is
*reserved* (Celery's word) until a run slot lets it start, then *active* until
its run ends. Each worker records both in the ``Held`` table of its node's
``WorkerState``, which the node's ``_tasks`` actor reads to answer ``active``,
``reserved``, ``stats`` and ``registered`` (docs/protocol.md §14.8).

It also keeps a window of the last RECENT runs that ended here (``Ended``, a tuple:
name, arguments, state, result or error, run time, worker, retries), for the
Controller's web page (``recent``): the worker appends one record when a run's
outcome is known, and the record is turned into text only when asked.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections import Counter, deque
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from ..._log import Traced
from ...actors import CounterSchema
from ..limits._limits import TaskFailure
from ..protocol._state import node_outbox
from ._inspect_answers import HeldRow, NodeStats, WorkerStats

if TYPE_CHECKING:
    from ...actors import Outbox
    from ...mailbox import Envelope
    from ..limits._report import WorkerLimits

__all__ = [
    "RECENT",
    "TASK_COUNTERS",
    "TEXT_LIMIT",
    "Ended",
    "HeldTask",
    "Holdings",
    "ended_answer",
    "error_text",
]

#: How a node's /metrics shows a worker's counts per task (NamedCounters):
#: ``actorctl_task_messages_*`` by task, and its run times. An event
#: ``rejected:COND`` or ``dead_lettered:REASON`` carries its label after the colon.
TASK_COUNTERS: Final = CounterSchema(
    prefix="actorctl_task",
    label="task",
    events=MappingProxyType(
        {
            "received": ("received", "Task messages a worker took"),
            "success": ("succeeded", "Task runs that succeeded"),
            "failure": (
                "failed",
                "Task runs that failed for good (no retry left, or none allowed)",
            ),
            "retry": ("retried", "Task runs that failed and were sent again (a retry)"),
            "revoked": ("revoked", "Task messages not run: revoked or expired"),
            "rejected": ("rejected", "Task messages refused (unknown task, bad arguments, ...)"),
            "dead_lettered": (
                "dead_lettered",
                "Task messages given up on and kept as dead letters",
            ),
        }
    ),
    extra_labels=MappingProxyType({"rejected": "condition", "dead_lettered": "reason"}),
    runs_help="How long task runs took",
)

#: Characters of a task's arguments an answer shows, at most (as Celery's
#: ``argsrepr`` is cut): an inspect answer stays small whatever a task takes.
TEXT_LIMIT: Final = 200
#: Runs that ended on a node that it remembers for ``recent``, at most.
RECENT: Final = 1000
#: Rows one ``recent`` answer carries at most (the next ask gets the rest).
RECENT_ANSWER: Final = 250


@final
@attrs.define
class HeldTask:
    """One task a worker holds: reserved while ``started`` is None."""

    task_id: str
    name: str
    args: list[Any]
    kwargs: dict[str, Any]
    worker: str
    pool: str
    received: float  # the node's clock (seconds since the epoch)
    started: float | None = None

    def answer(self, eta: float | None = None) -> HeldRow:
        """As an inspect answer shows it (the arguments as short text); ``eta``:
        when a delayed one is due."""
        return HeldRow(
            self.task_id,
            self.name,
            _short(self.args),
            _short(self.kwargs),
            self.worker,
            self.pool,
            self.received,
            self.started,
            eta,
        )


#: One run that ended (``Holdings.end``): seq, the task as held, state, its
#: result (SUCCESS) or error text, seconds it ran (None: it did not run),
#: retries, when it ended (the node's clock). A plain tuple: it is made on
#: every run, and turned into an answer only when ``recent`` is asked.
Ended = tuple[int, HeldTask, str, Any, float | None, int, float]


def ended_answer(ended: Ended, node: str) -> dict[str, Any]:
    """A run that ended, as ``recent`` shows it: arguments, result and error
    as short text."""
    seq, held, state, value, runtime, retries, finished = ended
    ok = state == "SUCCESS"
    return {
        "seq": seq,
        "id": held.task_id,
        "name": held.name,
        "args": _text(held.args),
        "kwargs": _text(held.kwargs),
        "state": state,
        "result": _text(value) if ok else None,
        "error": None if ok else value,
        "runtime": runtime,
        "worker": held.worker,
        "pool": held.pool,
        "node": node,
        "retries": retries,
        "received": held.received,
        "started": held.started,
        "finished": finished,
    }


def error_text(exc: BaseException) -> str:
    """``Type: message`` of a failed run, cut to TEXT_LIMIT characters."""
    if isinstance(exc, TaskFailure):
        return _cut(f"{exc.type_name}: {exc.message}")
    return _cut(f"{type(exc).__name__}: {exc}")


@final
class Holdings:
    """The tasks a node's workers hold, what they ran, and which they define.

    Keyed by message id (a task id may be held twice: a map's calls, or a
    copy sent again while the first waits)."""

    def __init__(self, clock_start: float | None = None) -> None:
        self.held: dict[str, HeldTask] = {}
        self.processed: Counter[str] = Counter()  # task name -> runs ended here
        self.registered: dict[str, str] = {}  # task name -> pool, of the pools run here
        self.pools: dict[str, str] = {}  # worker name -> pool
        self.since = clock_start
        self.node = ""  # the node's name, once a worker started
        #: The last RECENT runs that ended here, oldest first (``recent``).
        self.ended: deque[Ended] = deque(maxlen=RECENT)
        self._seq = itertools.count(1)
        #: This incarnation of the node: a ``recent`` cursor of another starts over.
        self.run = uuid.uuid4().hex[:12]

    def add_worker(self, worker: str, pool: str, tasks: dict[str, str], outbox: Outbox) -> None:
        """A worker of ``pool`` started here (on ``outbox``'s node), running
        ``tasks`` (name -> pool)."""
        self.pools[worker] = pool
        self.registered.update(tasks)
        self.node = node_outbox(outbox).name
        if self.since is None:
            self.since = outbox.now()

    def action(self, envelope: Envelope, worker: str, task_id: str, retries: int) -> Traced:
        """The eliot action of one task message at ``worker``: what the run logs
        and sends (its result, the next step of its chain) is part of it, and a
        message that continues a trace (its ``trace`` header) nests it there:
        ``actorctl logs --task`` shows every node a task touched as one tree."""
        return Traced(
            "actorctl:task",
            {
                "task": envelope.subject,
                "task_id": task_id,
                "node": self.node,
                "worker": worker,
                "retries": retries,
            },
        )

    def leave(self, message_id: str) -> None:
        """The task held as ``message_id`` is done here (a run counts as processed).

        Its worker holds it (``held[message_id]``, reserved) from before it waits
        at the gate for a run slot, and marks it active (``started``) when its
        run begins: both inline, per task (``_worker.py``)."""
        held = self.held.pop(message_id, None)
        if held is not None and held.started is not None:
            self.processed[held.name] += 1

    def end(
        self,
        held: HeldTask,
        state: str,
        value: Any,
        runtime: float | None,
        retries: int,
        now: float,
    ) -> None:
        """A run of ``held`` ended in ``state``, with its result or error
        (``value``: an exception is kept as its text): one record appended to
        the bounded window, nothing else."""
        # An exception as its text (the traceback would keep its frames); a
        # plain value (most: an integer, text, null) is told without a call.
        plain = type(value) is int or type(value) is str or value is None
        if not plain and isinstance(value, BaseException):
            value = error_text(value)
        self.ended.append((next(self._seq), held, state, value, runtime, retries, now))

    def recent(self, after: Any = None) -> dict[str, Any]:
        """The runs that ended here after ``after`` (the ``cursor`` of the last
        answer; any other: from the oldest kept), oldest first, at most
        RECENT_ANSWER of them, and the cursor to ask from next."""
        since = 0
        if isinstance(after, list) and len(after) == 2 and after[0] == self.run:
            since = int(after[1])
        ended = self.ended
        rows = []
        if ended and since < ended[-1][0]:
            skip = max(0, since - ended[0][0] + 1)  # (their seqs follow one another)
            kept = itertools.islice(ended, skip, skip + RECENT_ANSWER)
            rows = [ended_answer(one, self.node) for one in kept]
        last = rows[-1]["seq"] if rows else since
        return {"cursor": [self.run, last], "rows": rows}

    def active(self) -> list[HeldRow]:
        """The tasks running now, oldest first."""
        running = [h for h in self.held.values() if h.started is not None]
        return [h.answer() for h in sorted(running, key=lambda h: h.started or 0.0)]

    def reserved(self) -> list[HeldRow]:
        """The tasks taken but not started, in the order they came."""
        waiting = [h for h in self.held.values() if h.started is None]
        return [h.answer() for h in sorted(waiting, key=lambda h: h.received)]

    def stats(self, node: str, now: float, limits: Mapping[str, WorkerLimits]) -> NodeStats:
        """Counts per worker and per task, as Celery's ``inspect stats`` gives
        them; each worker's budget from its ``limits``."""
        workers: dict[str, WorkerStats] = {}
        for worker, pool in sorted(self.pools.items()):
            mine = [h for h in self.held.values() if h.worker == worker]
            found = limits.get(worker)
            workers[worker] = WorkerStats(
                pool,
                sum(h.started is not None for h in mine),
                sum(h.started is None for h in mine),
                None if found is None else found.budget,
            )
        return NodeStats(
            node,
            os.getpid(),
            round(now - self.since, 3) if self.since is not None else 0.0,
            workers,
            dict(sorted(self.processed.items())),
        )


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_LIMIT else text[: TEXT_LIMIT - 3] + "..."


def _text(value: Any) -> str:
    """``value``'s repr, cut to TEXT_LIMIT characters."""
    try:
        return _cut(repr(value))
    except Exception as exc:  # a result's own __repr__ that fails is shown as such
        return f"(repr failed: {type(exc).__name__})"


def _short(value: Any) -> Any:
    """``value`` as it came, or its text cut to TEXT_LIMIT characters if longer."""
    text = repr(value)
    if len(text) <= TEXT_LIMIT:
        return value
    return text[: TEXT_LIMIT - 3] + "..."
