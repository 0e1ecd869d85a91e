"""The table ``cluster up`` (and ``cluster controller``, ``host up``) prints
once its nodes run: a ``NodeRow`` record per node, read from its foreman's
``NodeState`` (issue 29, item 5)."""

from __future__ import annotations

import re
from pathlib import Path

from actorctl.cli.run._node_rows import NodeRow, node_rows, node_table
from actorctl.cluster import load_cluster
from actorctl.ops import NodeState
from actorctl.ops._foreman import NodeRun

CLUSTER = """
[[node]]
name = "worker-1"
listen = "127.0.0.1:5701"
[[node]]
name = "gateway"
listen = "127.0.0.1:5703"
"""


def test_each_node_is_a_row_in_the_files_order_under_the_header(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(CLUSTER)
    config = load_cluster(path)
    states = {
        "gateway": NodeState("gateway", NodeRun.STARTING),
        "worker-1": NodeState(
            "worker-1",
            NodeRun.RUNNING,
            pid=4242,
            address="amqps://127.0.0.1:5701",
            actors=["_node", "words", "primes"],
            restarts=1,
            metrics="http://127.0.0.1:9101/metrics",
        ),
    }
    rows = node_rows(config, states)
    assert [row.node for row in rows] == ["worker-1", "gateway"]
    assert rows[0] == NodeRow(
        "worker-1", 4242, "amqps://127.0.0.1:5701", ("_node", "words", "primes"),
        NodeRun.RUNNING, 1, "http://127.0.0.1:9101/metrics",
    )  # fmt: skip
    lines = node_table(rows).splitlines()
    # each cell under its header, two spaces after the column's widest cell
    assert [re.split(r"  +", line) for line in lines] == [
        ["NODE", "PID", "ADDRESS", "ACTORS", "STATE", "RESTARTS", "MAILBOXES", "METRICS"],
        ["worker-1", "4242", "amqps://127.0.0.1:5701", "words,primes", "running", "1", "-",
         "http://127.0.0.1:9101/metrics"],
        ["gateway", "-", "-", "-", "starting", "0", "-", "-"],
    ]  # fmt: skip
    restarts = lines[0].index("RESTARTS")
    assert lines[1][restarts:].startswith("1 ")
    assert lines[2][restarts:].startswith("0 ")
    assert lines[0].index("ACTORS") + len("words,primes") + 2 == lines[0].index("STATE")
