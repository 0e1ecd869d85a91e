"""The services role's store replicated to the other services node (issue 34
item 1): what the holder confirms (a task its pool's router took, a delayed
task, a task held back for a rate limit, a chord barrier) is in the standby's
copy before the sender hears it is taken; the holder's host lost with its
disk, the node that takes the role over runs all of it; a holder stopped on
purpose keeps its work, and nothing runs twice.

Real nodes on 127.0.0.1 built from a cluster.toml as ``host up`` builds them
(``[etcd]``, two services nodes; the holder that is killed runs in a process
of its own, tests/apps/replicated_node.py), real SQLite files, a real etcd; the
pool's worker node starts only once the story needs it, so that what the
services node took waits in its store. Every task records its run
(tests/apps/replicated_app.py): lost and ran-twice are counted. Waits are on
events, bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from actorctl import Address, Modified, open_node
from actorctl.actors import ActorRef
from actorctl.cluster import (
    BACKLOG_TABLE,
    DEAD_LETTERS,
    DEAD_LETTERS_TABLE,
    REASON_POISON,
    REPLICA,
    ClusterConfig,
    Node,
    NodeStorage,
    ReplicaKeeper,
    hosted_actors,
    load_cluster,
)
from actorctl.etcd import follow_holder
from actorctl.mailbox import KIND_DOCUMENT, Envelope, encode
from actorctl.store import Write
from actorctl.tasks._hosting import cluster_directory
from actorctl.tasks.client._client import TaskClient, send_task
from actorctl.tasks.client._services_role import SERVICES_ROLE_NAME, ServicesRole
from actorctl.tasks.protocol._protocol import (
    CHORD_BARRIER_NAME,
    FAILURE,
    H_CHORD,
    H_STATE,
    H_TASK_ID,
    SERVICES_ROLE,
    SUCCESS,
)
from actorctl.tasks.protocol._send_options import SendOptions
from tests.apps.replicated_app import RAN, job, paced, ran_all
from tests.support.cli import ROOT
from tests.support.etcd_server import EtcdServer
from tests.support.harness import Logs, free_port

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
actors = "tests.apps.replicated_app:app"
services = true

[[node]]
name = "s2"
listen = "127.0.0.1:{p2}"
actors = "tests.apps.replicated_app:app"
services = true

[[node]]
name = "w"
listen = "127.0.0.1:{pw}"
actors = "tests.apps.replicated_app:app"
pools = ["celery"]
"""


@pytest.fixture(autouse=True)
def _fresh_runs() -> None:
    RAN.clear()


@pytest.fixture
def config(tmp_path: Path, etcd: EtcdServer, request: pytest.FixtureRequest) -> ClusterConfig:
    name = f"repl-{request.node.name.removeprefix('test_')[:30].replace('_', '-').strip('-')}"
    path = tmp_path / "cluster.toml"
    ports = {"p1": free_port(), "p2": free_port(), "pw": free_port()}
    path.write_text(CLUSTER.format(name=name, etcd=etcd.url, **ports))
    return load_cluster(path)


@asynccontextmanager
async def cluster_node(
    config: ClusterConfig, name: str, grace: float = 0
) -> AsyncIterator[tuple[Node, Any]]:
    """Node ``name`` as ``host up`` builds it, in this process; yields it and
    its actors; stopped with ``grace`` seconds for what runs."""
    node = next(n for n in config.nodes if n.name == name)
    actors = hosted_actors(node.actors, node=node, cluster=config)
    storage = NodeStorage(store=config.store(node), dead_letters=node.deadletters)
    async with open_node(
        name, actors, port=node.port, insecure=True, storage=storage, grace=0
    ) as run:
        yield run, actors


def confirmed_rows(rows: Iterable[Write]) -> dict[tuple[str, str], bytes]:
    """The rows of what a services node confirmed: tasks, delayed tasks, chords."""
    return {(t, k): v for t, k, v, _ in rows if t in CONFIRMED and v is not None}


