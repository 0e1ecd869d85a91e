"""A node's health checks as cluster.toml declares them (``[[node.health]]``),
and the ``_health`` monitor that runs them on the node.

::

    [[node.health]]
    name = "store"
    check = "disk"              # the node's durable store directory
    interval = 30
    breakers = ["downstream"]   # the breakers its results feed

    [[node.health]]
    name = "tls"
    check = "certificate"       # the node's own certificate; Insecure within `days`
    days = 7

    [[node.health]]
    name = "w2"
    check = "peer"
    peer = "worker-2"           # a node of the cluster (or host = ..., port = ...)

    [[node.health]]
    name = "payments-api"
    check = "myapp.health:payments"   # a function or async function of yours
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..._errors import ConfigError
from ...supervision import (
    HEALTH_AGENT,
    Breaker,
    HealthCheck,
    HealthMonitor,
    certificate_expiry,
    disk_writable,
    import_target,
    peer_reachable,
)

if TYPE_CHECKING:
    from ._config import ClusterConfig, NodeConfig

__all__ = ["breakers_of", "node_checks", "with_health"]


def node_checks(cluster: ClusterConfig | None, node: NodeConfig) -> list[HealthCheck]:
    """The checks ``node``'s ``[[node.health]]`` tables declare.

    Raises:
        ConfigError: a peer that is not a node of the cluster, a certificate
            check in an insecure cluster without a path, a function that
            cannot be imported.
    """
    checks = []
    for item in node.health:
        options: dict[str, Any] = {key: item[key] for key in ("interval", "timeout") if key in item}
        checks.append(
            HealthCheck(
                name=item["name"],
                fn=_check_fn(cluster, node, item),
                breakers=tuple(item.get("breakers", ())),
                **options,
            )
        )
    return checks


def _check_fn(cluster: ClusterConfig | None, node: NodeConfig, item: Mapping[str, Any]) -> Any:
    check = item["check"]
    where = f"node {node.name!r}, health check {item['name']!r}"
    if check == "peer":
        if "peer" in item:
            names = [n.name for n in cluster.nodes] if cluster is not None else []
            if item["peer"] not in names:
                raise ConfigError(f"{where}: peer {item['peer']!r} is not a node ({names})")
            assert cluster is not None
            peer = cluster.node(item["peer"])
            return peer_reachable(peer.host, peer.port)
        return peer_reachable(item["host"], item["port"])
    if check == "disk":
        if "path" in item or cluster is None:
            return disk_writable(item.get("path", "."))
        return disk_writable(cluster.root / "data" / node.name)
    if check == "certificate":
        path = item.get("path")
        if path is None:
            if cluster is None or cluster.insecure:
                raise ConfigError(f"{where}: an insecure cluster has no certificate: set path")
            path = cluster.certs / f"{node.name}.pem"
        return certificate_expiry(path, days=float(item.get("days", 7.0)))
    fn = import_target(check)
    if not callable(fn):
        raise ConfigError(f"{where}: {check} is not a function")
    return fn


def breakers_of(actors: Mapping[str, Any]) -> list[Breaker]:
    """The breakers that ``actors`` expose: a ``breakers`` mapping (a task
    worker's) or a ``breaker`` attribute (an actor's own)."""
    found: list[Breaker] = []
    for actor in actors.values():
        many = getattr(actor, "breakers", None)
        if isinstance(many, Mapping):
            found.extend(b for b in many.values() if isinstance(b, Breaker))
        one = getattr(actor, "breaker", None)
        if isinstance(one, Breaker):
            found.append(one)
    return found


def with_health(
    actors: dict[str, Any], node: NodeConfig | None, cluster: ClusterConfig | None
) -> dict[str, Any]:
    """``actors``, with the ``_health`` monitor when the node declares checks
    (added to the monitor an actors factory made, if it made one)."""
    checks = node_checks(cluster, node) if node is not None else []
    if not checks:
        return actors
    assert node is not None
    monitor = actors.get(HEALTH_AGENT)
    if isinstance(monitor, HealthMonitor):
        mine = {c.name for c in monitor.checks}
        clash = sorted(mine & {c.name for c in checks})
        if clash:
            raise ConfigError(f"node {node.name!r}: health checks {clash} are declared twice")
        monitor.checks.extend(checks)
        return actors
    actors[HEALTH_AGENT] = HealthMonitor(node.name, checks, lambda: breakers_of(actors))
    return actors
