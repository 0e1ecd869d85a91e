"""One host's share of a cluster that spans hosts: ``actorctl host up FILE --host NAME``.

``cluster up`` runs every node of the file on one host, under the Controller.
A cluster on several hosts has no one process that could supervise every
node, so each host supervises its own: the nodes whose ``host`` key names it,
each a :class:`Foreman` (an ``actorctl node run`` subprocess, restarted when
it dies, as under ``cluster up``) started with etcd's endpoints, so that it
registers in etcd once it listens and follows the cluster's membership
(``_member.py``). Which nodes run where is the file's; who is up now is etcd's.

No Controller runs across hosts: the scheduler role is granted by etcd
(``_role_lease.py``), ``cluster status`` reads etcd and asks each node
(``_node_view.py``). What it does not do yet (issue 18): ``cluster down`` and
``reload`` do not reach a cluster started this way, and the services node's
other singletons (routers, event hub, chord barrier) are not elected.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from .._errors import ConfigError
from ..supervision import ChildSpec, Strategy, Supervisor
from ._config import ClusterConfig, NodeConfig
from ._controller import _notify_systemd
from ._etcd_config import EtcdSettings
from ._etcd_wire import EtcdError
from ._foreman import Foreman, NodeState
from ._node_record import nodes_prefix

__all__ = ["check_etcd", "host_nodes", "run_host"]


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


async def check_etcd(config: ClusterConfig, settings: EtcdSettings) -> None:
    """Read the cluster's node records once: etcd answers (before anything starts).

    Raises:
        ConfigError: etcd could not be reached, naming each endpoint and why.
    """
    try:
        await settings.client().get_prefix(nodes_prefix(config.name))
    except EtcdError as exc:
        raise ConfigError(
            f"etcd does not answer at {', '.join(settings.endpoints)}: {exc}: start it, or "
            "give its endpoints ([etcd] endpoints in the file, or --etcd URL)"
        ) from None


async def run_host(
    config: ClusterConfig,
    host: str,
    settings: EtcdSettings,
    on_change: Callable[[NodeState], None],
    *,
    stop: trio.Event,
    task_status: trio.TaskStatus[dict[str, NodeState]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``host``'s nodes, each registered in etcd, until ``stop`` is set (or
    cancelled); stop them in reverse order.

    Reports the node states once every node is ready (registered), and under
    systemd says READY=1 on NOTIFY_SOCKET (``Type=notify``).

    Raises:
        ConfigError: the host runs no node.
        SupervisorGaveUp: a node kept dying.
    """
    states: dict[str, NodeState] = {}
    children = []
    for node in host_nodes(config, host):
        states[node.name] = NodeState(node.name)
        foreman = Foreman(config, node, states[node.name], on_change, etcd=settings.endpoints)
        children.append(ChildSpec(node.name, foreman.run))
    supervisor = Supervisor(
        f"{config.name}-{host}",
        children,
        strategy=Strategy.ONE_FOR_ONE,
        max_restarts=10,
        within=60.0,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        task_status.started(states)
        _notify_systemd("READY=1")
        await stop.wait()
        nursery.cancel_scope.cancel(reason="host down")