async def test_what_the_holder_confirms_is_in_the_standbys_copy_before_its_sender_hears(
    config: ClusterConfig, logs: Logs
) -> None:
    with trio.fail_after(60):
        # Given services node s1 holding the role, s2 standing by
        async with cluster_node(config, "s1") as (s1, s1_actors):
            await logs.wait_for("actorctl:services:leader")
            async with (
                cluster_node(config, "s2") as (_, s2_actors),
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
                    options = SendOptions(countdown=3600.0) if i % 4 == 0 else SendOptions()
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


@contextmanager
def node_process(config: ClusterConfig, name: str) -> Iterator[subprocess.Popen[str]]:
    """Node ``name`` in a process of its own (tests/apps/replicated_node.py; it
    inherits this one's environment), killed at the end if it still runs."""
    errors = (config.root / f"{name}.stderr").open("w")
    command = [sys.executable, "-m", "tests.apps.replicated_node", str(config.path), name]
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=errors, text=True, env=os.environ
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)  # the process this test started, by its PID
        process.wait()
        if process.stdout is not None:
            process.stdout.close()
        errors.close()


async def ready(process: subprocess.Popen[str]) -> None:
    """Wait until ``process`` says it listens."""
    assert process.stdout is not None
    line = await trio.to_thread.run_sync(process.stdout.readline)
    assert line.strip() == "ready", f"the node exited: {line!r} (see its .stderr beside the file)"


async def holds(config: ClusterConfig, name: str) -> None:
    """Wait until etcd says ``name`` holds the services role."""
    assert config.etcd is not None
    found = trio.Event()

    def tell(holder: str | None) -> None:
        if holder == name:
            found.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow_holder, config.etcd.client(), config.name, SERVICES_ROLE, tell)
        await found.wait()
        nursery.cancel_scope.cancel(reason="it holds the role")


async def send(sender: TaskClient, task_id: str, task: str = job.name, **extra: Any) -> str:
    """``task`` to pool celery, confirmed by the services node that takes it."""
    await send_task(
        sender, task=task, pool="celery", args=[], kwargs={}, task_id=task_id,
        reply_to=extra.pop("reply_to", None), confirm=True, **extra,
    )  # fmt: skip
    return task_id


async def test_the_holder_killed_and_its_disk_destroyed_loses_none_of_what_it_confirmed(
    config: ClusterConfig, logs: Logs, record_property: Any
) -> None:
    directory = cluster_directory(config)
    barrier = f"{directory.services['s1']}/{CHORD_BARRIER_NAME}"
    sent: list[str] = []
    with trio.fail_after(120), node_process(config, "s1") as s1:
        # Given services node s1 (a process of its own) holding the role, s2 standing by
        await ready(s1)
        await holds(config, "s1")
        async with (
            cluster_node(config, "s2"),
            open_node("caller", host=None, insecure=True, connect_timeout=1) as caller,
        ):
            sender = TaskClient(caller.outbox, directory)
            sent.append(await send(sender, "probe"))
            await logs.wait_for("actorctl:replica:restored")  # s2's copy of s1 is in sync
            # When s1 confirms 30 tasks for a pool whose worker is not up (its
            # router's backlog keeps them), 10 delayed tasks, a chord of 2 with a body
            for i in range(30):
                sent.append(await send(sender, f"task-{i}"))
            for i in range(10):
                sent.append(await send(sender, f"later-{i}", options=SendOptions(countdown=8.0)))
            chords = ActorRef(Address.parse(barrier), caller.outbox)
            await chords.ask("open", "chord-1", ["head-1", "head-2"], job.s().to_wire())
            header = {"reply_to": barrier, "correlation_id": "chord-1"}
            for head in ("head-1", "head-2"):
                sent.append(await send(sender, head, headers={H_CHORD: "chord-1"}, **header))
            # And 5 tasks paced at 1/s, which its router holds back but the first
            for i in range(5):
                sent.append(await send(sender, f"paced-{i}", paced.name))
            # And s1's host is lost: the process SIGKILLed, its disk destroyed
            s1.send_signal(signal.SIGKILL)
            await trio.to_thread.run_sync(s1.wait)
            shutil.rmtree(config.root / "data" / "s1")
            # Then s2 takes the role and takes over what its copy holds
            await logs.wait_for("actorctl:services:taken-over")
            # And once the pool's worker node starts, everything runs there:
            # the tasks, the delayed tasks, the chord's header and its body, the paced
            async with cluster_node(config, "w"):
                await ran_all({*sent, "chord-1"})
    expected = {*sent, "chord-1"}
    lost = expected - set(RAN)
    twice = {task_id: n for task_id, n in Counter(RAN).items() if n > 1}
    record_property("lost", len(lost))
    record_property("ran_twice", len(twice))
    assert not lost
    assert len(expected) == 49
    taken = logs.of_type("actorctl:services:taken-over")
    assert [m["source"] for m in taken] == ["s1"], taken
    assert taken[0]["tables"].get("chords") == 1, taken
    assert taken[0]["tables"].get("delayed") == 10, taken
    assert taken[0]["tables"].get("held", 0) >= 1, taken  # the paced ones not yet let go
    # (duplicates are reported, not forbidden: at least once)
    assert sum(twice.values()) <= len(RAN), twice


