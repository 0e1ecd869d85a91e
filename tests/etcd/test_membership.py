"""Nodes registered in etcd under leases, and the directory that watches them,
against a real etcd (tests/support/etcd_server.py).

Each test has a cluster name of its own, so its keys are its own. Waits are on
the directory's changes and the registration's state, each bounded by
``trio.fail_after``; the one real-time wait is a scenario's duration (etcd
down for longer than a lease's ttl), not a synchronisation.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable

import attrs
import pytest
import trio

from actorctl._errors import ConfigError
from actorctl.actors import Address
from actorctl.cluster import open_node
from actorctl.cluster.membership._member import keep_fence
from actorctl.etcd._etcd import EtcdClient
from actorctl.etcd._etcd_directory import EtcdDirectory, NodeChange, open_directory
from actorctl.etcd._etcd_wire import EtcdUnavailable
from actorctl.etcd._membership import MembershipRefused, open_registration, register_node
from actorctl.etcd._node_record import NodeRecord, node_key
from actorctl.tasks import cluster_app
from tests.support.etcd_server import EtcdServer, open_proxy
from tests.support.harness import Logs

#: The lease's ttl of the registrations that die in these tests, seconds
#: (etcd's shortest, with the fixture's fast raft timings, is 1 s).
TTL = 2


@pytest.fixture
def cluster() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def record(name: str, port: int, workers: dict[str, list[str]] | None = None) -> NodeRecord:
    workers = workers or {}
    actors = ["_node", *(w for names in workers.values() for w in names)]
    return NodeRecord(
        name=name,
        address=f"amqps://10.0.0.1:{port}",
        key_id=f"key-{name}",
        fingerprint="sha256:" + "ab" * 32,
        actors=actors,
        workers=workers,
        started=1_800_000_000.25,
    )


async def wait_until(directory: EtcdDirectory, condition: Callable[[], bool]) -> None:
    """Wait for the directory's changes until ``condition`` holds."""
    generation = directory.generation
    while not condition():
        generation = await directory.wait_changed(generation)


# -- records -----------------------------------------------------------------------------


def test_a_record_reads_back_from_its_json_and_bad_ones_are_refused_by_name() -> None:
    # Given a record of a node with a pool of two workers
    one = record("w-1", 5701, {"celery": ["celery", "celery-2"]})
    # Then it reads back from its JSON, the same bytes every time
    assert NodeRecord.from_json(one.to_json()) == one
    assert one.to_json() == record("w-1", 5701, {"celery": ["celery", "celery-2"]}).to_json()
    assert [str(a) for a in one.worker_addresses("celery")] == [
        "amqps://10.0.0.1:5701/celery",
        "amqps://10.0.0.1:5701/celery-2",
    ]
    assert one.worker_addresses("other") == ()
    assert node_key("demo", "w-1") == "/actorctl/demo/nodes/w-1"

    # And what is wrong with a bad one is named
    with pytest.raises(ConfigError, match="node name 'a/b'"):
        NodeRecord("a/b", "amqp://h:1", "k")
    with pytest.raises(ConfigError, match="endpoint alone"):
        NodeRecord("a", "amqp://h:1/worker", "k")
    with pytest.raises(ConfigError, match=r"workers \['x'\] that are not among its actors"):
        NodeRecord("a", "amqp://h:1", "k", actors=["y"], workers={"p": ["x"]})
    with pytest.raises(ConfigError, match="not JSON"):
        NodeRecord.from_json(b"{")
    with pytest.raises(ConfigError, match="without address, key_id"):
        NodeRecord.from_json(b'{"name": "a"}')


