"""Duplicates per identity, replays bound to the node, a replay cache that outlives it.

Real nodes on 127.0.0.1 over mutual TLS, real signed AMQP 1.0 messages, a real
node process killed with SIGKILL and started again on its SQLite store.
"""

from __future__ import annotations

import functools
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from actorctl import Actor, ConfigError, Envelope, Node, handler, open_node
from actorctl.cluster import Router
from actorctl.cluster._replays import TABLE, ReplayJournal
from actorctl.mailbox import (
    ORIGIN_KEY,
    IdentityKey,
    Keyring,
    ReplayCache,
    SessionTable,
    Verified,
    Verifier,
    encode,
    sign_ed25519,
)
from actorctl.mailbox._keyring import MEMBERS_FILE
from actorctl.store import Store
from tests.apps.actors import Vault
from tests.support.cli import run_cli_async
from tests.support.harness import Logs, Secrets, free_port, send_raw

ROOT = Path(__file__).resolve().parents[3]


class Counter(Actor):
    """Answers each call with who asked and how many calls it has run."""

    dedup_count = 100

    def __init__(self) -> None:
        self.runs = 0

    @handler
    async def bump(self, who: str) -> str:
        self.runs += 1
        return f"{who}#{self.runs}"


def _envelope(node: Node, address: str, message_id: str, who: str, **more: Any) -> Envelope:
    return Envelope(
        message_id=message_id,
        to=address,
        subject=more.pop("subject", "bump"),
        body=[[who], {}],
        creation_time=node.now(),
        **more,
    )


async def _ask(client: Node, address: Any, message_id: str, who: str, **more: Any) -> Any:
    """Call ``bump`` with a message id of our choosing; the reply's body."""
    envelope = _envelope(
        client,
        str(address),
        message_id,
        who,
        reply_to=client.outbox.reply_address(address),
        correlation_id=message_id,
        **more,
    )
    with trio.fail_after(15):
        reply = await client.outbox.request(address, envelope, 10.0)
    return reply.body


# --- Dedup per identity ---------------------------------------------------------------


@pytest.mark.parametrize("first", ["alice", "bob"])
async def test_two_identities_sending_the_same_message_id_each_get_their_own_result(
    tmp_path: Path, first: str, logs: Logs
) -> None:
    c = Secrets.make(tmp_path, "server", "alice", "bob", members=["server"])
    counter = Counter()
    async with (
        open_node("server", [counter], **c.options("server")) as server,
        open_node("alice", host=None, **c.options("alice")) as alice,
        open_node("bob", host=None, **c.options("bob")) as bob,
    ):
        clients = {"alice": alice, "bob": bob}
        second = "bob" if first == "alice" else "alice"
        address = server.address_of("counter")
        # Given one identity sent a message id (the other's next one, say: it
        # could predict it)
        assert await _ask(clients[first], address, "shared-1", first) == f"{first}#1"
        # When the other identity sends a message with that id
        # Then its handler runs for it, and it gets its own result
        assert await _ask(clients[second], address, "shared-1", second) == f"{second}#2"
        # And each identity's own copy is still a duplicate of its own first
        assert await _ask(clients[first], address, "shared-1", first) == f"{first}#1"
        assert await _ask(clients[second], address, "shared-1", second) == f"{second}#2"
    assert counter.runs == 2
    duplicates = logs.of_type("actorctl:delivery:duplicate")
    assert {d["sender"] for d in duplicates} == {
        c.keys["alice"].identity.key_id,
        c.keys["bob"].identity.key_id,
    }


async def test_a_client_asserting_another_identity_as_origin_counts_as_itself(
    tmp_path: Path, logs: Logs
) -> None:
    c = Secrets.make(tmp_path, "server", "alice", "mallory", members=["server"])
    counter = Counter()
    async with (
        open_node("server", [counter], **c.options("server")) as server,
        open_node("alice", host=None, **c.options("alice")) as alice,
        open_node("mallory", host=None, **c.options("mallory")) as mallory,
    ):
        address = server.address_of("counter")
        alice_key = c.keys["alice"].identity.key_id
        # Given a client that is no cluster member asserts alice as the origin
        headers = {ORIGIN_KEY: alice_key}
        got = await _ask(mallory, address, "pre-1", "mallory", headers=headers)
        assert got == "mallory#1"
        # When alice sends that message id
        # Then it runs for her: mallory's message did not count as hers
        assert await _ask(alice, address, "pre-1", "alice") == "alice#2"
    [ignored] = logs.of_type("actorctl:delivery:origin-ignored")
    assert ignored["key"] == c.keys["mallory"].identity.key_id


