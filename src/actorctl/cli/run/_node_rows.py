"""The table of a cluster's nodes that ``cluster up``, ``cluster controller``
and ``host up`` print once their nodes run: one :class:`NodeRow` per node,
read from what its foreman knows of it (``ops.NodeState``), in the file's
order of nodes.

The table's MAILBOXES column is ``-`` here: a node's mailboxes are known by
asking the node (``cluster status`` does), not by starting it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, final

import attrs

from ...cluster import ClusterConfig
from ...ops import NodeState
from ...ops._foreman import NodeRun
from ..output._table import table

__all__ = ["NodeRow", "node_rows", "node_table"]

_HEADER: Final = ("NODE", "PID", "ADDRESS", "ACTORS", "STATE", "RESTARTS", "MAILBOXES", "METRICS")
#: The node's own agent, which every node runs: not one of its actors to show.
_AGENT: Final = "_node"


@final
@attrs.frozen
class NodeRow:
    """A node in the table: its name, process, address, actors, state,
    restarts and where it serves /metrics (None: not known, or none)."""

    node: str
    pid: int | None
    address: str | None
    actors: tuple[str, ...]
    state: NodeRun
    restarts: int
    metrics: str | None

    @classmethod
    def of(cls, state: NodeState) -> NodeRow:
        """The row of what the foreman knows of a node."""
        return cls(
            state.name,
            state.pid,
            state.address,
            tuple(state.actors),
            state.state,
            state.restarts,
            state.metrics,
        )

    def cells(self) -> tuple[str, ...]:
        """Its cells, in the order of the table's columns."""
        return (
            self.node,
            str(self.pid or "-"),
            self.address or "-",
            ",".join(a for a in self.actors if a != _AGENT) or "-",
            str(self.state),
            str(self.restarts),
            "-",  # its mailboxes: cluster status asks the node for them
            self.metrics or "-",
        )


def node_rows(config: ClusterConfig, states: Mapping[str, NodeState]) -> list[NodeRow]:
    """A row for each node of ``config`` (each has its state in ``states``)."""
    return [NodeRow.of(states[node.name]) for node in config.nodes]


def node_table(rows: Sequence[NodeRow]) -> str:
    """The rows under their header, each column as wide as its widest cell."""
    return table(_HEADER, [row.cells() for row in rows])