def test_a_record_of_an_older_release_is_read_and_a_new_one_written_for_both() -> None:
    # Given the field the task application renamed (its word was the old name)
    aliases = cluster_app().record_aliases
    old_name = "pools"
    assert aliases == {old_name: "workers"}
    # And a record as a node of the release before issue 29 wrote it
    old = (
        b'{"name":"w-1","address":"amqps://10.0.0.1:5701","key_id":"key-w-1",'
        b'"actors":["_node","celery","celery-2"],"'
        + old_name.encode()
        + b'":{"celery":["celery","celery-2"]}}'
    )
    # Then read with the aliases, its workers are there
    read = NodeRecord.from_json(old, aliases)
    assert read.workers == {"celery": ("celery", "celery-2")}
    assert [str(a) for a in read.worker_addresses("celery")] == [
        "amqps://10.0.0.1:5701/celery",
        "amqps://10.0.0.1:5701/celery-2",
    ]
    # And without them the record is still read, as one without workers
    assert NodeRecord.from_json(old).workers == {}

    # Given a new record that carries the aliases
    new = attrs.evolve(record("w-1", 5701, {"celery": ["celery", "celery-2"]}), aliases=aliases)
    body = json.loads(new.to_json())
    # Then it writes its workers under both names, so that an older node reads them
    assert body["workers"] == body[old_name] == {"celery": ["celery", "celery-2"]}
    # And it round-trips, read by a node of this release with or without aliases
    assert NodeRecord.from_json(new.to_json(), aliases) == new
    assert NodeRecord.from_json(new.to_json()) == new
    # And where both names are there, the new one is read
    both = json.dumps({**body, old_name: {"other": ["_node"]}}).encode()
    assert NodeRecord.from_json(both, aliases).workers == new.workers


# -- registration and directory ----------------------------------------------------------


async def test_a_node_that_registers_appears_in_another_clients_directory(
    etcd: EtcdServer, cluster: str
) -> None:
    seen: list[NodeChange] = []
    with trio.fail_after(10):
        # Given a node registered already, and a directory opened by another client
        async with (
            open_registration(EtcdClient([etcd.url]), cluster, record("a", 5701)),
            open_directory(EtcdClient([etcd.url]), cluster, on_change=seen.append) as directory,
        ):
            assert list(directory.nodes) == ["a"]
            # When two nodes serving a pool register
            b = record("b", 5702, {"celery": ["celery", "celery-2"]})
            c = record("c", 5703, {"celery": ["celery"]})
            async with (
                open_registration(EtcdClient([etcd.url]), cluster, c),
                open_registration(EtcdClient([etcd.url]), cluster, b) as registration,
            ):
                # Then the directory lists them as they registered
                await wait_until(directory, lambda: len(directory.nodes) == 3)
                assert directory.nodes["b"] == b
                assert registration.statistics().writes == 1
                # And a pool's workers are found across nodes, by node name
                assert directory.pool_workers("celery") == (
                    Address("10.0.0.1", 5702, "celery", "amqps"),
                    Address("10.0.0.1", 5702, "celery-2", "amqps"),
                    Address("10.0.0.1", 5703, "celery", "amqps"),
                )
                assert directory.pool_workers("none") == ()
    joins = seen[:3]  # (the leaves of b and c may follow: the directory closes last)
    assert [(c.kind, c.name) for c in joins] == [("join", "a"), ("join", "c"), ("join", "b")]
    assert [c.generation for c in joins] == [1, 2, 3]


async def test_a_graceful_stop_revokes_and_the_node_leaves_at_once(
    etcd: EtcdServer, cluster: str
) -> None:
    seen: list[NodeChange] = []
    client = EtcdClient([etcd.url])
    with trio.fail_after(10):
        async with open_directory(client, cluster, on_change=seen.append) as directory:
            # Given a node registered with a long ttl, as a task
            async with trio.open_nursery() as nursery:
                registration = await nursery.start(
                    register_node, client, cluster, record("a", 5701), 60
                )
                await wait_until(directory, lambda: "a" in directory.nodes)
                # When it stops
                nursery.cancel_scope.cancel()
            stopped = trio.current_time()
            # Then it leaves at once, not after its ttl; its lease is gone
            await wait_until(directory, lambda: not directory.nodes)
            assert trio.current_time() - stopped < 1
            assert await client.time_to_live(registration.lease) == 0
    # ... saying first that it is leaving (the others tell it from a death)
    assert [(c.kind, c.name) for c in seen] == [("join", "a"), ("update", "a"), ("leave", "a")]
    assert seen[1].record == attrs.evolve(record("a", 5701), leaving=True)
    assert seen[-1].record.leaving