@pytest.mark.parametrize("router_is_member", [True, False])
async def test_a_router_forwarded_message_keeps_the_origins_dedup_key(
    tmp_path: Path, router_is_member: bool, logs: Logs
) -> None:
    members = ["worker", "router"] if router_is_member else ["worker"]
    c = Secrets.make(tmp_path, "worker", "router", "alice", "bob", members=members)
    counter = Counter()
    async with AsyncExitStack() as stack:
        worker = await stack.enter_async_context(
            open_node("worker", [counter], **c.options("worker"))
        )
        at_worker = worker.address_of("counter")
        pool = Router([at_worker])
        router = await stack.enter_async_context(
            open_node("router", {"pool": pool}, **c.options("router"))
        )
        alice = await stack.enter_async_context(open_node("alice", host=None, **c.options("alice")))
        bob = await stack.enter_async_context(open_node("bob", host=None, **c.options("bob")))
        # Given alice sent a message through the router (forwarded as it is:
        # the same message id, signed by the router, asserting alice as origin)
        at_router = router.address_of("pool")
        sent = _envelope(alice, str(at_router), "via-1", "alice")
        with trio.fail_after(15):
            await alice.outbox.send(at_router, sent, presettled=False, confirm=True)
        assert counter.runs == 1
        # When alice sends that message again, straight to the worker
        again = await _ask(alice, at_worker, "via-1", "alice")
        # And bob sends a message with that id too
        other = await _ask(bob, at_worker, "via-1", "bob")
    if router_is_member:
        # Then the worker knew alice's copy for hers (a duplicate: not run again)
        assert again == "alice#1"
        assert other == "bob#2"
        assert counter.runs == 2
        assert not logs.of_type("actorctl:delivery:origin-ignored")
    else:
        # A router that is no member may not assert an origin: its copy counted
        # as the router's own, so alice's own copy ran again
        assert again == "alice#2"
        assert other == "bob#3"
        [ignored] = logs.of_type("actorctl:delivery:origin-ignored")
        assert ignored["key"] == c.keys["router"].identity.key_id


# --- Replay bound to the node ---------------------------------------------------------


@pytest.mark.parametrize("form", ["ed25519", "session"])
async def test_the_same_signed_bytes_are_refused_by_a_second_node_hosting_that_actor(
    tmp_path: Path, form: str, logs: Logs
) -> None:
    c = Secrets.make(tmp_path, "vault-1", "vault-2", "client", members=["vault-1", "vault-2"])
    first, second = Vault(), Vault()
    async with (
        open_node("vault-1", {"vault": first}, **c.options("vault-1")) as one,
        open_node("vault-2", {"vault": second}, **c.options("vault-2")) as two,
        open_node("client", host=None, **c.options("client")) as client,
    ):
        at_one, at_two = one.address_of("vault"), two.address_of("vault")
        peer = client.outbox.open_peer(at_one)
        with trio.fail_after(10):
            await peer.wait_ready()
        signer = peer._signer  # the session's, once one is open
        if form == "ed25519":
            signer = functools.partial(sign_ed25519, c.keys["client"].identity)
        assert signer is not None
        # Given a message signed for the vault on node 1, accepted there
        envelope = _envelope(client, str(at_one), "once-1", "eve", subject="open")
        data = encode(envelope, signer=signer, actor="vault", node=one.node_id)
        assert (await send_raw(client, at_one, data, "once-1")).state == "accepted"
        assert first.opened == ["eve"]
        # When the same bytes are sent to node 2, which hosts a vault too
        outcome = await send_raw(client, at_two, data, "once-1")
        # Then node 2 refuses them, naming the node they were signed for
        assert outcome.state == "rejected"
        assert outcome.condition == "actorctl:wrong-node"
        assert one.node_id in (outcome.description or "")
        assert two.node_id in (outcome.description or "")
        assert second.opened == []
        # And node 2 still serves what is signed for it
        with trio.fail_after(10):
            assert await client.ref(at_two).ask("open", "bob") == "opened for bob"
    [line] = [
        m
        for m in logs.of_type("actorctl:delivery:rejected")
        if m.get("condition") == "actorctl:wrong-node"
    ]
    assert line["message_id"] == "once-1"


