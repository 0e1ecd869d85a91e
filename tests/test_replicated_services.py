"""The services role's store replicated to the other services node (issue 34):
what the holder confirms (a task its pool's router took, a delayed task, a
chord barrier) is in the standby's copy before the sender hears it is taken.

Real in-process nodes on 127.0.0.1 built from a cluster.toml as ``host up``
builds them (``[etcd]``, two services nodes), real SQLite files, a real etcd;
the pool's worker node is not started, so what the router took waits in its
backlog. Waits are on events, bounded by ``trio.fail_after``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from actorctl import Address, App, open_node
from actorctl.actors import ActorRef
from actorctl.cluster import (
    REPLICA,
    ClusterConfig,
    Node,
    NodeStorage,
    ReplicaKeeper,
    hosted_actors,
    load_cluster,
)
from actorctl.store import Write
from actorctl.tasks._hosting import cluster_directory
from actorctl.tasks.client._client import TaskClient, send_task
from actorctl.tasks.client._services_role import SERVICES_ROLE_NAME, ServicesRole
from actorctl.tasks.protocol._protocol import CHORD_BARRIER_NAME

from .etcd_server import EtcdServer
from .harness import Logs, free_port

app = App("replicated")
app.pool("celery", concurrency=2)


@app.task
async def job() -> None:
    """Never runs here: its pool's node is not started."""


#: The tables a services node keeps what it confirmed in.
CONFIRMED = ("backlog", "delayed", "chords")

CLUSTER = """\
[cluster]
name = "{name}"
dev = true

[etcd]
endpoints = ["{etcd}"]
ttl = 2

[[node]]
name = "s1"
listen = "127.0.0.1:{p1}"
actors = "tests.test_replicated_services:app"
services = true

[[node]]
name = "s2"
listen = "127.0.0.1:{p2}"
actors = "tests.test_replicated_services:app"
services = true

[[node]]
name = "w"
listen = "127.0.0.1:{pw}"
actors = "tests.test_replicated_services:app"
pools = ["celery"]
"""


@pytest.fixture
def config(tmp_path: Path, etcd: EtcdServer, request: pytest.FixtureRequest) -> ClusterConfig:
    name = f"repl-{request.node.name.removeprefix('test_')[:30].replace('_', '-').strip('-')}"
    path = tmp_path / "cluster.toml"
    ports = {"p1": free_port(), "p2": free_port(), "pw": free_port()}
    path.write_text(CLUSTER.format(name=name, etcd=etcd.url, **ports))
    return load_cluster(path)


@asynccontextmanager
async def services_node(config: ClusterConfig, name: str) -> AsyncIterator[tuple[Node, Any]]:
    """Services node ``name`` as ``host up`` builds it; yields it and its actors."""
    node = next(n for n in config.nodes if n.name == name)
    actors = hosted_actors(node.actors, node=node, cluster=config)
    storage = NodeStorage(store=config.store(node))
    port = int(node.listen.rsplit(":", 1)[1])
    async with open_node(name, actors, port=port, insecure=True, storage=storage, grace=0) as run:
        yield run, actors


def confirmed_rows(rows: Iterable[Write]) -> dict[tuple[str, str], bytes]:
    """The rows of what a services node confirmed: tasks, delayed tasks, chords."""
    return {(t, k): v for t, k, v, _ in rows if t in CONFIRMED and v is not None}


async def test_what_the_holder_confirms_is_in_the_standbys_copy_before_its_sender_hears(
    config: ClusterConfig, logs: Logs
) -> None:
    with trio.fail_after(60):
        # Given services node s1 holding the role, s2 standing by
        async with services_node(config, "s1") as (s1, s1_actors):
            await logs.wait_for("actorctl:services:leader")
            async with (
                services_node(config, "s2") as (_, s2_actors),
                open_node("caller", host=None, insecure=True) as caller,
            ):
                role: ServicesRole = s1_actors[SERVICES_ROLE_NAME]
                keeper: ReplicaKeeper = s2_actors[REPLICA]
                assert role.held
                assert role.replication is not None
                directory = cluster_directory(config)
                sender = TaskClient(caller.outbox, directory)
                # When a caller sends 20 tasks (5 due in an hour), each confirmed
                for i in range(20):
                    options = {"countdown": 3600} if i % 4 == 0 else {}
                    await send_task(
                        sender, task=job.name, pool="celery", args=[], kwargs={},
                        task_id=f"t-{i}", reply_to=None, options=options, confirm=True,
                    )  # fmt: skip
                    # Then s2's copy holds it (and all before it) once s1 confirmed it
                    kept = confirmed_rows(keeper.rows("s1"))
                    assert kept == confirmed_rows(s1.store.snapshot()), i
                    assert len(kept) == i + 1
                # And a chord barrier, once opened
                barrier = f"{directory.services['s1']}/{CHORD_BARRIER_NAME}"
                chords = ActorRef(Address.parse(barrier), caller.outbox)
                await chords.ask("open", "chord-1", ["t-1", "t-2"], {"task": job.name})
                kept = confirmed_rows(keeper.rows("s1"))
                assert kept == confirmed_rows(s1.store.snapshot())
                assert Counter(t for t, _ in kept) == {"backlog": 15, "delayed": 5, "chords": 1}
                # And none was confirmed with fewer copies than asked, nor refused
                assert role.replication.unreplicated == 0
                assert role.replication.refused == 0
