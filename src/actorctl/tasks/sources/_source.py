"""Data sources: an actor that reads from outside and sends each item on.

A source (docs/sources.md) is a :class:`Source` (``read(after, limit)``: the
items after a position) read by a :class:`SourceActor` on its node (the
services node, or the one its table names), which sends each item, at least
once, as a task to its pool (the item is the task's one argument) or as a
command to an actor:

- **Checkpoint.** The position after an item is a row of the node's store
  (table ``sources``) written *in the same commit* as the item's backlog entry,
  as the beat writes its last firing; the item's task id and message id are
  made from the source's name and that position (:func:`item_id`). A SIGKILL
  keeps both (the backlog sends the item again on restart, under the same id:
  the router takes it once) or neither (the source reads it again on restart,
  and sends it under the same id). It resumes from the checkpoint.
- **Backpressure.** It keeps at most ``window`` items in flight: a task from
  its send until its final state comes back to the source (it is the task's
  reply-to), a message to an actor until that actor accepted it. Each send
  awaits its commit. So a slow pool slows the source: its read position lags
  what there is to read (``statistics``). While the window is full and no
  final state has come for ``STATE_CHECK`` seconds, it asks the nodes that keep
  results (``_lookup.py``) for those of its tasks in flight that long: a task
  whose final state went to an earlier incarnation of the source (a source on
  a memory store restarts from the beginning, and what it sends again is taken
  as a duplicate, not run again) counts as finished once a node has its result.
- **Failures.** A read that raises is logged and tried again with backoff; a
  source that fails ``FAILURES`` times in a row raises, and its supervisor
  restarts it (a fresh reader, from the checkpoint) with the usual intensity.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, ClassVar, Final, Protocol, final, runtime_checkable

import attrs
import trio

from ..._errors import ActorctlError, ConfigError
from ..._log import log
from ...actors import Actor, handler, to_wire
from ...cluster import NodeOutbox
from ...mailbox import ACCEPTED, KIND_COMMAND, KIND_DOCUMENT, Envelope, Outcome
from ...store import Store
from ..client._client import Directory, TaskClient, send_task
from ..client._lookup import ResultLookup
from ..protocol._protocol import H_STATE, H_TASK_ID, READY_STATES
from ..protocol._state import store_of

__all__ = [
    "FAILURES",
    "SOURCES_TABLE",
    "STATE_CHECK",
    "Source",
    "SourceActor",
    "SourceError",
    "SourceSpec",
]

#: The store table of the sources: source name -> {"position": JSON text}.
SOURCES_TABLE: Final = "sources"
#: Failed reads in a row after which a source raises (its supervisor restarts it).
FAILURES: Final = 5
#: Seconds a full window waits for a final state before it asks for the results
#: of the tasks in flight that long (see the module docstring).
STATE_CHECK: Final = 2.0
#: Result lookups under way at once.
_LOOKUPS: Final = 20
_BACKOFF_FIRST: Final = 0.1
_BACKOFF_MAX: Final = 10.0


class SourceError(ActorctlError):
    """A source's reads kept failing: its supervisor restarts it."""


@runtime_checkable
class Source(Protocol):
    """What a user implements to feed a cluster from outside (docs/sources.md).

    A position is any JSON value (a number, a string, a list of them: lists
    come back as lists), chosen by the source: the one after an item is where
    the next read starts. The same position must always stand for the same
    item: it is the item's id (with the source's name).
    """

    async def read(self, after: Any, limit: int) -> list[tuple[Any, Any]]:
        """The next items after ``after`` (None: from the start), at most
        ``limit``, in order, each with the position just past it; ``[]`` when
        there is nothing new (the source waits its poll interval). An item is
        any JSON value (the task's argument). It may raise: the read is tried
        again with backoff."""
        ...


@final
@attrs.frozen
class SourceSpec:
    """A declared source: where it reads, what it feeds, how fast.

    Attributes:
        name: unique in the cluster; with a position, the id of each item.
        make: makes a fresh reader (each start of its actor calls it).
        kind: ``directory``, ``http``, ``sqlite`` or ``module:Class`` (shown).
        task, pool: the task each item is sent as, and its pool; or
        actor, handler: the actor (a name the directory resolves, or an
            address) and the handler each item is sent to.
        poll: seconds it waits when a read found nothing new.
        batch: items read at most at once; window: items in flight at most.
        node: the node that reads it (None: the services node).
    """

    name: str
    make: Callable[[], Source] = attrs.field(eq=False)
    kind: str
    task: str | None = None
    pool: str | None = None
    actor: str | None = None
    handler: str = "take"
    poll: float = 1.0
    batch: int = 100
    window: int = 100
    node: str | None = None


