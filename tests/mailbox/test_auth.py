"""Signed inboxes: every rejection reason, for both forms, over real TLS links.

Each refused message is crafted with the real signing functions, sent on the
client node's own authenticated connection, and must be settled ``rejected``
with its own condition; the handler must not run, and the node must go on
serving a correctly authenticated message.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager

import attrs
import pytest
import trio

from actorctl import Actor, Envelope, Node, handler
from actorctl.actors import Address
from actorctl.mailbox import IdentityKey, Outcome, canonical, encode, json_dumps, sign_ed25519
from actorctl.mailbox._signing import Session, sign_hmac
from tests.apps.actors import Vault
from tests.support.harness import Logs, Secrets, node_pair, open_session, send_raw


@attrs.define
class Cluster:
    """The node pair of these tests: the server hosts the vault, the client
    sends on its own connection (tests/support/harness.py's node_pair)."""

    server: Node
    client: Node
    vault: Vault
    identity: IdentityKey

    @property
    def address(self) -> Address:
        return self.server.address_of("vault")

    @property
    def node(self) -> str:
        """What a message to the vault is signed for: its node's container id."""
        return self.server.node_id

    def envelope(self, who: str = "eve", **changes: object) -> Envelope:
        envelope = Envelope(
            message_id=self.client.new_message_id(),
            to=str(self.address),
            subject="open",
            body=[[who], {}],
            creation_time=self.client.now(),
        )
        return attrs.evolve(envelope, **changes)

    async def session(self) -> Session:
        return await open_session(self.client, self.address)

    async def send(self, data: bytes, message_id: str) -> Outcome:
        return await send_raw(self.client, self.address, data, message_id)

    async def still_serves(self) -> None:
        with trio.fail_after(10):
            assert await self.client.ref(self.address).ask("open", "alice") == "opened for alice"


@asynccontextmanager
async def cluster(secrets: Secrets) -> AsyncIterator[Cluster]:
    vault = Vault()
    async with node_pair([vault], secrets=secrets) as (server, client):
        yield Cluster(server, client, vault, secrets.keys["client"].identity)


Signing = Callable[[Cluster, Envelope], "Callable[[bytes], Mapping[str, object]] | None"]


async def _ed25519(c: Cluster, _: Envelope) -> Callable[[bytes], Mapping[str, object]]:
    return functools.partial(sign_ed25519, c.identity)


async def _hmac(c: Cluster, _: Envelope) -> Callable[[bytes], Mapping[str, object]]:
    return functools.partial(sign_hmac, await c.session())


FORMS = {"ed25519": _ed25519, "session": _hmac}


@pytest.mark.parametrize("form", FORMS)
async def test_both_forms_are_accepted_when_right(secrets: Secrets, form: str, logs: Logs) -> None:
    async with cluster(secrets) as c:
        signer = await FORMS[form](c, c.envelope())
        envelope = c.envelope("bob")
        outcome = await c.send(
            encode(envelope, signer=signer, actor="vault", node=c.node), envelope.message_id
        )
        assert outcome.state == "accepted"
        assert c.vault.opened == ["bob"]
    assert logs.of_type("actorctl:session:opened")


async def _refused(c: Cluster, data: bytes, message_id: str, condition: str, logs: Logs) -> None:
    outcome = await c.send(data, message_id)
    assert outcome.state == "rejected"
    assert outcome.condition == condition, outcome
    assert message_id in (outcome.description or "")
    assert c.vault.opened == [], "the handler ran for a refused message"
    [line] = [
        m for m in logs.of_type("actorctl:delivery:rejected") if m.get("message_id") == message_id
    ]
    assert line["condition"] == condition
    await c.still_serves()


@pytest.mark.parametrize("form", FORMS)
async def test_an_unsigned_message_is_refused(secrets: Secrets, form: str, logs: Logs) -> None:
    async with cluster(secrets) as c:
        envelope = c.envelope()
        await _refused(c, encode(envelope), envelope.message_id, "actorctl:unauthenticated", logs)


async def test_an_unknown_key_is_refused(secrets: Secrets, logs: Logs) -> None:
    async with cluster(secrets) as c:
        stranger = IdentityKey.generate("stranger")
        envelope = c.envelope()
        data = encode(
            envelope, signer=functools.partial(sign_ed25519, stranger), actor="vault", node=c.node
        )
        await _refused(c, data, envelope.message_id, "actorctl:unknown-key", logs)


async def test_an_unknown_or_expired_session_is_refused(secrets: Secrets, logs: Logs) -> None:
    async with cluster(secrets) as c:
        real = await c.session()
        made_up = Session("0" * 32, b"k" * 32, real.issuer_key_id, real.expires)
        envelope = c.envelope()
        data = encode(
            envelope, signer=functools.partial(sign_hmac, made_up), actor="vault", node=c.node
        )
        await _refused(c, data, envelope.message_id, "actorctl:unknown-session", logs)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    "field",
    [
        "subject",
        "actor",
        "node",
        "message_id",
        "creation_time",
        "reply_to",
        "body",
        "header",
        "kind",
    ],
)
async def test_any_covered_field_changed_after_signing_is_refused(
    secrets: Secrets, form: str, field: str, logs: Logs
) -> None:
    async with cluster(secrets) as c:
        signer = await FORMS[form](c, c.envelope())
        signed = c.envelope(headers={"retries": 0})
        actor = "vault"
        changes: dict[str, object] = {
            "subject": {"subject": "close"},
            "message_id": {"message_id": signed.message_id + "x"},
            "creation_time": {"creation_time": (signed.creation_time or 0) + 1},
            "reply_to": {"reply_to": "$reply/elsewhere"},
            "body": {"body": [["mallory"], {}]},
            "header": {"headers": {"retries": 5}},
            "kind": {"kind": "event"},
        }.get(field, {})
        node = c.node
        if field == "actor":
            actor = "other"  # signed for another actor, delivered to the vault
        if field == "node":
            node = "elsewhere-0123456789ab"  # signed for another node, sig_node says this one
        tampered = attrs.evolve(signed, **changes)
        signature = signer(canonical(signed, actor, json_dumps(signed.body), node))
        data = encode(tampered, signer=lambda _: signature, actor="vault", node=c.node)
        await _refused(c, data, tampered.message_id, "actorctl:bad-signature", logs)