async def run_node(
    config: ClusterConfig, name: str, stop: trio.Event, *, task_status: trio.TaskStatus[Any]
) -> None:
    """Node ``name`` (in this process) from started until ``stop`` is set:
    then it stops as a node stops on purpose (warm: a grace of 2 s)."""
    async with cluster_node(config, name, grace=2) as (_, actors):
        task_status.started(actors)
        await stop.wait()


async def test_a_holder_stopped_on_purpose_keeps_its_work_and_the_next_runs_none_of_it_twice(
    config: ClusterConfig, logs: Logs, record_property: Any
) -> None:
    directory = cluster_directory(config)
    sent: list[str] = []
    s1_stop, s2_stop = trio.Event(), trio.Event()
    with trio.fail_after(90):
        async with trio.open_nursery() as nursery:
            # Given s1 holding the role and s2 standing by
            await nursery.start(run_node, config, "s1", s1_stop)
            await holds(config, "s1")
            s2 = await nursery.start(run_node, config, "s2", s2_stop)
            keeper: ReplicaKeeper = s2[REPLICA]
            # And 10 tasks s1 confirmed for a pool whose worker is not up, in s2's copy
            async with open_node("caller", host=None, insecure=True) as caller:
                sender = TaskClient(caller.outbox, directory)
                for i in range(10):
                    sent.append(await send(sender, f"task-{i}"))
            assert len(confirmed_rows(keeper.rows("s1"))) == 10
            # When s1 stops on purpose (its host lives on, its disk too)
            s1_stop.set()
            # Then s2 forgets its copy: the work stays with s1's disk
            await logs.wait_for("actorctl:replica:released")
            assert keeper.rows("s1") == []
            await holds(config, "s2")
            # And when s1 starts again and the pool's worker node starts, each
            # task runs once, from s1's own store
            async with cluster_node(config, "s1"), cluster_node(config, "w"):
                await ran_all(set(sent))
            s2_stop.set()
    lost = set(sent) - set(RAN)
    twice = {task_id: n for task_id, n in Counter(RAN).items() if n > 1}
    record_property("lost", len(lost))
    record_property("ran_twice", len(twice))
    assert not lost
    assert not twice, twice


#: The cluster of the three-services-nodes test: s3 besides s1 and s2, and
#: s2 and s3 keeping 2 dead letters at most.
THIRD = """
[[node]]
name = "s3"
listen = "127.0.0.1:{p3}"
actors = "tests.apps.replicated_app:app"
services = true
"""
BOUND = "\n[node.deadletters]\nmax = 2\n"