async def test_a_node_cut_off_from_etcd_leaves_after_its_ttl_and_joins_again_when_healed(
    etcd: EtcdServer, cluster: str, logs: Logs
) -> None:
    seen: list[NodeChange] = []
    with trio.fail_after(15):
        async with (
            open_proxy(etcd.client_port) as proxy,
            open_directory(EtcdClient([etcd.url]), cluster, on_change=seen.append) as directory,
            # Given a node that reaches etcd through a link the test can cut
            # (1 s: the proxy runs in this test's own loop, slow to connect on
            # a busy machine; a keepalive cut off still fails before the lease ends)
            open_registration(
                EtcdClient([proxy.url], timeout=1.0), cluster, record("a", 5701), ttl=TTL
            ) as registration,
        ):
            await wait_until(directory, lambda: "a" in directory.nodes)
            first_lease = registration.lease

            # When its link to etcd is cut: its keepalives stop reaching etcd
            proxy.cut()
            cut = trio.current_time()

            # Then it leaves the directory once its lease runs out, not before
            await wait_until(directory, lambda: "a" not in directory.nodes)
            assert trio.current_time() - cut > TTL - TTL / 3 - 0.1
            assert not registration.statistics().registered

            # When the link heals
            proxy.heal()

            # Then it registers again, under a new lease, and joins again
            await wait_until(directory, lambda: "a" in directory.nodes)
            await registration.wait_registered()
            assert registration.lease != first_lease
            assert registration.statistics().writes == 2
            assert [(c.kind, c.name) for c in seen] == [
                ("join", "a"),
                ("leave", "a"),
                ("join", "a"),
            ]
    assert logs.of_type("actorctl:membership:lease-ended")
    assert logs.of_type("actorctl:membership:reregistered")


async def test_etcd_killed_and_restarted_the_directory_keeps_its_view_and_catches_up(
    own_etcd: EtcdServer, cluster: str
) -> None:
    seen: list[NodeChange] = []
    with trio.fail_after(30):
        async with (
            open_directory(
                EtcdClient([own_etcd.url], timeout=1),
                cluster,
                on_change=seen.append,
                max_retry=0.3,
            ) as directory,
            open_registration(
                EtcdClient([own_etcd.url], timeout=1),
                cluster,
                record("a", 5701, {"celery": ["celery"]}),
                ttl=TTL,
            ) as survivor,
        ):
            # Given two registered nodes, seen by the directory
            async with trio.open_nursery() as doomed:
                await doomed.start(
                    register_node,
                    EtcdClient([own_etcd.url], timeout=1),
                    cluster,
                    record("b", 5702),
                    TTL,
                )
                await wait_until(directory, lambda: len(directory.nodes) == 2)
                view = directory.nodes
                workers = directory.pool_workers("celery")

                # When etcd is killed, and one node stops while it is down (its
                # revoke cannot reach etcd: its lease will run out instead)
                own_etcd.kill()
                doomed.cancel_scope.cancel()
            await survivor.wait_unregistered()
            with pytest.raises(EtcdUnavailable):
                await EtcdClient([own_etcd.url], timeout=0.5).get_prefix("/")

            # Then the directory keeps answering with its view, with no etcd call,
            # for longer than a lease's ttl (etcd down that long: the scenario)
            await trio.sleep(TTL + 0.5)
            assert directory.nodes == view
            assert directory.pool_workers("celery") == workers
            assert not directory.connected

            # When etcd is started again on its data
            await trio.to_thread.run_sync(own_etcd.start)

            # Then the node that lives is registered again, and the directory
            # follows etcd again: the node that stopped leaves once its lease ends
            await survivor.wait_registered()
            assert survivor.statistics().outages == 1
            await wait_until(directory, lambda: list(directory.nodes) == ["a"])
            assert directory.connected
            held = await EtcdClient([own_etcd.url]).get(survivor.key)
            assert held is not None
            assert held.value == survivor.record.to_json()
            assert [(c.kind, c.name) for c in seen] == [
                ("join", "a"),
                ("join", "b"),
                ("leave", "b"),
            ]


