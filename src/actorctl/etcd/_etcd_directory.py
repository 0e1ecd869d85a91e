"""The nodes of a cluster that spans hosts, as etcd lists them: a cached view, watched.

Routing a message must not cost an etcd round trip (docs/design, "Beyond one
machine": "the directory is cached and watched"), so :class:`EtcdDirectory`
reads the cluster's node records (:mod:`._node_record`) once, then follows a
watch of their prefix from the revision after that read: :attr:`~EtcdDirectory.nodes`
and :meth:`~EtcdDirectory.pool_workers` answer from memory, and a node that
registers or whose lease ends (:mod:`._membership`) is seen as soon as etcd
says so.

What it does when etcd fails:

- **A broken watch** (etcd restarted, the connection lost, a member gone) is
  opened again from :attr:`Watch.next_revision <._etcd_watch.Watch>`: no
  change is missed, none is seen twice. Until it is back the directory keeps
  answering with the view it has: nodes keep serving with the directory they
  have (issue 18), and a node that died meanwhile is dropped once etcd is back
  and says so.
- **A compacted history** (the directory was away long enough for etcd to
  forget the revisions it missed): the prefix is read again, and the
  difference from the view it had is handed out as joins, leaves and updates,
  as if each had been watched.

Each change bumps :attr:`~EtcdDirectory.generation`: :meth:`~EtcdDirectory.wait_changed`
waits for the next one, and ``on_change`` (given to the constructor) is told
of each, in the directory's own task, in order.

Used by a node started with etcd (``actorctl host up``): :mod:`._member`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from types import MappingProxyType
from typing import Final, Literal, final

import attrs
import trio

from .._errors import ConfigError
from .._log import log
from ..actors import Address
from ._etcd import DEFAULT_WATCH_IDLE, EtcdClient
from ._etcd_data import WatchEvent
from ._etcd_wire import EtcdCompacted, EtcdError
from ._node_record import NodeRecord, nodes_prefix

__all__ = ["DirectoryStatistics", "EtcdDirectory", "NodeChange", "open_directory"]

#: The first wait before watching again after etcd failed (doubled each time).
FIRST_RETRY: Final = 0.1
#: The longest wait between two tries to reach etcd again, seconds.
DEFAULT_MAX_RETRY: Final = 2.0


@attrs.frozen
class NodeChange:
    """A node that joined, left or changed its record.

    Attributes:
        kind: ``join``, ``leave`` or ``update``.
        record: the node's new record (``join``, ``update``), or the last one
            known (``leave``).
        generation: the directory's generation once this change is in its view.
    """

    kind: Literal["join", "leave", "update"]
    record: NodeRecord
    generation: int

    @property
    def name(self) -> str:
        return self.record.name


@attrs.frozen
class DirectoryStatistics:
    """The state of a directory (:meth:`EtcdDirectory.statistics`).

    Attributes:
        generation: how many changes the view has had.
        revision: the etcd revision the view is as of.
        connected: whether its watch of etcd is open.
        nodes: how many nodes it lists.
        resyncs: how many times it had to read every record again.
    """

    generation: int
    revision: int
    connected: bool
    nodes: int
    resyncs: int


@final
class EtcdDirectory:
    """The nodes of ``cluster`` registered in etcd, cached and watched.

    Use :func:`open_directory`, or :meth:`start` then :meth:`follow` in a task.

    Args:
        client: the etcd client.
        cluster: the cluster's name.
        on_change: called with each change, in order, in the task that runs
            :meth:`follow` (and :meth:`start`); it must not block, and an
            exception it raises ends :meth:`follow` (and
            :func:`open_directory`'s block): a router that cannot take a
            change in fails where its supervisor sees it.
        idle: seconds the watch may hear nothing before it checks its connection.
        max_retry: the longest wait, seconds, between two tries to reach etcd again.
    """

    def __init__(
        self,
        client: EtcdClient,
        cluster: str,
        *,
        on_change: Callable[[NodeChange], None] | None = None,
        idle: float = DEFAULT_WATCH_IDLE,
        max_retry: float = DEFAULT_MAX_RETRY,
        aliases: Mapping[str, str] | None = None,
    ) -> None:
        if not (isinstance(max_retry, int | float) and max_retry > 0):
            raise ConfigError(
                f"etcd directory: max_retry must be positive seconds, got {max_retry!r}"
            )
        self.cluster = cluster
        self.prefix = nodes_prefix(cluster)
        self._client = client
        self._on_change = on_change
        self._idle = idle
        self._max_retry = float(max_retry)
        self._aliases = MappingProxyType(dict(aliases or {}))
        self._nodes: dict[str, NodeRecord] = {}
        self._view: Mapping[str, NodeRecord] = MappingProxyType(self._nodes)
        self._workers: dict[str, tuple[Address, ...]] = {}
        self._generation = 0
        self._changed = trio.Event()
        self._next = 0  # the revision to watch from; 0 until start() read the prefix
        self._connected = False
        self._resyncs = 0

    # -- what routers read (no etcd call) -----------------------------------------------

    @property
    def nodes(self) -> Mapping[str, NodeRecord]:
        """Node name to record, as of the last change seen: a snapshot that
        does not change under its reader (the next change makes a new one)."""
        return self._view

    @property
    def generation(self) -> int:
        """How many changes the view has had (it grows with each)."""
        return self._generation

    @property
    def connected(self) -> bool:
        """Whether the view follows etcd now (False: it is the last one known)."""
        return self._connected

    def pool_workers(self, pool: str) -> tuple[Address, ...]:
        """The addresses of ``pool``'s workers on every node listed and not
        leaving, ordered by node name (computed once per generation: a router
        may call it per message)."""
        found = self._workers.get(pool)
        if found is None:
            found = tuple(
                address
                for _, record in sorted(self._nodes.items())
                if not record.leaving
                for address in record.worker_addresses(pool)
            )
            self._workers[pool] = found
        return found

    def statistics(self) -> DirectoryStatistics:
        return DirectoryStatistics(
            self._generation, self._next - 1, self._connected, len(self._nodes), self._resyncs
        )

    async def wait_changed(self, generation: int) -> int:
        """Wait until the view's generation is past ``generation``; the new one."""
        while self._generation <= generation:
            await self._changed.wait()
        return self._generation

    # -- keeping the view -----------------------------------------------------------------

    async def start(self) -> None:
        """Read every record (within the client's timeout): the first view.

        Raises:
            EtcdError: etcd could not be reached, or refused.
        """
        await self._read_all()
        self._set_connected(True)

    async def follow(self) -> None:
        """Follow etcd's changes until cancelled: watch from the revision after
        the view's, watch again after a failure (waiting a little longer each
        time, up to ``max_retry``), read everything again after a compaction.
        Raises nothing but cancellation."""
        if not self._next:
            raise RuntimeError("EtcdDirectory.follow() before start(): call start() first")
        delay = FIRST_RETRY
        stale = False
        while True:
            try:
                if stale:
                    await self._read_all()
                    stale = False
                await self._watch()
            except EtcdCompacted as exc:
                log("actorctl:membership:compacted", prefix=self.prefix, error=str(exc))
                stale = True
            except EtcdError as exc:
                if self._connected:  # it was following etcd: try again soon
                    log("actorctl:membership:watch-broken", prefix=self.prefix, error=str(exc))
                    delay = FIRST_RETRY
                self._connected = False
                await trio.sleep(delay)
                delay = min(delay * 2, self._max_retry)

    async def _watch(self) -> None:
        watch = self._client.watch_prefix(self.prefix, self._next, idle=self._idle)
        try:
            async with watch:
                self._set_connected(True)
                async for event in watch:
                    self._apply(event)
                    self._next = watch.next_revision
        finally:
            # Progress reports move it too: what was seen need not be seen again.
            self._next = max(self._next, watch.next_revision)

    def _set_connected(self, connected: bool) -> None:
        if connected and not self._connected:
            log(
                "actorctl:membership:watching",
                prefix=self.prefix,
                revision=self._next,
                nodes=len(self._nodes),
            )
        self._connected = connected

    async def _read_all(self) -> None:
        """Read every record and hand out the difference from the view."""
        snapshot = await self._client.get_prefix(self.prefix)
        found: dict[str, NodeRecord] = {}
        for kv in snapshot.kvs:
            name, record = self._record(kv.key, kv.value)
            if record is not None:
                found[name] = record
        if self._next:
            self._resyncs += 1
            log("actorctl:membership:resynced", prefix=self.prefix, revision=snapshot.revision)
        for name in sorted(self._nodes.keys() - found.keys()):
            self._change(name, None)
        for name, record in sorted(found.items()):
            self._change(name, record)
        self._next = snapshot.revision + 1

    def _apply(self, event: WatchEvent) -> None:
        if event.kind == "delete":
            name = event.key[len(self.prefix) :]
            self._change(name, None)
            return
        name, record = self._record(event.key, event.value)
        self._change(name, record)

    def _record(self, key: str, value: bytes) -> tuple[str, NodeRecord | None]:
        """The node name of ``key`` and its record (None: not a valid record)."""
        name = key[len(self.prefix) :]
        try:
            record = NodeRecord.from_json(value, self._aliases)
            if record.name != name:
                raise ConfigError(f"it names node {record.name!r}")
        except ConfigError as exc:
            # Left out of the view (a node with a record nobody can use is no
            # node to route to), and said: whoever wrote it has a bug.
            log("actorctl:membership:bad-record", key=key, error=str(exc))
            return name, None
        return name, record

    def _change(self, name: str, record: NodeRecord | None) -> None:
        """Make ``name``'s record ``record`` (None: it left), if that is a change."""
        before = self._nodes.get(name)
        if record == before:
            return
        generation = self._generation + 1
        nodes = dict(self._nodes)  # a new dict: a reader's snapshot never changes
        if record is None:
            assert before is not None
            del nodes[name]
            change = NodeChange("leave", before, generation)
        else:
            nodes[name] = record
            change = NodeChange("join" if before is None else "update", record, generation)
        self._nodes = nodes
        self._view = MappingProxyType(nodes)
        self._workers = {}
        self._generation = generation
        log(f"actorctl:membership:{change.kind}", node=name, address=change.record.address)
        self._changed.set()
        self._changed = trio.Event()
        if self._on_change is not None:
            self._on_change(change)


@asynccontextmanager
async def open_directory(
    client: EtcdClient,
    cluster: str,
    *,
    on_change: Callable[[NodeChange], None] | None = None,
    idle: float = DEFAULT_WATCH_IDLE,
    max_retry: float = DEFAULT_MAX_RETRY,
    aliases: Mapping[str, str] | None = None,
) -> AsyncIterator[EtcdDirectory]:
    """A directory of ``cluster``'s nodes, followed for the duration of the block
    (entered once the first view is read); ``aliases`` reads the fields that
    an older release wrote under another name (``NodeRecord.from_json``).

    Raises:
        EtcdError: the first read failed: etcd could not be reached within the
            client's timeout, or refused.
    """
    directory = EtcdDirectory(
        client, cluster, on_change=on_change, idle=idle, max_retry=max_retry, aliases=aliases
    )
    await directory.start()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(directory.follow)
        yield directory
        nursery.cancel_scope.cancel(reason="the directory's block ended")