@pytest.fixture
def config3(config: ClusterConfig) -> ClusterConfig:
    """``config`` with a third services node, s3 (see ``THIRD``)."""
    text = config.path.read_text()
    s2 = text.index('name = "s2"')
    end = text.index("services = true\n", s2) + len("services = true\n")
    text = text[:end] + BOUND + text[end:] + THIRD.format(p3=free_port()) + BOUND
    config.path.write_text(text)
    return load_cluster(config.path)


async def add_dead_letter(caller: Node, node: str, directory: Any, message_id: str) -> None:
    """A dead letter added to ``node``'s ``_deadletters`` (an insecure node:
    anyone may), as a worker adds one."""
    letter = Envelope(message_id, "/celery", job.name, [[], {}])
    fields = {
        "reason": REASON_POISON,
        "target": "/celery",
        "message": base64.b64encode(bytes(encode(letter))).decode(),
    }
    address = Address.parse(f"{directory.services[node]}/{DEAD_LETTERS}")
    await ActorRef(address, caller.outbox).deliver("add", **fields)


async def test_with_three_services_nodes_the_third_keeps_no_stale_copy_to_run_again(
    config3: ClusterConfig, logs: Logs, record_property: Any
) -> None:
    config = config3
    directory = cluster_directory(config)
    stops = {"s2": trio.Event(), "s3": trio.Event()}
    with trio.fail_after(90), node_process(config, "s1") as s1:
        async with trio.open_nursery() as nursery:
            # Given s1 (a process of its own) holding the role, s2 and s3 standing
            # by, each with a copy of s1's store
            await ready(s1)
            await holds(config, "s1")
            actors = {
                n: await nursery.start(run_node, config, n, stop) for n, stop in stops.items()
            }
            async with open_node("caller", host=None, insecure=True, connect_timeout=1) as caller:
                sender = TaskClient(caller.outbox, directory)
                sent = [await send(sender, "probe")]
                await logs.wait_for("actorctl:replica:restored", 2)
                # And 3 dead letters s1 keeps, and 10 tasks s1 confirmed after
                # them, for a pool whose worker is not up: in both copies
                for i in range(3):
                    await add_dead_letter(caller, "s1", directory, f"letter-{i}")
                sent += [await send(sender, f"task-{i}") for i in range(10)]
            for name in stops:
                rows = actors[name][REPLICA].rows("s1")
                assert len(confirmed_rows(rows)) == 11, name
                assert sum(table == DEAD_LETTERS_TABLE for table, _, _, _ in rows) == 3, name
            # When s1's host is lost (SIGKILL, its disk destroyed)
            s1.send_signal(signal.SIGKILL)
            await trio.to_thread.run_sync(s1.wait)
            shutil.rmtree(config.root / "data" / "s1")
            # Then one of s2 and s3 takes the role and the copy over
            await logs.wait_for("actorctl:services:taken-over")
            took = logs.of_type("actorctl:services:taken-over")[0]
            new = took["node"]
            third = next(name for name in stops if name != new)
            # ... its dead letters under its bound of 2 at once (the oldest went)
            assert took["adopted"].get(DEAD_LETTERS_TABLE) == 2, took
            assert len(logs.of_type("actorctl:deadletter:evicted")) == 1
            # And the third forgets its copy of s1 (the new holder's snapshot
            # says it went as far), keeping its copy of the new holder's store
            with trio.move_on_after(10):
                await logs.wait_for("actorctl:replica:superseded")
            third_keeper: ReplicaKeeper = actors[third][REPLICA]
            assert third_keeper.rows("s1") == []
            # And once the pool's worker node starts, every task runs, from the new holder
            async with cluster_node(config, "w"):
                await ran_all(set(sent))
                # When the new holder stops too (on purpose: its standby forgets
                # its copy), and the third takes the role
                stops[new].set()
                await holds(config, third)
                await logs.wait_for("actorctl:services:taken-over", 2)
                # And a task sent since runs
                directory.follow(third)
                async with open_node("caller", host=None, insecure=True) as caller:
                    late = await send(TaskClient(caller.outbox, directory), "late")
                await ran_all({late})
            stops[third].set()
    # Then the third took nothing of s1's over, and nothing ran twice
    taken = logs.of_type("actorctl:services:taken-over")[1:]
    assert all(m["node"] == third for m in taken), taken
    assert sum(m["rows"] for m in taken if m["source"] == "s1") == 0, taken
    twice = {task_id: n for task_id, n in Counter(RAN).items() if n > 1}
    record_property("ran_twice", len(twice))
    assert set(sent) <= set(RAN)
    assert not twice, twice


