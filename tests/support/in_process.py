"""Nodes of a cluster file run in the test's own process, as ``node run`` would.

``in_process`` reads a cluster.toml (making its development secrets if they
are missing), builds what each node hosts from its ``actors`` factory, and
opens the nodes it names, in that order, on their ports, with their stores
and security: the test reaches them as Python objects (their actors, their
breakers, their dead letters) while they talk over real sockets, signed,
over mutual TLS (or plainly, for a file that says ``insecure = true``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import attrs

from actorctl import Node, open_node
from actorctl.cluster import ClusterConfig, hosted_actors, load_cluster
from actorctl.ops._foreman import ensure_dev_secrets

__all__ = ["InProcess", "in_process"]


@attrs.frozen
class InProcess:
    """The cluster file read, what each of its nodes hosts, and the nodes opened."""

    config: ClusterConfig
    hosted: Mapping[str, Mapping[str, Any]]
    nodes: Mapping[str, Node]

    def letters(self) -> list[dict[str, Any]]:
        """Every dead letter the nodes hold, node by node in the order opened."""
        return [r for node in self.nodes.values() for r in node.dead_letters.records()]


@asynccontextmanager
async def in_process(path: Path, *names: str, **node_options: Any) -> AsyncIterator[InProcess]:
    """The nodes ``names`` of the cluster file ``path``, opened in that order
    (and stopped in the reverse order) in this process; ``node_options`` go
    to each :func:`actorctl.open_node` too (``grace=0.5``: a shorter stop)."""
    config = load_cluster(path)
    ensure_dev_secrets(config)
    hosted = {n.name: hosted_actors(n.actors, node=n, cluster=config) for n in config.nodes}
    nodes: dict[str, Node] = {}
    async with AsyncExitStack() as stack:
        for name in names:
            spec = config.node(name)
            nodes[name] = await stack.enter_async_context(
                open_node(
                    name,
                    hosted[name],
                    port=spec.port,
                    store=config.store(spec),
                    security=config.security(name),
                    **node_options,
                )
            )
        yield InProcess(config, hosted, nodes)