@pytest.mark.parametrize("form", FORMS)
async def test_a_message_outside_the_time_window_is_refused(
    secrets: Secrets, form: str, logs: Logs
) -> None:
    async with cluster(secrets) as c:
        signer = await FORMS[form](c, c.envelope())
        envelope = c.envelope(creation_time=c.client.now() - 3600)
        data = encode(envelope, signer=signer, actor="vault", node=c.node)
        await _refused(c, data, envelope.message_id, "actorctl:stale", logs)


@pytest.mark.parametrize("form", FORMS)
async def test_a_replayed_message_is_refused_and_not_run_again(
    secrets: Secrets, form: str, logs: Logs
) -> None:
    async with cluster(secrets) as c:
        signer = await FORMS[form](c, c.envelope())
        envelope = c.envelope("bob")
        data = encode(envelope, signer=signer, actor="vault", node=c.node)
        assert (await c.send(data, envelope.message_id)).state == "accepted"
        assert c.vault.opened == ["bob"]
        c.vault.opened.clear()
        await _refused(c, data, envelope.message_id, "actorctl:replay", logs)


class Gate(Actor):
    def __init__(self) -> None:
        self.entered = trio.Event()
        self.release = trio.Event()
        self.runs = 0

    @handler
    async def wait(self) -> str:
        self.runs += 1
        self.entered.set()
        await self.release.wait()
        return "done"


async def test_a_message_sent_again_after_a_lost_connection_is_answered_not_run_twice(
    secrets: Secrets, logs: Logs
) -> None:
    gate = Gate()
    async with node_pair([gate], secrets=secrets) as (server, client):
        ref = client.ref(server.address_of("gate")).with_options(timeout=20)
        result: list[str] = []

        async def call() -> None:
            result.append(await ref.ask("wait"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            with trio.fail_after(10):
                await gate.entered.wait()
            # Given the connection drops while the handler runs (its answer is lost)
            engine = client.outbox.open_peer(server.address_of("gate")).engine
            assert engine is not None
            await trio.aclose_forcefully(engine.stream)
            # When the handler finishes and the client reconnects and sends again
            gate.release.set()
        # Then the caller gets the answer, and the handler ran once
        assert result == ["done"]
        assert gate.runs == 1
    assert logs.of_type("actorctl:peer:resending")
    assert logs.of_type("actorctl:delivery:duplicate")
    assert not [m for m in logs.of_type("actorctl:delivery:rejected") if m.get("actor") == "gate"]


async def test_a_timestamp_recoded_as_another_type_is_refused(secrets: Secrets, logs: Logs) -> None:
    # A captured message whose creation-time is re-encoded as a double keeps its
    # signature (the canonical form writes the number) but would look new to the
    # replay check: only AMQP timestamps are accepted there.
    import struct

    async with cluster(secrets) as c:
        signer = await FORMS["ed25519"](c, c.envelope())
        envelope = c.envelope("bob")
        data = encode(envelope, signer=signer, actor="vault", node=c.node)
        ms = round((envelope.creation_time or 0) * 1000)
        stamp = b"\x83" + struct.pack(">q", ms)
        assert stamp in data
        recoded = data.replace(stamp, b"\x82" + struct.pack(">d", ms + 0.5))
        await _refused(c, recoded, envelope.message_id, "actorctl:decode-error", logs)