async def test_a_directory_that_missed_compacted_history_reads_again_and_hands_out_the_difference(
    etcd: EtcdServer, cluster: str, logs: Logs
) -> None:
    seen: list[NodeChange] = []
    writer = EtcdClient([etcd.url])
    with trio.fail_after(15):
        async with (
            open_registration(writer, cluster, record("a", 5701)),
            open_proxy(etcd.client_port) as proxy,
            # Given a directory that reaches etcd through a link the test can cut
            open_directory(
                EtcdClient([proxy.url], timeout=0.5),
                cluster,
                on_change=seen.append,
                max_retry=0.2,
            ) as directory,
        ):
            # When it is cut off while nodes join and leave and etcd compacts its history
            proxy.cut()
            async with open_registration(writer, cluster, record("b", 5702)):
                pass
            async with open_registration(writer, cluster, record("c", 5703, {"p": ["p"]})) as c:
                compacted = await writer.put(f"/test/{cluster}/mark", b"")
                etcd.post("/v3/kv/compaction", {"revision": str(compacted)})
                # And the link heals
                proxy.heal()
                # Then it reads every record again, and sees the difference only
                await wait_until(directory, lambda: "c" in directory.nodes)
                assert directory.statistics().resyncs == 1
                assert directory.pool_workers("p") == c.record.worker_addresses("p")
                assert [(change.kind, change.name) for change in seen] == [
                    ("join", "a"),
                    ("join", "c"),
                ]
    assert logs.of_type("actorctl:membership:compacted")


async def test_a_record_that_is_not_a_node_is_left_out_and_said(
    etcd: EtcdServer, cluster: str, logs: Logs
) -> None:
    client = EtcdClient([etcd.url])
    with trio.fail_after(10):
        async with open_directory(client, cluster) as directory:
            # Given a key under the nodes' prefix that holds no record, then a node
            await client.put(node_key(cluster, "junk"), b"not json")
            await client.put(node_key(cluster, "liar"), record("other", 5709).to_json())
            async with open_registration(client, cluster, record("a", 5701)):
                # Then only the node is listed, and the bad keys are named in the log
                await wait_until(directory, lambda: "a" in directory.nodes)
                assert list(directory.nodes) == ["a"]
    bad = {m["key"]: m["error"] for m in logs.of_type("actorctl:membership:bad-record")}
    assert "not JSON" in bad[node_key(cluster, "junk")]
    assert "names node 'other'" in bad[node_key(cluster, "liar")]


async def test_a_directory_with_aliases_routes_to_a_node_of_an_older_release(
    etcd: EtcdServer, cluster: str
) -> None:
    aliases = cluster_app().record_aliases
    old_name = "pools"
    client = EtcdClient([etcd.url])
    with trio.fail_after(10):
        async with open_directory(client, cluster, aliases=aliases) as directory:
            # Given a node of the release before issue 29, its workers under the old name
            body = json.loads(record("old", 5701, {"p": ["p", "p-2"]}).to_json())
            body[old_name] = body.pop("workers")
            await client.put(node_key(cluster, "old"), json.dumps(body).encode())
            # And a node of this release
            async with open_registration(client, cluster, record("new", 5702, {"p": ["p"]})):
                # Then the directory routes the pool to the workers of both
                await wait_until(directory, lambda: {"old", "new"} <= directory.nodes.keys())
                assert [str(a) for a in directory.pool_workers("p")] == [
                    "amqps://10.0.0.1:5702/p",
                    "amqps://10.0.0.1:5701/p",
                    "amqps://10.0.0.1:5701/p-2",
                ]


# -- one truth (issue 34) ----------------------------------------------------------------