CHILD = """
import sys
from pathlib import Path

import trio

from actorctl import Actor, Node, NodeSecurity, NodeStorage, TlsFiles, handler
from actorctl.store import Store
from actorctl.mailbox import Keyring

store = Store(Path(sys.argv[1]), name="vault")


class Vault(Actor):
    @handler
    async def open(self, who: str) -> str:
        return f"opened for {who}"

    @handler
    async def synced(self) -> int:
        # Every write made before this call is on disk once it returns.
        await store.sync()
        return store.commits


async def main() -> None:
    secrets = Path(sys.argv[2])
    node = Node(
        "vault",
        [Vault()],
        port=int(sys.argv[3]),
        security=NodeSecurity(
            tls=TlsFiles.from_dir(secrets / "tls", "vault"),
            keyring=Keyring.load(secrets / "keys", "vault"),
        ),
        storage=NodeStorage(store=store),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(node.serve)
        print("ready", node.node_id, len(node._replays), flush=True)
        await trio.sleep_forever()


trio.run(main)
"""


@asynccontextmanager
async def vault_process(
    nursery: trio.Nursery, store: Path, secrets: Path, port: int
) -> AsyncIterator[tuple[trio.Process, str, int]]:
    """The child node: its process, its container id and how many replay
    entries it loaded from its store."""
    paths = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    command = [sys.executable, "-c", CHILD, str(store), str(secrets), str(port)]
    process: trio.Process = await nursery.start(
        functools.partial(trio.run_process, command, stdout=subprocess.PIPE, env=env, check=False)
    )
    assert process.stdout is not None
    said = b""
    with trio.fail_after(30):
        while b"\n" not in said:
            chunk = await process.stdout.receive_some(4096)
            assert chunk, "the node process exited before it was ready"
            said += chunk
    word, node_id, loaded = said.split(b"\n")[0].decode().split()
    assert word == "ready"
    try:
        yield process, node_id, int(loaded)
    finally:
        if process.returncode is None:
            process.kill()  # our own child, by its PID
        with trio.fail_after(10):
            await process.wait()


