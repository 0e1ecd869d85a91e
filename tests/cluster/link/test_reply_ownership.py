"""A reply address belongs to the signing key it names (docs/protocol.md §8).

Real nodes on 127.0.0.1 with mutual TLS and signed messages: ``c`` hosts the
actors; ``b`` is a cluster member (the keyring's ``members`` file names it); ``a``
is a caller that presents the certificate ``cli``, which every client of a
development cluster shares. The attackers are raw AMQP clients (python-qpid-
proton in a worker thread) with a certificate of the cluster CA and, where they
sign, a key the nodes trust:

- a member that learnt the caller's reply address cannot take it on a node the
  caller has not used yet, with no proof, its own, or the caller's proof for
  another node; the caller's link there is not refused;
- a second holder of ``cli`` with its own key cannot take the caller's address,
  cannot name it in ``reply-to``, and its own address and its detach leave the
  caller's route alone; its own calls get its own replies;
- a caller whose key the node does not trust cannot prove its address: its
  reply link is refused, and its message is refused with ``actorctl:unknown-key``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from proton import Endpoint, Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

from actorctl import Node, Rejected, TlsFiles, open_node
from actorctl.cluster.link._reply_claims import reply_proof
from actorctl.mailbox import Keyring
from tests.apps.actors import CountingCalculator
from tests.support.foreign import (
    REPLY_CAPABILITY,
    AttachProperties,
    ClientTls,
    Identity,
    foreign_call,
    json_command,
    named_reply_address,
)
from tests.support.foreign import reply_proof as foreign_proof
from tests.support.harness import Logs, Secrets
from tests.support.keys import make_keys
from tests.support.tls import make_tls

TIMEOUT = 10


@attrs.define
class Cluster:
    a: Node  # the caller, with the shared certificate ``cli``
    b: Node  # a cluster member
    c: Node  # hosts ``calculator``
    calculator: CountingCalculator
    tls: Mapping[str, TlsFiles]
    keys: Mapping[str, Keyring]
    mallory: Identity  # a trusted client key; its holder also has ``cli``

    def client_tls(self, name: str) -> ClientTls:
        files = self.tls[name]
        return ClientTls(str(files.ca), str(files.cert), str(files.key))

    def a_reply(self) -> str:
        return self.a.outbox.reply_address(self.c.address_of("calculator"))

    async def a_adds(self, x: int, y: int) -> None:
        with trio.fail_after(TIMEOUT):
            assert await self.a.ref(self.c.address_of("calculator")).ask("add", x, y) == x + y


@asynccontextmanager
async def cluster(tmp_path: Path, *, a_keys: str = "keys") -> AsyncIterator[Cluster]:
    """``c``, the member ``b`` and the caller ``a``; ``a_keys`` is the directory of
    ``a``'s keyring (another than ``keys``: ``c`` does not trust ``a``'s key)."""
    keys_dir = tmp_path / "keys"
    keys_dir.mkdir()
    mallory = Identity.generate()
    # in the directory before the keyrings are loaded: every *.pub there is trusted
    (keys_dir / "mallory.pub").write_bytes(mallory.public_pem())
    shared = ("a",) if a_keys == "keys" else ()  # else a's key is in a directory of its own
    keys = make_keys(keys_dir, *shared, "b", "c", members=["b"])
    if not shared:
        keys |= make_keys(tmp_path / a_keys, "a")
    secrets = Secrets(make_tls(tmp_path / "tls", "a", "b", "c", "cli"), keys)
    assert keys["c"].is_member(keys["b"].identity.key_id)
    assert not keys["c"].is_member(mallory.key_id)
    calculator = CountingCalculator()
    caller = secrets.options("a", tls=secrets.tls["cli"], connect_timeout=1.0)
    async with (
        open_node("c", [calculator], **secrets.options("c")) as c,
        open_node("b", [CountingCalculator()], **secrets.options("b")) as b,
        open_node("a", host=None, **caller) as a,
    ):
        yield Cluster(a, b, c, calculator, secrets.tls, keys, mallory)


# --- A raw attach of a reply link ------------------------------------------------------


@dataclass
class Attach:
    """What a raw AMQP client got when it attached a reply link."""

    address: str | None = None
    condition: str | None = None
    description: str | None = None
    failure: str | None = None


class AttachReplies(MessagingHandler):
    """Connect with a certificate and a container id of our choosing, attach a
    receiver for ``address`` with attach ``properties``, note what the node
    says, detach the link and close: the node has handled the detach by the
    time its answer to the close arrives."""

    def __init__(
        self,
        port: int,
        address: str,
        container_id: str,
        tls: ClientTls,
        properties: Mapping[Any, Any] | None,
    ) -> None:
        super().__init__(prefetch=10)
        self.port, self.address, self.container_id, self.tls = port, address, container_id, tls
        self.properties = properties
        self.result = Attach()
        self._timer: Any = None

    def on_start(self, event: Any) -> None:
        self._timer = event.container.schedule(TIMEOUT, self)
        connection = event.container.connect(
            f"amqps://127.0.0.1:{self.port}",
            ssl_domain=self.tls.domain(),
            allowed_mechs="ANONYMOUS",
            sasl_enabled=True,
            reconnect=False,
            container_id=self.container_id,
        )
        options = None if self.properties is None else AttachProperties(self.properties)
        event.container.create_receiver(connection, self.address, options=options)

    def on_link_opened(self, event: Any) -> None:
        self.result.address = event.link.remote_source.address
        # A refusal (a detach) comes before the node's answer to our detach.
        if not event.link.state & Endpoint.REMOTE_CLOSED:
            event.link.close()

    def on_link_closed(self, event: Any) -> None:
        event.connection.close()

    def on_link_error(self, event: Any) -> None:
        condition = event.link.remote_condition
        self.result.condition = condition.name
        self.result.description = condition.description
        event.connection.close()

    def on_timer_task(self, event: Any) -> None:
        self.result.failure = "timed out"
        event.container.stop()

    def on_connection_closed(self, event: Any) -> None:
        if self._timer is not None:
            self._timer.cancel()
        event.container.stop()

    def on_transport_error(self, event: Any) -> None:
        self.result.failure = f"transport error: {event.transport.condition}"


async def attach_replies(
    port: int,
    address: str,
    container_id: str,
    tls: ClientTls,
    properties: Mapping[Any, Any] | None = None,
) -> Attach:
    def run() -> Attach:
        client = AttachReplies(port, address, container_id, tls, properties)
        Container(client).run()
        return client.result

    with trio.fail_after(TIMEOUT + 5):
        return await trio.to_thread.run_sync(run, abandon_on_cancel=True)


def _refused(attach: Attach, *words: str) -> None:
    assert attach.failure is None, attach.failure
    assert attach.condition == "amqp:unauthorized-access", attach
    for word in words:
        assert word in (attach.description or ""), (word, attach.description)


# --- A member squats a caller's address --------------------------------------------------


async def test_a_member_cannot_squat_a_callers_reply_address_on_a_node_it_has_not_used(
    tmp_path: Path, logs: Logs
) -> None:
    async with cluster(tmp_path) as k:
        # Given a called the member b, which so learnt its reply address (it is in
        # the reply-to, and a attached it on b) and its container id (a's open)
        with trio.fail_after(TIMEOUT):
            assert await k.a.ref(k.b.address_of("calculator")).ask("add", 1, 1) == 2
        address, a_key, b_key = k.a_reply(), k.keys["a"].identity, k.keys["b"].identity
        assert address == f"$reply/{a_key.key_id}/{k.a.node_id}"
        b_tls, port, now = k.client_tls("b"), k.c.port, k.c.now()
        # When b attaches it on c, where a has not been yet, as a's container id:
        # with no proof, with a proof by its own key, and with the proof a made
        # for b (all b could have seen)
        bare = await attach_replies(port, address, k.a.node_id, b_tls)
        own_key = reply_proof(b_key, k.c.node_id, address, now)
        by_b = await attach_replies(port, address, k.a.node_id, b_tls, own_key)
        made_for_b = reply_proof(a_key, k.b.node_id, address, now)
        replayed = await attach_replies(port, address, k.a.node_id, b_tls, made_for_b)
        # Then each is refused, saying why
        _refused(bare, address, "must prove it")
        _refused(by_b, f"the reply proof is by key {b_key.key_id!r}")
        _refused(replayed, "actorctl:wrong-node")
        # And a's own reply link on c is not refused: its call gets its reply
        await k.a_adds(2, 3)
        assert k.calculator.calls == [(2, 3)]
    refused = [m for m in logs.of_type("actorctl:link:refused") if m.get("source") == address]
    assert len(refused) == 3
    assert not logs.of_type("actorctl:peer:reply-link-refused")


async def test_a_reply_proof_holds_for_one_attach_to_one_node(tmp_path: Path) -> None:
    async with cluster(tmp_path) as k:
        # Given a proof by a's key for c (what c alone sees when a attaches)
        address, a_key = k.a_reply(), k.keys["a"].identity
        proof = reply_proof(a_key, k.c.node_id, address, k.c.now())
        cli = k.client_tls("cli")
        # When it is attached twice
        first = await attach_replies(k.c.port, address, k.a.node_id, cli, proof)
        again = await attach_replies(k.c.port, address, k.a.node_id, cli, proof)
        # Then the first holds (it is the key's) and the copy is a replay
        assert (first.condition, first.address) == (None, address)
        _refused(again, "actorctl:replay")
        # And a proof from outside the time window is stale
        stale = reply_proof(a_key, k.c.node_id, address, k.c.now() - 3600)
        _refused(await attach_replies(k.c.port, address, k.a.node_id, cli, stale), "stale")
        # While a, which re-attaches with a fresh proof of its own, gets its replies
        await k.a_adds(1, 1)


# --- A second holder of one certificate ------------------------------------------------


async def test_two_holders_of_one_certificate_never_see_each_others_replies(
    tmp_path: Path, logs: Logs
) -> None:
    async with cluster(tmp_path) as k:
        await k.a_adds(2, 2)  # a holds its route on c
        address, cli, mallory = k.a_reply(), k.client_tls("cli"), k.mallory
        # When mallory, with a's certificate (cli) and container id and its own
        # key, attaches a's address, with its proof or with none
        with_proof = reply_proof_by(mallory, k, address)
        stolen = await attach_replies(k.c.port, address, k.a.node_id, cli, with_proof)
        bare = await attach_replies(k.c.port, address, k.a.node_id, cli)
        # Then both are refused: the address names a's key, not the certificate
        _refused(stolen, f"the reply proof is by key {mallory.key_id!r}")
        _refused(bare, "must prove it")

        # When mallory calls c with its own named address: its own reply comes back
        def own(reply_to: str, node: str) -> Message:
            command = dataclasses.replace(_add(k, node, 20, 22), reply_to=reply_to)
            return command.message(mallory.signature_properties(command.canonical(), node))

        mine = await foreign_call(k.c.port, "calculator", own, tls=cli, named=mallory)
        assert mine.failure is None, mine.failure
        assert REPLY_CAPABILITY in mine.capabilities
        assert (mine.reply_address or "").startswith(f"$reply/{mallory.key_id}/")
        assert mine.outcome == "accepted"
        assert mine.reply is not None
        assert mine.reply.body == 42

        # When it names a's reply address in reply-to instead
        def foreign(reply_to: str, node: str) -> Message:
            command = dataclasses.replace(_add(k, node, 6, 7), reply_to=address)
            return command.message(mallory.signature_properties(command.canonical(), node))

        theirs = await foreign_call(k.c.port, "calculator", foreign, tls=cli, named=mallory)
        # Then the request is refused with its condition, and never run
        assert theirs.outcome == "rejected", theirs
        assert theirs.condition == "actorctl:foreign-reply-to"
        assert address in (theirs.description or "")
        assert (6, 7) not in k.calculator.calls
        # And a, whose route nobody took, still gets its own replies
        await k.a_adds(3, 4)
        assert k.calculator.calls == [(2, 2), (20, 22), (3, 4)]
    assert not logs.of_type("actorctl:reply:rejected")


async def test_the_impostors_detach_leaves_the_owners_route(tmp_path: Path) -> None:
    async with cluster(tmp_path) as k:
        await k.a_adds(1, 2)
        address, cli, mallory = k.a_reply(), k.client_tls("cli"), k.mallory
        engine, link, _ = k.c.outbox.routes._routes[address]
        # When mallory, with a's certificate and a's container id, attaches its own
        # address (it names mallory's key: allowed) and detaches it
        its_own = named_reply_address(mallory, k.a.node_id)
        proof = reply_proof_by(mallory, k, its_own)
        taken = await attach_replies(k.c.port, its_own, k.a.node_id, cli, proof)
        assert (taken.condition, taken.address) == (None, its_own)
        # and when its attach of a's address was refused, and it went away
        _refused(await attach_replies(k.c.port, address, k.a.node_id, cli, proof), address)
        # Then a's route on c is the one a attached, and a still gets its replies
        assert k.c.outbox.routes._routes[address][:2] == (engine, link)
        assert its_own not in k.c.outbox.routes
        await k.a_adds(5, 6)


# --- A caller that cannot prove its address ------------------------------------------------


async def test_a_caller_whose_key_the_node_does_not_trust_is_told_so(
    tmp_path: Path, logs: Logs
) -> None:
    # Given c does not trust a's key (a's keyring is a directory of its own)
    async with cluster(tmp_path, a_keys="a-keys") as k:
        # When a calls c
        with trio.fail_after(TIMEOUT), pytest.raises(Rejected) as refused:
            await k.a.ref(k.c.address_of("calculator")).ask("add", 1, 2)
        # Then its reply link is refused (no proof by that key holds there, so
        # nobody else holds its address either), and its message is refused
        # for the reason it would have been anyway, and not run
        assert refused.value.condition == "actorctl:unknown-key"
        assert k.calculator.calls == []
    refusal = logs.of_type("actorctl:peer:reply-link-refused")[0]
    assert refusal["condition"] == "amqp:unauthorized-access"
    assert "actorctl:unknown-key" in refusal["description"]


# --- Helpers ---------------------------------------------------------------------------


def reply_proof_by(identity: Identity, k: Cluster, address: str) -> dict[Any, Any]:
    """A proof by a foreign client's key (tests/support/foreign.py), for ``c``."""
    return foreign_proof(identity, k.c.node_id, address)


def _add(k: Cluster, node: str, a: int, b: int) -> Any:
    return json_command(node, "calculator", "add", [a, b], {})