def chord_result(caller: Node, barrier: Address, chord_id: str, task_id: str) -> Envelope:
    """The success document of header task ``task_id`` for ``barrier``, as a worker sends it."""
    return Envelope(
        message_id=caller.outbox.new_message_id(),
        to=str(barrier),
        subject=job.name,
        body=task_id,
        kind=KIND_DOCUMENT,
        correlation_id=chord_id,
        creation_time=caller.outbox.now(),
        headers={H_STATE: SUCCESS, H_TASK_ID: task_id},
    )


@pytest.mark.parametrize("state", [SUCCESS, FAILURE])
async def test_a_holder_deposed_behind_its_back_counts_no_result_and_sends_no_body(
    config: ClusterConfig, logs: Logs, state: str
) -> None:
    directory = cluster_directory(config)
    barrier = Address.parse(f"{directory.services['s1']}/{CHORD_BARRIER_NAME}")
    with trio.fail_after(60):
        # Given s1 holding the role, s2 standing by, and a chord of 2 open on s1's barrier
        async with cluster_node(config, "s1") as (s1, s1_actors):
            await logs.wait_for("actorctl:services:leader")
            async with (
                cluster_node(config, "s2") as (_, s2_actors),
                open_node("caller", host=None, insecure=True) as caller,
            ):
                chords = ActorRef(barrier, caller.outbox)
                await chords.ask("open", "chord-1", ["head-1", "head-2"], job.s().to_wire())
                # And its first result counted
                first = chord_result(caller, barrier, "chord-1", "head-1")
                await caller.outbox.send(barrier, first, presettled=False, confirm=True)
                # When s2 takes the role while s1 does not know it yet (cut off:
                # s2's keeper has seen the newer revision, etcd's lease of s1 not
                # yet ended)
                role: ServicesRole = s1_actors[SERVICES_ROLE_NAME]
                keeper: ReplicaKeeper = s2_actors[REPLICA]
                assert role.replication is not None
                keeper.seen(SERVICES_ROLE, role.replication.statistics().fence + 1)
                # Then the chord's last result (a success, or a failure that
                # would fail the chord) is given back, not counted
                last = chord_result(caller, barrier, "chord-1", "head-2")
                if state == FAILURE:
                    headers = {**last.headers, H_STATE: state}
                    last = attrs.evolve(last, body={"type": "ValueError"}, headers=headers)
                with pytest.raises(Modified, match="newer fence"):
                    await caller.outbox.send(barrier, last, presettled=False, confirm=True)
                # And s1 sends no body: the chord stays open there, with one result
                chord = s1_actors[CHORD_BARRIER_NAME].chords["chord-1"]
                assert sorted(chord.results) == ["head-1"]
                bodies = [k for k, _ in s1.store.items(BACKLOG_TABLE) if k.startswith("chord-1")]
                assert bodies == []
                # And s2's copy holds the chord as s1 confirmed it: one result,
                # for s2's barrier to count the last one on
                row = next(v for t, k, v, _ in keeper.rows("s1") if (t, k) == ("chords", "chord-1"))
                assert sorted(json.loads(row)["results"]) == ["head-1"]
    assert logs.of_type("actorctl:chord:unsendable") == []
    assert logs.of_type("actorctl:actor:crashed") == []
    assert [m["task_id"] for m in logs.of_type("actorctl:chord:not-counted")] == ["head-2"]
