"""Replication of a node's store to a standby (cluster/replication/: the shipper and
the replica keeper), fenced by the role's revision.

Two real in-process nodes on 127.0.0.1, each with a real SQLite file: the
primary's store ships its commit batches over the nodes' link to the standby's
replica keeper, and confirms a write only once the standby has committed it.
The role's revision is the test's own number here (etcd's part is
tests/hosts/test_replicated_services.py's); waits are bounded by ``trio.fail_after``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from actorctl import Actor, Address, handler, open_node
from actorctl.actors import ActorRef
from actorctl.cluster import (
    BACKLOG_TABLE,
    DEAD_LETTERS_TABLE,
    DeadLetterBounds,
    Node,
    NodeStorage,
)
from actorctl.cluster._metrics import render
from actorctl.cluster.replication._parts import decode_writes, encode_writes
from actorctl.cluster.replication._replica import ReplicaKeeper
from actorctl.cluster.replication._shipper import REPLICA, Replication
from actorctl.mailbox import Envelope
from actorctl.store import ShipRefused, Store
from tests.support.harness import Logs, free_port

ROLE = "services"


@asynccontextmanager
async def standby(directory: Path, port: int) -> AsyncIterator[ReplicaKeeper]:
    """Node ``b`` on ``port``, keeping its replicas under ``directory``."""
    keeper = ReplicaKeeper(directory)
    async with open_node("b", {REPLICA: keeper}, port=port, insecure=True):
        yield keeper


@asynccontextmanager
async def primary(
    path: Path,
    standby_port: int,
    fence: Callable[[], int],
    still_holder: Callable[[Collection[str]], bool] = lambda in_sync: False,
) -> AsyncIterator[tuple[Node, Replication]]:
    """Node ``a``, its store at ``path``, shipping to ``b``'s replica keeper."""
    store = Store(path, name="a")

    async def holder(in_sync: Collection[str]) -> bool:
        await trio.lowlevel.checkpoint()
        return still_holder(in_sync)

    async with open_node(
        "a",
        {},
        port=free_port(),
        insecure=True,
        connect_timeout=0.5,
        storage=NodeStorage(store=store),
    ) as node:
        replication = Replication(
            "a",
            ROLE,
            node.outbox,
            store,
            standbys=lambda: [Address("127.0.0.1", standby_port, REPLICA)],
            fence=fence,
            still_holder=holder,
            timeout=1.0,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(replication.run)
            store.ship_to(replication)
            yield node, replication
            nursery.cancel_scope.cancel(reason="the test is over")


def metrics(node: Node) -> dict[str, float]:
    """The node's replication metrics as ``/metrics`` shows them, by sample
    (``name{label="value"}``)."""
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(render(node.collector()).decode()):
        for sample in family.samples:
            if "replication" in sample.name:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


async def read_back(path: Path) -> dict[tuple[str, str], bytes]:
    """The rows a store file keeps, read by a store opened afresh."""
    store = Store(path, name="reader")
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        rows = {(t, k): v for t, k, v, _ in store.snapshot() if v is not None}
        nursery.cancel_scope.cancel(reason="read")
    return rows


async def test_a_write_confirmed_on_the_primary_is_committed_in_the_standbys_file(
    tmp_path: Path,
) -> None:
    port = free_port()
    with trio.fail_after(20):
        # Given a primary that holds the role under revision 5, its standby up
        async with (
            standby(tmp_path / "replicas", port) as keeper,
            primary(tmp_path / "a.sqlite", port, lambda: 5) as (node, replication),
        ):
            # When it confirms writes (puts, a replaced row, a delete)
            for i in range(50):
                node.store.put("backlog", f"task-{i}", f"body-{i}".encode())
            node.store.put("delayed", "later", b"eta", expires=4e9)
            await node.store.sync()
            node.store.put("backlog", "task-0", b"replaced")
            node.store.delete("backlog", "task-1")
            await node.store.sync()
            # Then the standby holds every one of them as the primary does, at once
            kept = {(t, k): v for t, k, v, _ in keeper.rows("a")}
            ours = {(t, k): v for t, k, v, _ in node.store.snapshot()}
            assert kept == ours
            assert len(kept) == 50  # 51 put, one deleted
            assert kept[("backlog", "task-0")] == b"replaced"
            assert replication.replicated >= 2
            assert replication.unreplicated == 0
        # And its file keeps them once its node has stopped
        on_disk = await read_back(tmp_path / "replicas" / "a.sqlite")
        assert {k: v for k, v in on_disk.items() if k[0] != "\x00replica"} == ours


async def test_a_batch_under_an_older_revision_is_refused_and_not_confirmed(
    tmp_path: Path,
) -> None:
    port = free_port()
    fence = [5]
    with trio.fail_after(20):
        async with (
            standby(tmp_path / "replicas", port) as keeper,
            primary(tmp_path / "a.sqlite", port, lambda: fence[0]) as (node, replication),
        ):
            # Given a write replicated under revision 5
            node.store.put("backlog", "before", b"1")
            await node.store.sync()
            # When the standby's own node takes the role under revision 9
            keeper.seen(ROLE, 9)
            # Then the deposed primary's next write is refused: not confirmed
            node.store.put("backlog", "after", b"2")
            with pytest.raises(ShipRefused, match="newer fence"):
                await node.store.sync()
            assert replication.refused == 1
            # And the standby's copy has not taken it
            assert {k for _, k, _, _ in keeper.rows("a")} == {"before"}
            # And a primary that got the role back under a newer revision writes again
            fence[0] = 10
            node.store.put("backlog", "later", b"3")
            await node.store.sync()
            assert {k for _, k, _, _ in keeper.rows("a")} == {"before", "after", "later"}


async def test_without_its_standby_a_primary_confirms_only_what_etcd_says_it_may(
    tmp_path: Path,
) -> None:
    port = free_port()
    proofs: list[Collection[str]] = []
    holds = [True]

    def still_holder(in_sync: Collection[str]) -> bool:
        proofs.append(in_sync)
        return holds[0]

    with trio.fail_after(30):
        # Given a primary whose standby is not running
        async with primary(tmp_path / "a.sqlite", port, lambda: 3, still_holder) as (
            node,
            replication,
        ):
            # When it writes while it can prove it holds the role
            node.store.put("backlog", "alone", b"1")
            await node.store.sync()
            # Then it confirms, degraded: counted, with the proof asked for
            assert replication.unreplicated == 1
            assert proofs == [[]]
            # ... and /metrics says so
            shown = metrics(node)
            assert shown['actorctl_node_replication_batches_total{outcome="unreplicated"}'] == 1
            assert shown["actorctl_node_replication_degraded"] == 1
            assert shown["actorctl_node_replication_standbys_in_sync"] == 0
            # And when it cannot prove it, it confirms nothing
            holds[0] = False
            node.store.put("backlog", "unproven", b"2")
            with pytest.raises(ShipRefused, match="could not prove"):
                await node.store.sync()
            holds[0] = True
            # When the standby comes up
            async with standby(tmp_path / "replicas", port) as keeper:
                # Then it is brought back with everything, including what was
                # confirmed without it, and later writes wait for it again
                await replication.wait_in_sync()
                node.store.put("backlog", "together", b"3")
                await node.store.sync()
                kept = {k for _, k, _, _ in keeper.rows("a")}
                assert {"alone", "unproven", "together"} <= kept
                assert kept == {k for _, k, _, _ in node.store.snapshot()}
                shown = metrics(node)
                assert shown["actorctl_node_replication_degraded"] == 0
                assert shown["actorctl_node_replication_standbys_in_sync"] == 1
                assert shown['actorctl_node_replication_batches_total{outcome="refused"}'] == 1


def test_writes_cross_the_wire_as_they_were() -> None:
    writes = [("t", "k", b"\x00\xffbin", 12.5), ("t", "gone", None, None)]
    assert decode_writes(encode_writes(writes)) == writes
    with pytest.raises(ValueError, match="table, key, value, expires"):
        decode_writes([["t", "k"]])


class Recorder(Actor):
    """Records what it is told; ``arrived`` is set at the first."""

    def __init__(self) -> None:
        self.told: list[int] = []
        self.arrived = trio.Event()

    @handler
    async def hit(self, n: int) -> None:
        self.told.append(n)
        self.arrived.set()


async def test_a_standby_that_takes_the_copy_over_sends_what_the_primarys_backlog_held(
    tmp_path: Path,
) -> None:
    b_port, c_port = free_port(), free_port()
    target = Address("127.0.0.1", c_port, "recorder")
    with trio.fail_after(30):
        async with standby(tmp_path / "replicas", b_port) as keeper:
            # Given a primary whose backlog holds a durable tell for a node not up
            async with primary(tmp_path / "a.sqlite", b_port, lambda: 4) as (node, _):
                ref = ActorRef(target, node.outbox).with_options(durable=True)
                await ref.tell("hit", 7)
                assert len(node.outbox.backlog) == 1
            # (the primary is gone: its file is not read again)
            (tmp_path / "a.sqlite").unlink()
            # When another node takes the standby's copy over
            recorder = Recorder()
            async with open_node(
                "taker", {}, port=free_port(), insecure=True, connect_timeout=0.5
            ) as taker:
                taken = taker.store.absorb(keeper.rows("a"))
                await taker.store.sync()
                keys = [key for table, key, _, _ in taken if table == BACKLOG_TABLE]
                assert taker.outbox.backlog.resume(keys) == 1
                keeper.forget("a")
                # Then its backlog sends it, once the receiver is up
                async with open_node("c", {"recorder": recorder}, port=c_port, insecure=True):
                    await recorder.arrived.wait()
                    await taker.outbox.backlog.wait_empty()
            assert recorder.told == [7]
            assert keeper.rows("a") == []
            # And a key the taker has already stays its own
            mine = Store.memory("mine")
            mine.put("t", "k", b"mine")
            assert mine.absorb([("t", "k", b"theirs", None), ("t", "j", b"new", None)]) == [
                ("t", "j", b"new", None)
            ]
            assert mine.get("t", "k") == b"mine"


# -- three nodes: a primary, then one of its two standbys taking over -----------------


@asynccontextmanager
async def replicating(
    node: Node,
    ports: Collection[int],
    fence: int,
    still_holder: Callable[[Collection[str]], bool] = lambda in_sync: False,
) -> AsyncIterator[Replication]:
    """``node``'s store shipped, under revision ``fence``, to the replica
    keepers listening on ``ports``."""

    async def holder(in_sync: Collection[str]) -> bool:
        await trio.lowlevel.checkpoint()
        return still_holder(in_sync)

    replication = Replication(
        node.name,
        ROLE,
        node.outbox,
        node.store,
        standbys=lambda: [Address("127.0.0.1", port, REPLICA) for port in ports],
        fence=lambda: fence,
        still_holder=holder,
        timeout=1.0,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(replication.run)
        node.store.ship_to(replication)
        yield replication
        nursery.cancel_scope.cancel(reason="the test is over")


@asynccontextmanager
async def keeper_node(
    name: str, directory: Path, port: int, store: Path | None = None
) -> AsyncIterator[tuple[Node, ReplicaKeeper]]:
    """Node ``name`` on ``port``, keeping replicas under ``directory`` (and
    its own store at ``store``, if given)."""
    keeper = ReplicaKeeper(directory)
    storage = NodeStorage(store=Store(store, name=name) if store else None)
    async with open_node(
        name, {REPLICA: keeper}, port=port, insecure=True, connect_timeout=0.5, storage=storage
    ) as node:
        yield node, keeper


async def take_over(node: Node, keeper: ReplicaKeeper, source: str, fence: int) -> tuple[str, int]:
    """What a services node does when it takes the role (tasks/client/_services_role.py):
    the fence seen, the copy of ``source`` absorbed and forgotten; how far it went."""
    keeper.seen(ROLE, fence)
    position = keeper.position(source)
    assert position is not None
    node.store.absorb(keeper.rows(source))
    await node.store.sync()
    keeper.forget(source)
    return position


def backlog_keys(rows: Collection[tuple[str, str, bytes | None, float | None]]) -> set[str]:
    return {key for table, key, _, _ in rows if table == BACKLOG_TABLE}


async def test_a_third_standby_forgets_the_lost_primarys_copy_the_new_holder_took_over(
    tmp_path: Path, logs: Logs
) -> None:
    b_port, c_port = free_port(), free_port()
    with trio.fail_after(30):
        async with (
            keeper_node("b", tmp_path / "b", b_port, tmp_path / "b.sqlite") as (b, b_keeper),
            keeper_node("c", tmp_path / "c", c_port) as (_, c_keeper),
        ):
            # Given a primary A (revision 1) whose two standbys B and C both
            # hold what it confirmed: 10 tasks, as far as each other
            async with (
                open_node("a", {}, port=free_port(), insecure=True, connect_timeout=0.5) as a,
                replicating(a, [b_port, c_port], 1) as shipped,
            ):
                for i in range(10):
                    a.store.put(BACKLOG_TABLE, f"task-{i}", b"body")
                await a.store.sync()
                assert shipped.statistics().standbys == {
                    f"amqp://127.0.0.1:{b_port}/{REPLICA}": True,
                    f"amqp://127.0.0.1:{c_port}/{REPLICA}": True,
                }
            assert b_keeper.position("a") == c_keeper.position("a")
            assert len(backlog_keys(c_keeper.rows("a"))) == 10
            # When A is lost and B takes the role over (revision 2) with its copy
            position = await take_over(b, b_keeper, "a", 2)
            async with replicating(b, [c_port], 2) as b_shipped:
                b_shipped.took("a", *position)
                # ... and runs task-0 (its row deleted)
                b.store.delete(BACKLOG_TABLE, "task-0")
                await b.store.sync()
                # Then C has forgotten its copy of A (B's own rows hold it
                # now), and its copy of B holds what B still has to run
                assert c_keeper.rows("a") == []
                assert backlog_keys(c_keeper.rows("b")) == {f"task-{i}" for i in range(1, 10)}
    superseded = logs.of_type("actorctl:replica:superseded")
    assert [(m["source"], m["holder"]) for m in superseded] == [("a", "b")]


async def test_a_third_standby_keeps_its_copy_when_it_went_further_than_the_new_holders(
    tmp_path: Path, logs: Logs
) -> None:
    b_port, c_port = free_port(), free_port()
    with trio.fail_after(30):
        async with keeper_node("c", tmp_path / "c", c_port) as (_, c_keeper):
            # Given a primary A shipping to B and C; B is down while A confirms
            # task-2 (degraded: etcd says A holds the role), so C goes further
            async with (
                open_node("a", {}, port=free_port(), insecure=True, connect_timeout=0.5) as a,
                replicating(a, [b_port, c_port], 1, lambda in_sync: True) as shipped,
            ):
                async with keeper_node("b", tmp_path / "b", b_port):
                    a.store.put(BACKLOG_TABLE, "task-1", b"body")
                    await a.store.sync()
                a.store.put(BACKLOG_TABLE, "task-2", b"body")
                await a.store.sync()
                assert shipped.unreplicated == 1
            # When A is lost and B, back with its copy, takes the role over
            async with keeper_node("b", tmp_path / "b", b_port, tmp_path / "b.sqlite") as (
                b,
                b_keeper,
            ):
                behind, ahead = b_keeper.position("a"), c_keeper.position("a")
                assert behind is not None
                assert ahead is not None
                assert behind[1] < ahead[1]
                position = await take_over(b, b_keeper, "a", 2)
                async with replicating(b, [c_port], 2) as b_shipped:
                    b_shipped.took("a", *position)
                    b.store.put(BACKLOG_TABLE, "task-3", b"body")
                    await b.store.sync()
                    # Then C keeps its copy of A, task-2 in it: never lost
                    assert backlog_keys(c_keeper.rows("a")) == {"task-1", "task-2"}
                    assert backlog_keys(c_keeper.rows("b")) == {"task-1", "task-3"}
    assert logs.of_type("actorctl:replica:superseded") == []
    assert [m["source"] for m in logs.of_type("actorctl:replica:kept")] == ["a"]


async def test_dead_letters_taken_over_are_under_the_count_bound_at_once(
    tmp_path: Path, logs: Logs
) -> None:
    b_port = free_port()
    with trio.fail_after(30):
        # Given a node B that keeps 3 dead letters at most, 1 of its own, and
        # keeps a copy of primary A's store, in which A put 4 dead letters
        storage = NodeStorage(
            store=Store(tmp_path / "b.sqlite", name="b"), dead_letters=DeadLetterBounds(max=3)
        )
        keeper = ReplicaKeeper(tmp_path / "b")
        async with open_node(
            "b", {REPLICA: keeper}, port=b_port, insecure=True, storage=storage
        ) as b:
            own = b.dead_letters.add(reason="poison", target="/celery", envelope=letter("b-1"))
            async with (
                open_node("a", {}, port=free_port(), insecure=True, connect_timeout=0.5) as a,
                replicating(a, [b_port], 1),
            ):
                theirs = [
                    a.dead_letters.add(reason="poison", target="/celery", envelope=letter(f"a-{i}"))
                    for i in range(4)
                ]
                await a.store.sync()
            # When A is lost and B takes its copy over
            keeper.seen(ROLE, 2)
            taken = b.store.absorb(keeper.rows("a"))
            await b.store.sync()
            keys = [key for table, key, _, _ in taken if table == DEAD_LETTERS_TABLE]
            assert sorted(keys) == sorted(theirs)
            held = b.dead_letters.adopt(keys)
            await b.store.sync()
            # Then B holds 3 letters, the newest (its own, the oldest, went),
            # in its index and in its store alike: the bound holds at once
            assert held == 3
            assert len(b.dead_letters) == 3
            kept = {r["id"] for r in b.dead_letters.records()}
            assert kept == set(theirs[1:])
            assert own not in kept
            assert b.dead_letters.fullness().nearly_full
    evicted = [m["id"] for m in logs.of_type("actorctl:deadletter:evicted")]
    assert sorted(evicted) == sorted([own, theirs[0]])


def letter(message_id: str) -> Envelope:
    """A task message given up on."""
    return Envelope(message_id, "/celery", "job", [[], {}])