async def test_the_same_signed_bytes_are_refused_after_a_sigkill_and_restart(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    c = Secrets.make(tmp_path, "vault", "client", members=["vault"])
    store, port = tmp_path / "data" / "vault" / "store.sqlite", free_port()
    client_key = c.keys["client"].identity
    options = c.options("client", connect_timeout=30.0)
    async with open_node("client", host=None, **options) as client:
        address = client.ref(f"amqps://127.0.0.1:{port}/vault").address
        envelope = _envelope(client, str(address), "only-once", "eve", subject="open")
        signer = functools.partial(sign_ed25519, client_key)
        # Given a node process with a durable store took a signed message
        async with vault_process(nursery, store, tmp_path, port) as (process, first_id, _):
            data = encode(envelope, signer=signer, actor="vault", node=first_id)
            assert (await send_raw(client, address, data, "only-once")).state == "accepted"
            with trio.fail_after(15):
                assert await client.ref(address).ask("synced") > 0
            # When it is killed with SIGKILL (by its PID) and started again
            os.kill(process.pid, signal.SIGKILL)
            with trio.fail_after(10):
                assert await process.wait() == -signal.SIGKILL
        async with vault_process(nursery, store, tmp_path, port) as (_, second_id, loaded):
            assert second_id != first_id  # a new process: a new container id
            assert loaded >= 1  # the replay entries it kept in its store
            # Then the same bytes are refused: they were signed for the first process
            outcome = await send_raw(client, address, data, "only-once")
            assert outcome.state == "rejected"
            assert outcome.condition == "actorctl:wrong-node"
            # And even signed anew for this process, the same copy (same key,
            # message id and creation time) is a replay: the cache outlived it
            copy = encode(envelope, signer=signer, actor="vault", node=second_id)
            outcome = await send_raw(client, address, copy, "only-once")
            assert outcome.state == "rejected"
            assert outcome.condition == "actorctl:replay"
            # While a message sent again with a fresh creation time is taken
            fresh = attrs.evolve(envelope, creation_time=client.now() + 0.01)
            data = encode(fresh, signer=signer, actor="vault", node=second_id)
            assert (await send_raw(client, address, data, "only-once")).state == "accepted"


# --- The parts, one by one --------------------------------------------------------------


def test_members_are_named_in_the_keyrings_members_file(tmp_path: Path) -> None:
    for name in ("node-a", "node-b", "client"):
        IdentityKey.generate(name).save(tmp_path, name)
    (tmp_path / MEMBERS_FILE).write_text("# the cluster's nodes\nnode-a\n\n  node-b  # router\n")
    keyring = Keyring.load(tmp_path, "client")
    ids = {k.name: k.key_id for k in keyring.public_keys()}
    assert keyring.is_member(ids["node-a"])
    assert keyring.is_member(ids["node-b"])
    assert keyring.is_member(ids["client"])  # its own key: it is itself
    assert not Keyring.load(tmp_path, "node-a").is_member(ids["client"])
    # Names a cluster file gives count too; names with no key are skipped
    (tmp_path / MEMBERS_FILE).unlink()
    keyring = Keyring.load(tmp_path, "node-a", members=["node-b", "nobody"])
    assert keyring.members == {ids["node-a"], ids["node-b"]}


def test_a_members_file_naming_an_unknown_key_says_which_line(tmp_path: Path) -> None:
    IdentityKey.generate("a").save(tmp_path, "a")
    (tmp_path / MEMBERS_FILE).write_text("a\nb\n")
    with pytest.raises(ConfigError, match=r"members, line 2: 'b' is not a key of this keyring"):
        Keyring.load(tmp_path, "a")


def test_only_a_members_signature_asserts_an_origin() -> None:
    member, client = IdentityKey.generate("router"), IdentityKey.generate("client")
    keyring = Keyring(
        IdentityKey.generate("worker"), [member.public, client.public], [member.key_id]
    )
    verifier = Verifier(keyring, SessionTable(), node="worker-1")
    asserted = {ORIGIN_KEY: "0123456789abcdef"}
    assert verifier.origin(Verified(member.key_id, "ed25519"), asserted) == "0123456789abcdef"
    assert verifier.origin(Verified(member.key_id, "hmac-sha256"), asserted) == ("0123456789abcdef")
    assert verifier.origin(Verified(client.key_id, "ed25519"), asserted) is None
    assert verifier.origin(Verified(member.key_id, "ed25519"), {ORIGIN_KEY: ""}) is None
    assert verifier.origin(Verified(member.key_id, "ed25519"), {ORIGIN_KEY: 7}) is None


async def test_the_replay_journal_is_a_ring_in_the_store_and_loads_back(tmp_path: Path) -> None:
    now = [1_767_225_600.0]
    path = tmp_path / "store.sqlite"

    def clock() -> float:
        return now[0]

    async def run_store(store: Store, task_status: trio.TaskStatus[None]) -> None:
        await store.run(task_status=task_status)

    # Given a cache of 50 entries journaled to a durable store
    store = Store(path, name="n", clock=clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(run_store, store)
        cache = ReplayCache(max_entries=50)
        assert ReplayJournal(store, cache, clock).start() == 0
        # When 120 messages are accepted (more than the cache holds)
        for i in range(120):
            key = ("k" * 16, f"m-{i}@{i}")
            assert not cache.check_and_add(key, until_ms=now[0] * 1000 + 300_000, now_ms=0)
        await store.sync()
        nursery.cancel_scope.cancel()
    # Then the table holds no more rows than the cache holds entries
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT count(*) FROM entries WHERE tbl = ?", (TABLE,)).fetchone()
    db.close()
    assert rows == (50,)
    assert store.get(TABLE, "0") is None  # and the store kept no copy in memory
    # And a store opened again loads the newest 50 into a fresh cache
    again = Store(path, name="n", clock=clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(run_store, again)
        cache = ReplayCache(max_entries=50)
        journal = ReplayJournal(again, cache, clock)
        assert journal.start() == 50
        # And it goes on after the row written last, not over the newest ones
        assert journal.next_slot == 120 % 50
        until = now[0] * 1000 + 300_000
        assert cache.check_and_add(("k" * 16, "m-119@119"), until_ms=until, now_ms=now[0] * 1000)
        assert not cache.check_and_add(("k" * 16, "m-69@69"), until_ms=until, now_ms=now[0] * 1000)
        nursery.cancel_scope.cancel()
    # Entries past their window are not loaded
    now[0] += 301
    late = Store(path, name="n", clock=clock)
    async with trio.open_nursery() as nursery:
        await nursery.start(run_store, late)
        assert ReplayJournal(late, ReplayCache(max_entries=50), clock).start() == 0
        nursery.cancel_scope.cancel()


async def test_keys_gen_member_names_the_key_in_the_members_file(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    for args in (["n1", "--member"], ["n2", "--member"], ["client"]):
        made = await run_cli_async("keys", "gen", *args, "--dir", keys)
        assert made.returncode == 0, made.stderr
    assert (keys / MEMBERS_FILE).read_text() == "n1\nn2\n"
    listed = await run_cli_async("keys", "list", "--dir", keys)
    lines = listed.stdout.decode().splitlines()
    assert [line.split()[0] for line in lines if line.endswith(", member")] == ["n1", "n2"]
    keyring = Keyring.load(keys, "client")
    assert keyring.members == {
        keyring.identity.key_id,
        *(k.key_id for k in keyring.public_keys() if k.name in ("n1", "n2")),
    }
