"""One host's share of a cluster that spans hosts: ``actorctl host up FILE --host NAME``.

``cluster up`` runs every node of the file on one host, under the Controller.
A cluster on several hosts has no one process that could supervise every
node, so each host supervises its own: the nodes whose ``host`` key names it,
each a :class:`Foreman` (an ``actorctl node run`` subprocess, restarted when
it dies, as under ``cluster up``) started with etcd's endpoints, so that it
registers in etcd once it listens and follows the cluster's membership
(``_member.py``). Which nodes run where is the file's; who is up now is etcd's.

No Controller runs across hosts: the scheduler and services roles are
granted by etcd (``_role_lease.py``), ``cluster status`` and ``control``
read etcd and ask each node (``_node_view.py``), and ``cluster down`` writes
the cluster's down key in etcd, which every ``host up`` watches
(:func:`watch_down`, :func:`ask_down`): each stops its nodes, which leave
etcd as they go. ``control shutdown FILE NODE`` writes a key under it for one
node (``down/NODE``, :func:`ask_stop_node`): the host that runs it stops it
for good (until its ``host up`` starts again), the others go on. ``cluster
reload`` does not reach a cluster started this way.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Final

import trio

from .._errors import ConfigError
from .._log import log
from ..cluster.config._config import ClusterConfig, NodeConfig
from ..cluster.config._etcd_config import EtcdSettings
from ..etcd._etcd import EtcdClient
from ..etcd._etcd_data import KeyValue, WatchEvent
from ..etcd._etcd_wire import EtcdCompacted, EtcdError
from ..etcd._membership import MembershipRefused
from ..etcd._node_record import NodeRecord, membership_refusal, nodes_prefix
from ..supervision import ChildSpec, Strategy, Supervisor
from ._controller import _notify_systemd
from ._foreman import Foreman, NodeRun, NodeState
from ._host_reload import HostReloads
from ._reloader import NodeRunner, Reloader

__all__ = [
    "ask_down",
    "ask_stop_node",
    "check_etcd",
    "down_key",
    "host_nodes",
    "run_host",
    "stop_key",
    "watch_down",
]

#: Seconds before a broken watch of the down key is set up again (doubling).
_WATCH_RETRY: Final = (0.1, 5.0)
#: Seconds a node a reload adds waits for the other hosts' nodes to know it.
ADMIT_TIMEOUT: Final = 30.0


def down_key(cluster: str) -> str:
    """The key ``cluster down`` writes to stop every host of ``cluster``."""
    return nodes_prefix(cluster).removesuffix("nodes/") + "down"


def stop_key(cluster: str, node: str) -> str:
    """The key ``control shutdown FILE NODE`` writes to stop ``node`` for good."""
    return f"{down_key(cluster)}/{node}"


def host_nodes(config: ClusterConfig, host: str) -> list[NodeConfig]:
    """The nodes of ``config`` that ``host`` runs.

    Raises:
        ConfigError: it runs none: naming the hosts the file has.
    """
    nodes = [node for node in config.nodes if node.runs_on == host]
    if nodes:
        return nodes
    if not config.hosts:
        raise ConfigError(
            f"{config.path}: host {host!r} runs no node: the file names no host (a cluster "
            f'on one host: `actorctl cluster up`); say host = "{host}" in the [[node]] '
            "tables this host runs"
        )
    raise ConfigError(
        f"{config.path}: host {host!r} runs no node: the file's hosts are "
        f"{', '.join(config.hosts)} (key host of each [[node]])"
    )


async def check_etcd(
    config: ClusterConfig, settings: EtcdSettings, nodes: Sequence[NodeConfig] = ()
) -> None:
    """Read the cluster's node records once, before anything starts: etcd
    answers, and each of ``nodes`` (this host's) may join: every registered
    node would accept it and it every registered node
    (``etcd/_node_record.membership_refusal``). Each node checks again as it
    registers (``etcd/_membership.py``).

    Raises:
        ConfigError: etcd could not be reached, naming each endpoint and why.
        MembershipRefused: a node of ``nodes`` may not join, and why.
    """
    try:
        snapshot = await settings.client().get_prefix(nodes_prefix(config.name))
    except EtcdError as exc:
        raise ConfigError(
            f"etcd does not answer at {', '.join(settings.endpoints)}: {exc}: start it, or "
            "give its endpoints ([etcd] endpoints in the file, or --etcd URL)"
        ) from None
    registered = _records(snapshot.kvs)
    for node in nodes:
        why = membership_refusal(_would_be(config, node), registered)
        if why is not None:
            raise MembershipRefused(
                f"node {node.name!r} cannot join cluster {config.name!r}: {why}"
            )


def _records(kvs: Iterable[KeyValue]) -> list[NodeRecord]:
    registered = []
    for kv in kvs:
        with contextlib.suppress(ConfigError):  # not a record: no member (its nodes log it)
            registered.append(NodeRecord.from_json(kv.value))
    return registered


def _would_be(config: ClusterConfig, node: NodeConfig) -> NodeRecord:
    """What ``node`` will say of itself in etcd (whom it knows and trusts)."""
    keyring = config.security(node.name).keyring
    return NodeRecord(
        name=node.name,
        address=config.url(node),
        key_id=keyring.identity.key_id if keyring is not None else "",
        knows=config.member_names,
        trusts=sorted(keyring.members) if keyring is not None else (),
    )


async def wait_admitted(
    client: EtcdClient, config: ClusterConfig, names: Sequence[str], timeout: float = ADMIT_TIMEOUT
) -> None:
    """Wait (at most ``timeout`` seconds) until every node registered in etcd
    would accept each of ``names`` (nodes a reload adds here): until the
    other hosts have followed the new file too, and their nodes' records say
    so. Past it, the nodes start anyway and say why they are refused."""
    prefix = nodes_prefix(config.name)
    wanted = [_would_be(config, config.node(name)) for name in names]
    with trio.move_on_after(timeout):
        while True:
            snapshot = await client.get_prefix(prefix)
            registered = _records(snapshot.kvs)
            if all(membership_refusal(record, registered) is None for record in wanted):
                return
            async with client.watch_prefix(prefix, snapshot.revision + 1) as watch:
                async for _ in watch:
                    break  # a record changed: look again


async def run_host(
    config: ClusterConfig,
    host: str,
    settings: EtcdSettings,
    on_change: Callable[[NodeState], None],
    *,
    stop: trio.Event,
    cold: trio.Event | None = None,
    task_status: trio.TaskStatus[dict[str, NodeState]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``host``'s nodes, each registered in etcd, until ``stop`` is set
    (by the caller, or here when ``cluster down`` asks through etcd) or this
    is cancelled; stop them in reverse order, each warm (as ``cluster up``
    does: within its ``shutdown_grace``), or cold once ``cold`` is set.

    Reports the node states once every node is ready (registered), and under
    systemd says READY=1 on NOTIFY_SOCKET (``Type=notify``).

    Raises:
        ConfigError: the host runs no node.
        SupervisorGaveUp: a node kept dying.
    """

    def make(config: ClusterConfig, node: NodeConfig) -> tuple[NodeRunner, NodeState]:
        state = NodeState(node.name)
        runner = Foreman(config, node, state, on_change, etcd=settings.endpoints, cold=cold)
        return runner, state

    states: dict[str, NodeState] = {}
    runners: dict[str, NodeRunner] = {}
    for node in host_nodes(config, host):
        runners[node.name], states[node.name] = make(config, node)
    supervisor = Supervisor(
        f"{config.name}-{host}",
        [ChildSpec(name, runner.run) for name, runner in runners.items()],
        strategy=Strategy.ONE_FOR_ONE,
        max_restarts=10,
        within=60.0,
    )
    client = settings.client()

    async def admit(config: ClusterConfig, names: Sequence[str]) -> None:
        with contextlib.suppress(EtcdError, ConfigError):  # the start says why
            await wait_admitted(client, config, names)

    reloader = Reloader(states, supervisor, runners, make, host=host, admit=admit)

    async def stop_node(name: str) -> None:
        log("actorctl:host:stop-node", host=host, node=name)
        try:
            await supervisor.terminate_child(name)
        except Exception as exc:  # said; the host runs on (`control shutdown` waits, then says so)
            log("actorctl:host:stop-node-failed", host=host, node=name, error=str(exc))
            return
        state = states[name]
        state.state, state.address = NodeRun.STOPPED, None
        state.reason = "stopped by control shutdown"
        on_change(state)

    async with trio.open_nursery() as nursery:

        def asked_to_stop(name: str) -> None:
            if name in states:  # one of this host's: the others' hosts stop theirs
                nursery.start_soon(stop_node, name)  # a down meanwhile is not held up

        # Watching before any node starts: a `cluster down` from then on stops them.
        await nursery.start(watch_down, client, config.name, host, stop, asked_to_stop)
        # Watching before any node starts too: a reload asked from then on is applied.
        await nursery.start(HostReloads(config, host, reloader, client).watch)
        await nursery.start(supervisor.run)
        task_status.started(states)
        _notify_systemd("READY=1")
        await stop.wait()
        nursery.cancel_scope.cancel(reason="host down")


async def watch_down(
    client: EtcdClient,
    cluster: str,
    host: str,
    stop: trio.Event,
    stop_node: Callable[[str], None] | None = None,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Set ``stop`` once ``cluster down`` asks, through etcd, after this
    started (a down asked before does not count: the host was started again
    since); call ``stop_node`` with the node each ``control shutdown FILE
    NODE`` names meanwhile. Reports started once it knows where to watch from
    (or etcd did not answer: it keeps trying). Raises nothing but cancellation."""
    key = down_key(cluster)
    since: int | None = None
    first, longest = _WATCH_RETRY
    delay = first
    try:
        since = (await client.get_prefix(key)).revision
    except EtcdError as exc:
        log("actorctl:host:down-unwatched", host=host, error=str(exc))
    task_status.started()
    while True:
        try:
            if since is None:
                since = (await client.get_prefix(key)).revision
            async with client.watch_prefix(key, since + 1) as watch:
                try:
                    async for event in watch:
                        if event.kind == "put" and _asked(key, event, host, stop_node):
                            stop.set()
                            return
                finally:
                    since = max(since, watch.next_revision - 1)
        except EtcdCompacted:
            held = await _read(client, key)
            missed = [kv for kv in held if since is not None and kv.mod_revision > since]
            for kv in sorted(missed, key=lambda kv: kv.mod_revision):
                if _asked(key, kv, host, stop_node):
                    stop.set()
                    return
            since = None
        except Exception as exc:  # any failure: said once a break, and watched again
            if delay == first:
                log("actorctl:host:down-unwatched", host=host, error=f"{type(exc).__name__}: {exc}")
            await trio.sleep(delay)
            delay = min(delay * 2, longest)
        else:
            delay = first


def _asked(
    down: str, written: KeyValue | WatchEvent, host: str, stop_node: Callable[[str], None] | None
) -> bool:
    """What a write under the down key asks: True for the whole cluster down
    (the key itself); for one node (``down/NODE``), ``stop_node`` is told, and False."""
    key = written.key
    if key == down:
        log("actorctl:host:down", host=host, asked=written.value.decode(errors="replace"))
        return True
    if key.startswith(f"{down}/") and stop_node is not None:
        stop_node(key[len(down) + 1 :])
    return False


async def _read(client: EtcdClient, prefix: str) -> list[KeyValue]:
    try:
        return list((await client.get_prefix(prefix)).kvs)
    except EtcdError:
        return []


async def ask_down(config: ClusterConfig, client: EtcdClient, timeout: float) -> list[str]:
    """``cluster down`` across hosts: write the down key every ``host up``
    watches, then wait (at most ``timeout`` seconds) until no node of the
    cluster is registered in etcd. Returns the nodes still registered then
    (a host whose ``host up`` is not running, or is cut off from etcd, keeps
    its nodes' records until their leases end).

    Raises:
        EtcdError: etcd could not be reached (naming each endpoint).
    """
    prefix = nodes_prefix(config.name)
    await client.put(down_key(config.name), json.dumps({"asked": time.time()}))
    left: list[str] = []
    with trio.move_on_after(timeout):
        while True:
            snapshot = await client.get_prefix(prefix)
            left = [kv.key[len(prefix) :] for kv in snapshot.kvs]
            if not left:
                return []
            async with client.watch_prefix(prefix, snapshot.revision + 1) as watch:
                async for event in watch:
                    if event.kind == "delete":
                        break
    return left


async def ask_stop_node(
    config: ClusterConfig, client: EtcdClient, node: str, timeout: float
) -> bool:
    """``control shutdown FILE NODE`` across hosts: write the down key naming
    ``node`` (the ``host up`` that runs it stops it for good), then wait (at
    most ``timeout`` seconds) until it is not registered in etcd. Returns
    whether it left.

    Raises:
        EtcdError: etcd could not be reached (naming each endpoint).
    """
    key = nodes_prefix(config.name) + node
    await client.put(stop_key(config.name, node), json.dumps({"asked": time.time()}))
    with trio.move_on_after(timeout):
        while True:
            snapshot = await client.get_prefix(key)
            if not any(kv.key == key for kv in snapshot.kvs):
                return True
            async with client.watch_prefix(key, snapshot.revision + 1) as watch:
                async for event in watch:
                    if event.kind == "delete" and event.key == key:
                        break
    return False