def encode_position(position: Any) -> str:
    """A position as compact JSON text (what the checkpoint and ids hold).

    Raises:
        ConfigError: it is not a JSON value.
    """
    try:
        return json.dumps(position, separators=(",", ":"), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"a source position must be a JSON value, got {position!r}: {exc}"
        ) from None


def item_id(name: str, position: Any) -> str:
    """The task id and message id of the item of source ``name`` whose
    position (just past it) is ``position``: the same however often it is made."""
    return f"source:{name}@{encode_position(position)}"


class SourceActor(Actor):
    """``source.NAME``: reads one source and sends its items (module docstring).

    Args:
        spec: the source.
        directory: where its pool (or actor) is.
    """

    mailbox_capacity: ClassVar[int] = 1000
    concurrency: ClassVar[int] = 8
    takes_documents: ClassVar[bool] = True  # its tasks' final states come back here
    #: Seconds an item counts in flight at most (a final state that never comes).
    in_flight_timeout: ClassVar[float] = 600.0

    def __init__(self, spec: SourceSpec, directory: Directory) -> None:
        self.spec = spec
        self.directory = directory
        self.position: Any = None
        self.sent = 0
        self.done = 0
        self.failures = 0
        self.in_flight: dict[str, float] = {}
        self._room = trio.Event()
        self._client: TaskClient | None = None
        self._store: Store | None = None

    # -- lifecycle ----------------------------------------------------------------------

    async def on_start(self) -> None:
        """Load its checkpoint, make a fresh reader and start reading (its own task)."""
        outbox = self._require_cell().outbox
        self._client = TaskClient(outbox, self.directory)
        store = self._store = store_of(outbox)
        row = store.get(SOURCES_TABLE, self.spec.name)
        self.position = json.loads(json.loads(row)["position"]) if row is not None else None
        self.in_flight.clear()
        self.failures = 0
        reader = self.spec.make()
        log("actorctl:source:started", source=self.spec.name, position=self.position)
        if not store.durable and row is None:
            log(
                "actorctl:source:from-the-start",
                source=self.spec.name,
                warning="its node keeps no checkpoint (durable = false): after a restart "
                "it reads from the beginning again; what it had sent is taken once by its "
                "receivers' dedup window while that remembers it, and the results the "
                "nodes keep free its window",
            )
        self.start_soon(self._run, reader)

    @handler
    async def statistics(self) -> dict[str, Any]:
        """Its read position, items sent and finished, in flight, failed reads."""
        return {
            "name": self.spec.name,
            "kind": self.spec.kind,
            "position": self.position,
            "sent": self.sent,
            "done": self.done,
            "in_flight": len(self.in_flight),
            "failures": self.failures,
        }

    async def handle_unmatched(
        self, envelope: Envelope
    ) -> tuple[Outcome, tuple[str, Any] | None] | None:
        """A state document of one of its tasks: a final one frees its slot."""
        if envelope.kind != KIND_DOCUMENT:
            return None
        if envelope.headers.get(H_STATE) in READY_STATES:
            self._finished(str(envelope.headers.get(H_TASK_ID) or envelope.correlation_id))
        return ACCEPTED, None

    # -- reading ------------------------------------------------------------------------

    async def _run(self, reader: Source) -> None:
        spec = self.spec
        while True:
            await self._wait_room()
            limit = min(spec.batch, spec.window - len(self.in_flight))
            try:
                items = await reader.read(self.position, limit)
                checked = _checked(items, limit)
            except Exception as exc:
                await self._failed(exc)
                continue
            self.failures = 0
            if not checked:
                await trio.sleep(spec.poll)
                continue
            for position, item in checked:
                await self._send(position, item)

    async def _failed(self, exc: Exception) -> None:
        self.failures += 1
        delay = min(_BACKOFF_FIRST * 2 ** (self.failures - 1), _BACKOFF_MAX)
        log(
            "actorctl:source:read-failed",
            source=self.spec.name,
            position=self.position,
            error=f"{type(exc).__name__}: {exc}",
            failures=self.failures,
            retry_in=delay,
        )
        if self.failures >= FAILURES:
            raise SourceError(
                f"source {self.spec.name!r}: {self.failures} reads in a row failed, the last "
                f"with {type(exc).__name__}: {exc}; its supervisor restarts it from its "
                "checkpoint (fix what it reads, or its settings)"
            ) from exc
        await trio.sleep(delay)

    async def _wait_room(self) -> None:
        """Wait until fewer than ``window`` items are in flight: asking for the
        results of those in flight for ``STATE_CHECK`` s when none comes back,
        and forgetting those in flight for longer than ``in_flight_timeout``."""
        check = STATE_CHECK
        while len(self.in_flight) >= self.spec.window:
            self._room = trio.Event()
            oldest = min(self.in_flight.values())
            deadline = oldest + self.in_flight_timeout
            with trio.move_on_at(min(deadline, trio.current_time() + check)):
                await self._room.wait()
            if not self._room.is_set() and trio.current_time() < deadline:
                # Nothing came back: maybe their states went to someone else. A
                # slow pool is asked less and less often (at most each minute).
                check = STATE_CHECK if await self._fetch_states() else min(check * 2, 60.0)
            now = trio.current_time()
            stale = [i for i, t in self.in_flight.items() if t + self.in_flight_timeout <= now]
            for key in stale:
                log("actorctl:source:no-final-state", source=self.spec.name, item=key)
                self._finished(key)

    async def _fetch_states(self) -> bool:
        """Count as finished the tasks in flight for ``STATE_CHECK`` s or more
        whose final result a node keeps (their state went to someone else);
        whether there were any."""
        if self.spec.task is None or self._client is None:
            return False  # an actor's item is finished once the actor accepts it
        lookup = ResultLookup(self._client)
        since = trio.current_time() - STATE_CHECK
        keys = [key for key, sent in self.in_flight.items() if sent <= since]
        limiter = trio.CapacityLimiter(_LOOKUPS)
        found: list[str] = []

        async def fetch(key: str) -> None:
            async with limiter:
                if await lookup.fetch(key) is not None:
                    found.append(key)

        async with trio.open_nursery() as nursery:
            for key in keys:
                nursery.start_soon(fetch, key)
        if found:
            log("actorctl:source:states-fetched", source=self.spec.name, items=len(found))
        for key in found:
            self._finished(key)
        return bool(found)

    def _finished(self, key: str) -> None:
        if self.in_flight.pop(key, None) is not None:
            self.done += 1
            self._room.set()

    async def _send(self, position: Any, item: Any) -> None:
        """Send one item: the checkpoint row and its backlog entry in one commit."""
        spec = self.spec
        key = item_id(spec.name, position)
        checkpoint = json.dumps({"position": encode_position(position)}).encode()
        self.in_flight[key] = trio.current_time()
        # The row's put is queued now and the durable send puts the message in
        # the backlog table before it first awaits (the commit): with no await
        # in between, both land in the same SQLite transaction (cluster/_store).
        store, client = self._store, self._client
        assert store is not None
        assert client is not None
        store.put(SOURCES_TABLE, spec.name, checkpoint)
        self.position = position
        if spec.task is not None:
            assert spec.pool is not None
            await send_task(
                client, task=spec.task, pool=spec.pool, args=[item], kwargs={}, task_id=key,
                reply_to=str(self._require_cell().address), durable=True, message_id=key,
            )  # fmt: skip
        else:
            await self._tell(client, key, item)
        self.sent += 1

    async def _tell(self, client: TaskClient, key: str, item: Any) -> None:
        """An item for an actor: through the backlog, in flight until accepted."""
        spec = self.spec
        assert spec.actor is not None
        target = self.directory.resolve(spec.actor)
        envelope = Envelope(
            message_id=key,
            to=str(target),
            subject=spec.handler,
            body=[to_wire([item]), {}],
            kind=KIND_COMMAND,
            creation_time=client.outbox.now(),
        )
        outbox = client.outbox
        # A node's outbox tells when the actor took it (what a router uses too).
        if isinstance(outbox, NodeOutbox):
            await outbox.hand_over(target, envelope, on_done=lambda _: self._finished(key))
        else:  # no node's outbox: nothing tells it when the actor took it
            await outbox.send(target, envelope, presettled=False, confirm=False, durable=True)
            self._finished(key)


def _checked(items: object, limit: int) -> list[tuple[Any, Any]]:
    """What a reader returned, checked: a list of (position, item) pairs.

    Raises:
        SourceError: naming what it returned instead.
    """
    if not isinstance(items, list) or len(items) > max(limit, 0):
        raise SourceError(f"read() must return a list of at most {limit} pairs, got {items!r}")
    for pair in items:
        if not (isinstance(pair, tuple | list) and len(pair) == 2):
            raise SourceError(f"read() must return (position, item) pairs, got {pair!r}")
        encode_position(pair[0])
    return [(p, i) for p, i in items]