def member(name: str, port: int, knows: tuple[str, ...], trusts: tuple[str, ...]) -> NodeRecord:
    """A record that says whom it takes for members: node names and key ids."""
    return attrs.evolve(record(name, port), knows=knows, trusts=trusts)


async def test_a_node_that_a_member_would_not_accept_is_refused_at_registration_saying_why(
    etcd: EtcdServer, cluster: str
) -> None:
    client = EtcdClient([etcd.url])
    names, keys = ("s", "w"), ("key-s", "key-w")
    with trio.fail_after(20):
        # Given a services node s registered, whose file names s and w, and
        # whose keyring trusts their keys
        async with open_registration(client, cluster, member("s", 5701, names, keys), ttl=60):
            cases = [
                # a node that only its own copy of the file names
                (
                    member("d", 5704, (*names, "d"), (*keys, "key-d")),
                    "node 'd' is not in the cluster file of node 's' (at amqps://10.0.0.1:5701)",
                ),
                # a node in the file whose key s does not trust
                (
                    attrs.evolve(member("w", 5702, names, keys), key_id="key-other"),
                    "the key of node 'w' (key-other) is unknown to node 's'",
                ),
                # a node whose own file does not name s
                (
                    member("w", 5702, ("w",), keys),
                    "node 's' is not in the cluster file of this node",
                ),
                # a node that takes s's name, from another address
                (
                    member("s", 5709, names, keys),
                    "node name 's' is taken: a node at amqps://10.0.0.1:5701",
                ),
            ]
            for refused, why in cases:
                # When it registers, it is refused, saying why, and writes nothing
                with pytest.raises(MembershipRefused) as raised:
                    async with open_registration(client, cluster, refused, ttl=60):
                        raise AssertionError("it registered")
                assert why in str(raised.value), str(raised.value)
                assert "copy the one cluster file" in str(raised.value) or "taken" in why
                held = await client.get(node_key(cluster, refused.name))
                assert refused.name == "s" or held is None
            # And a node that both sides accept registers
            good = member("w", 5702, names, keys)
            async with open_registration(client, cluster, good, ttl=60):
                held = await client.get(node_key(cluster, "w"))
                assert held is not None
                assert NodeRecord.from_json(held.value) == good
            # And the services node's own record was never touched
            kept = await client.get(node_key(cluster, "s"))
            assert kept is not None
            assert NodeRecord.from_json(kept.value).address == "amqps://10.0.0.1:5701"


async def test_a_node_cut_off_from_etcd_and_everyone_fences_itself_before_the_others_drop_it(
    etcd: EtcdServer, cluster: str, logs: Logs
) -> None:
    with trio.fail_after(20):
        async with (
            open_proxy(etcd.client_port) as proxy,
            open_directory(EtcdClient([etcd.url]), cluster) as directory,
            # Given a node that reaches etcd through a link the test can cut,
            # and hears from no other host (it has no connection open)
            open_node("a", host="127.0.0.1", port=0, insecure=True) as node,
            open_registration(
                EtcdClient([proxy.url], timeout=0.5), cluster, record("a", 5701), ttl=TTL
            ) as registration,
            trio.open_nursery() as nursery,
        ):
            fence = node.outbox.fence
            nursery.start_soon(
                keep_fence, fence, registration, functools.partial(node.last_heard, "10.0.0.1")
            )
            await wait_until(directory, lambda: "a" in directory.nodes)
            assert fence.why is None

            # When its link to etcd is cut
            proxy.cut()

            # Then by the time the others see its lease end, it has fenced itself
            await wait_until(directory, lambda: "a" not in directory.nodes)
            assert fence.why is not None
            assert "its lease in etcd ended" in fence.why

            # When the link heals, it registers again and lowers its fence
            proxy.heal()
            await registration.wait_registered()
            await fence.wait_lowered()
            assert fence.raised_times == 1
            nursery.cancel_scope.cancel()
    assert logs.of_type("actorctl:node:fenced")
    assert logs.of_type("actorctl:node:unfenced")
