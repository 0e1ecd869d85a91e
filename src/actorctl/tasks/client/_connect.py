"""Connecting a caller to a cluster: the client node and its client.

``open_client`` runs a small client-only node (it listens nowhere) for the
duration of a block: it connects to every node of the cluster that may send
the caller a result (the pools' nodes and the services node) and waits until
its reply link is up on each, so that every result can come back on a reply
link; then it sends through a :class:`TaskClient` that it makes the client of
the caller's context, and fetches results by id (``AsyncResult(task_id)``)
through a :class:`ResultLookup` it makes the lookup of that context.
:class:`Connection` does the same for plain code, with the client node in a
thread of its own.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Final, final

import trio

from ..._errors import ActorctlError
from ..._log import log
from ...actors import ActorRef, Address, Outbox
from ...cluster import ClusterConfig, load_cluster, open_node
from ...etcd import EtcdError, follow_holder, nodes_prefix
from .._cluster_app import cluster_app
from .._hosting import cluster_directory
from ..protocol._protocol import SERVICES_ROLE
from ._client import Directory, TaskClient, using_client
from ._lookup import ResultLookup
from ._result_registry import ResultRegistry
from ._results import using_lookup
from ._services_role import follow_services

__all__ = ["CLIENT_NAME", "Connection", "open_client"]

CLIENT_NAME: Final = "cli"
CONNECT_TIMEOUT: Final = 30.0
REACH_TIMEOUT: Final = 10.0

ClusterSpec = str | Path | ClusterConfig | Directory


def _where(
    cluster: ClusterSpec, name: str, node_options: dict[str, Any]
) -> tuple[Directory, dict[str, Any], ClusterConfig | None]:
    if isinstance(cluster, Directory):
        return cluster, dict(node_options), None
    config = cluster if isinstance(cluster, ClusterConfig) else load_cluster(cluster, cluster_app())
    return cluster_directory(config), {"security": config.security(name), **node_options}, config


async def _unregistered(config: ClusterConfig, timeout: float) -> list[str]:
    """Across hosts: the file's nodes that are not registered in etcd now
    (down, or their host lost or cut off), that a caller need not wait for
    (what they send it later comes through the services node's relay); none
    when etcd does not answer within ``timeout`` seconds (logged), or when no
    node is registered."""
    if config.etcd is None:
        return []
    prefix = nodes_prefix(config.name)
    try:
        with trio.fail_after(timeout):
            snapshot = await config.etcd.client().get_prefix(prefix)
    except (EtcdError, trio.TooSlowError) as exc:
        log("actorctl:client:membership-unknown", error=str(exc) or "no answer", timeout=timeout)
        return []
    registered = {kv.key[len(prefix) :] for kv in snapshot.kvs}
    if not registered:  # not `host up`'s cluster (`cluster up` ignores [etcd]), or none is up
        return []
    return [node.name for node in config.nodes if node.name not in registered]


async def _from_etcd(
    following: trio.Nursery, directory: Directory, config: ClusterConfig, timeout: float
) -> list[Address]:
    """Across hosts, at once and within ``timeout`` seconds: follow the
    services role from now on (in ``following``), and read which of the
    file's nodes are not registered (returned, as their ``_node``)."""
    skip: list[Address] = []

    async def unregistered() -> None:
        for away in await _unregistered(config, timeout):
            skip.append(Address.parse(f"{config.url(config.node(away))}/_node"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_follow_services, following, directory, config, timeout)
        nursery.start_soon(unregistered)
    return skip


async def _follow_services(
    nursery: trio.Nursery, directory: Directory, config: ClusterConfig, timeout: float
) -> None:
    """Across hosts, with several services nodes: follow the services role's
    holder from now on, and wait (at most ``timeout`` seconds) until etcd
    said who it is, so that the first task goes there."""
    if config.etcd is None or not directory.elected:
        return
    told = trio.Event()

    def tell(holder: str | None) -> None:
        follow_services(directory, holder)
        told.set()

    nursery.start_soon(follow_holder, config.etcd.client(), config.name, SERVICES_ROLE, tell)
    with trio.move_on_after(timeout):
        await told.wait()
    if not told.is_set():
        log(
            "actorctl:client:services-unknown",
            timeout=timeout,
            following=directory.holder,
            why="etcd did not say who holds the services role: tasks go to the file's "
            "first services node until it does",
        )


async def reach_nodes(
    outbox: Outbox, directory: Directory, timeout: float, skip: Collection[Address] = ()
) -> list[Address]:
    """Open this node's connection to every node of ``directory`` (but those of
    ``skip``: etcd says they are not registered) and wait until each answers
    (so that its reply link is up there): all at once, within ``timeout``
    seconds for all of them together, however many are down.

    Returns the nodes that did not answer in time (their connections keep
    trying), and logs them: a node that is down must not keep the caller out,
    but the caller's log must say which one it was.
    """
    away = {address.endpoint for address in skip}
    nodes = [address for address in directory.endpoints() if address.endpoint not in away]
    if skip:
        log("actorctl:client:not-registered", nodes=[str(address) for address in skip])
    reached: set[Address] = set()
    errors: dict[str, str] = {}

    async def reach(address: Address) -> None:
        try:
            await ActorRef(address, outbox, timeout=timeout).ask("statistics")
        except Exception as exc:  # any failure: the node is reported below, not raised
            errors[str(address)] = str(exc)
        else:
            reached.add(address)

    with trio.move_on_after(timeout):
        async with trio.open_nursery() as nursery:
            for address in nodes:
                nursery.start_soon(reach, address)
    unreached = [address for address in nodes if address not in reached]
    if unreached:
        log(
            "actorctl:client:unreached",
            nodes=[str(address) for address in unreached],
            timeout=timeout,
            errors=errors,
        )
    return unreached


@asynccontextmanager
async def open_client(
    cluster: ClusterSpec,
    *,
    name: str = CLIENT_NAME,
    reach_timeout: float = REACH_TIMEOUT,
    **node_options: Any,
) -> AsyncIterator[TaskClient]:
    """Connect for the duration of an ``async with`` block in trio code, and
    send tasks and events through the client it yields in this context.

    It waits ``reach_timeout`` seconds at most for the cluster's nodes to
    answer (all together); one that does not is logged, and the block runs.
    Across hosts, that includes asking etcd (at most half of it) which nodes
    are registered and who holds the services role.
    """
    directory, options, config = _where(cluster, name, node_options)
    options.setdefault("host", None)  # results come back on reply links
    async with open_node(name, **options) as node, trio.open_nursery() as following:
        started = trio.current_time()
        skip: list[Address] = []
        if config is not None and config.etcd is not None:
            skip = await _from_etcd(following, directory, config, reach_timeout / 2)
        left = max(reach_timeout - (trio.current_time() - started), 0.1)
        await reach_nodes(node.outbox, directory, left, skip)
        registry = ResultRegistry(node.outbox)
        client = TaskClient(node.outbox, directory, results=registry)
        with using_client(client), using_lookup(ResultLookup(client)):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client.pump)
                try:
                    yield client
                    with trio.move_on_after(CONNECT_TIMEOUT):
                        await client.wait_drained()  # what plain code handed over goes out
                finally:
                    nursery.cancel_scope.cancel()
                    following.cancel_scope.cancel()
                    registry.fail_all(f"the client node {name!r} disconnected first")


@final
class Connection:
    """``app.connect(...)``: a client node in a thread of its own, for plain
    code; its client is the client of the context that enters it."""

    def __init__(self, cluster: ClusterSpec, name: str, options: dict[str, Any]) -> None:
        self._cluster = cluster
        self._name = name
        self._options = options
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._client: TaskClient | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread: threading.Thread | None = None
        self._binding = contextlib.ExitStack()

    def __enter__(self) -> TaskClient:
        self._thread = threading.Thread(target=self._main, name="actorctl-client", daemon=True)
        self._thread.start()
        # Starting the node, then at most the reach timeout for the cluster's nodes.
        wait = CONNECT_TIMEOUT + float(self._options.get("reach_timeout", REACH_TIMEOUT))
        if not self._ready.wait(wait):
            raise ActorctlError(f"the client node did not start within {wait:g} s")
        if self._error is not None:
            raise self._error
        assert self._client is not None
        self._binding.enter_context(using_lookup(ResultLookup(self._client)))
        return self._binding.enter_context(using_client(self._client))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._binding.close()
        alive = self._thread is not None and self._thread.is_alive()
        if alive and self._stop is not None and self._token is not None:
            with contextlib.suppress(trio.RunFinishedError):  # it ended meanwhile
                trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        if self._thread is not None:
            self._thread.join(CONNECT_TIMEOUT)

    def _main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:  # reported to the thread that connects
            self._error = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        async with open_client(self._cluster, name=self._name, **self._options) as client:
            self._client = client
            self._stop = trio.Event()
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()
            await self._stop.wait()
