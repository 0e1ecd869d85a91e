"""A client in "another language" signs its messages, knowing only docs/protocol.md.

The client, tests/support/foreign.py, uses only python-qpid-proton, the ``cryptography``
package (Ed25519) and the standard library. It imports nothing from actorctl: it
implements the canonical byte form of protocol.md §11.2 and the reply check of
§8.1 from the text. These tests check it against docs/test-vectors.json (§11.9),
and then have it call an actor on a secured node over mutual TLS with
per-message Ed25519 signatures (§11.1, §11.3), and check the node's signed
reply. The tests use actorctl only to host the actor and to make the TLS files
and the node's own key. Each client
runs in a worker thread with its own proton Container, and every wait is bounded
by a Container timer (and, around it, by ``trio.fail_after``).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from proton import Message

from tests.support.foreign import (
    CallResult,
    Command,
    Identity,
    canonical_bytes,
    foreign_call,
    header_json,
    hmac_sha256,
    json_command,
    named_reply_address,
    reply_canonical,
    reply_proof,
    reply_signature_holds,
)
from tests.support.foreign import _text as _text
from tests.support.foreign import _u32 as _u32

# The tests use actorctl to host the actor (TLS files, the node's own key).
# The foreign client: python-qpid-proton, cryptography (Ed25519) and the standard
# library only, written from docs/protocol.md and docs/test-vectors.json alone.
from tests.support.secured import Secured, secured_node

VECTORS = json.loads((Path(__file__).parents[3] / "docs" / "test-vectors.json").read_text())


def test_the_client_canonical_form_matches_the_test_vectors() -> None:
    identity = Identity(
        Ed25519PrivateKey.from_private_bytes(bytes.fromhex(VECTORS["identity"]["seed_hex"]))
    )
    assert identity.raw_public.hex() == VECTORS["identity"]["public_key_hex"]
    assert identity.key_id == VECTORS["identity"]["key_id"]
    session = VECTORS["session"]
    mac_key = bytes.fromhex(session["mac_key_hex"])
    assert session["issuer_key_id"] == identity.key_id

    assert [v["name"] for v in VECTORS["messages"]] == [
        "session",
        "request",
        "minimal event",
        "request with correlation-id",
        "header values",
    ]
    for vector in VECTORS["messages"] + VECTORS["documents"]:
        fields = vector["fields"]
        body = bytes.fromhex(vector["body_hex"])
        canonical = canonical_bytes(
            node=fields["node"],
            to=fields["to"],
            subject=fields["subject"],
            message_id=fields["message_id"],
            correlation_id=fields["correlation_id"],
            reply_to=fields["reply_to"],
            creation_ms=fields["creation_ms"],
            expiry_ms=fields["expiry_ms"],
            kind=fields["kind"],
            headers=fields["headers"],
            body=body,
        )
        assert canonical.hex() == vector["canonical_hex"], vector["name"]

        signed = identity.signature_properties(canonical, fields["node"])
        assert signed["sig_alg"] == vector["ed25519"]["sig_alg"] == "ed25519"
        assert signed["sig_key"] == vector["ed25519"]["sig_key"]
        assert signed["sig_node"] == vector["ed25519"]["sig_node"] == fields["node"]
        # §11.9: messages are for the session's node; documents name none (§8.1).
        assert fields["node"] == ("" if vector in VECTORS["documents"] else session["node"])
        assert signed["sig"].hex() == vector["ed25519"]["sig_hex"], vector["name"]
        if vector["name"] == "session":
            assert "hmac-sha256" not in vector  # a session message is signed ed25519 only
            # §11.5: the session message's body opens the vectors' session.
            assert json.loads(body) == {
                "session": session["id"],
                "key": base64.b64encode(mac_key).decode(),
                "expires_ms": session["expires_ms"],
                "node": session["node"],
            }
        else:
            assert vector["hmac-sha256"]["sig_alg"] == "hmac-sha256"
            assert vector["hmac-sha256"]["sig_key"] == session["id"]
            assert hmac_sha256(mac_key, canonical).hex() == vector["hmac-sha256"]["sig_hex"]

    # §11.2 says the minimal event's canonical form is 153 bytes.
    [event] = [v for v in VECTORS["messages"] if v["name"] == "minimal event"]
    assert len(bytes.fromhex(event["canonical_hex"])) == 153


def test_the_client_verifies_the_documents_of_the_test_vectors_as_received() -> None:
    """§8.1 and §11.9: each document, decoded from the message a node writes, is
    signed over the canonical bytes with field 0 the empty text, in both forms;
    a changed body, another reply address or the field 0 of the earlier
    editions (absent) does not verify."""
    public = bytes.fromhex(VECTORS["identity"]["public_key_hex"])
    session = VECTORS["session"]
    sessions = {session["id"]: bytes.fromhex(session["mac_key_hex"])}
    documents = VECTORS["documents"]
    assert [v["name"] for v in documents] == [
        "reply",
        "result document SUCCESS",
        "result document FAILURE",
    ]
    for vector in documents:
        address = vector["fields"]["to"]
        canonical = bytes.fromhex(vector["canonical_hex"])
        # Field 0: the empty text, 00 00 00 00 (not absent, ff ff ff ff).
        assert canonical[17:21] == b"\x00\x00\x00\x00"
        for form in ("ed25519", "hmac-sha256"):
            reply = Message()
            reply.decode(bytes.fromhex(vector[form]["message_hex"]))
            assert reply_canonical(reply, address) == canonical, (vector["name"], form)
            assert reply_signature_holds(
                reply, address, node_public_raw=public, sessions=sessions
            ), (vector["name"], form)
            assert not reply_signature_holds(
                reply, "$reply/someone-else", node_public_raw=public, sessions=sessions
            )
            absent = canonical.replace(b"\n\x00\x00\x00\x00", b"\n\xff\xff\xff\xff", 1)
            sig = bytes(dict(reply.properties)["sig"])
            if form == "hmac-sha256":
                assert hmac_sha256(sessions[session["id"]], absent) != sig
            else:
                with pytest.raises(InvalidSignature):
                    Ed25519PublicKey.from_public_bytes(public).verify(sig, absent)
            reply.body = b"6"
            assert not reply_signature_holds(
                reply, address, node_public_raw=public, sessions=sessions
            )


def test_the_client_makes_the_reply_proof_and_reads_the_identity_document_of_the_vectors() -> None:
    """§8 and §11.2 as the client wrote them from the page: its reply proof for
    the vector's address, node, proof id and time is the vector's, and it reads
    the node's container id from the vector's ``$identity`` message."""
    identity = Identity(
        Ed25519PrivateKey.from_private_bytes(bytes.fromhex(VECTORS["identity"]["seed_hex"]))
    )
    vector = VECTORS["reply_proof"]
    fields, props = vector["fields"], vector["properties"]
    assert named_reply_address(identity, "client-7c9e") == fields["to"]
    proof = reply_proof(
        identity,
        fields["node"],
        fields["to"],
        time_ms=props["proof_time"],
        proof_id=props["proof_id"],
    )
    assert {str(k): v for k, v in proof.items()} == {
        "sig_alg": props["sig_alg"],
        "sig_key": props["sig_key"],
        "sig": bytes.fromhex(props["sig_hex"]),
        "sig_node": props["sig_node"],
        "proof_id": props["proof_id"],
        "proof_time": props["proof_time"],
    }
    canonical = canonical_bytes(**fields, body=b"")
    assert canonical.hex() == vector["canonical_hex"]

    document = VECTORS["identity_document"]
    message = Message()
    message.decode(bytes.fromhex(document["message_hex"]))
    assert message.subject == "$identity"
    assert dict(message.properties)["kind"] == "document"
    body = json.loads(bytes(message.body).decode("utf-8"))
    assert body["node"] == document["fields"]["node"] == VECTORS["session"]["node"]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (30.5, "30.5"),
        (2.0, "2.0"),
        (-0.0, "-0.0"),
        (0.0001, "0.0001"),
        (1e-05, "1e-05"),
        (1e15, "1000000000000000.0"),
        (1e16, "1e+16"),
        (1.25e-07, "1.25e-07"),
        (0, "0"),
        (-17, "-17"),
        (18446744073709551615, "18446744073709551615"),
        ([1, "a", True, None], '[1,"a",true,null]'),
        ({"b": [], "a": 1}, '{"a":1,"b":[]}'),
        ('q"b\\\b\t\n\f\r\x01\x1f', '"q\\"b\\\\\\b\\t\\n\\f\\r\\u0001\\u001f"'),
        (
            uuid.UUID("4F1E0B7E-2A4C-4D1E-9C3B-0A9F5D2E6B71"),
            '"4f1e0b7e-2a4c-4d1e-9c3b-0a9f5d2e6b71"',
        ),
    ],
)
def test_the_client_header_json_follows_the_spec_examples(value: Any, text: str) -> None:
    assert header_json(value) == text


def test_the_client_writes_non_ascii_as_itself() -> None:
    # §11.2: "Zürich" is the 9 bytes 22 5a c3 bc 72 69 63 68 22.
    assert header_json("Zürich").encode() == bytes.fromhex("225ac3bc7269636822")


async def _call(s: Secured, make_message: Callable[[str], Message]) -> CallResult:
    return await foreign_call(s.node.port, "calculator", make_message, tls=s.tls)


def _add(s: Secured, node: str, a: int, b: int, **options: Any) -> Command:
    return json_command(
        node,
        "calculator",
        "add",
        [a, b],
        {},
        headers={"x-tenant": "Zürich", "x-attempt": 1, "x-urgent": True},
        to=f"amqps://127.0.0.1:{s.node.port}/calculator",
        **options,
    )


async def test_a_foreign_client_signs_with_ed25519_over_mutual_tls(tmp_path: Path) -> None:
    async with secured_node(tmp_path) as s:
        sent: list[Command] = []

        def make_message(reply_to: str, node: str) -> Message:
            command = dataclasses.replace(
                _add(s, node, 2, 3, correlation_id="my-correlation-id"), reply_to=reply_to
            )
            sent.append(command)
            return command.message(s.identity.signature_properties(command.canonical(), node))

        result = await _call(s, make_message)

    assert result.failure is None, result.failure
    assert result.reply_address is not None
    assert result.reply_address.startswith("$reply/")
    assert result.outcome == "accepted", (result.condition, result.description)
    [command] = sent
    assert command.reply_to == result.reply_address
    assert command.node == result.node == s.node.node_id  # what its open frame said
    reply = result.reply
    assert reply is not None
    assert reply.body == 5
    assert reply.application_properties["kind"] == "document"
    assert reply.application_properties["status"] == "ok"
    assert reply.correlation_id == "my-correlation-id"
    assert reply.subject == "add"
    assert reply.presettled
    assert s.calculator.calls == [(2, 3)]


async def test_a_foreign_client_can_check_the_nodes_signed_reply(tmp_path: Path) -> None:
    async with secured_node(tmp_path) as s:

        def make_message(reply_to: str, node: str) -> Message:
            command = dataclasses.replace(_add(s, node, 20, 22), reply_to=reply_to)
            return command.message(s.identity.signature_properties(command.canonical(), node))

        result = await _call(s, make_message)
        assert s.node.identity is not None
        node_key = s.node.identity.public.raw  # what the node's NAME.pub holds

    assert result.reply is not None
    assert result.reply.message is not None
    assert result.reply_address is not None
    reply = result.reply.message
    # The client opened no session: the node signed its reply ed25519 (§8.1)
    assert reply_signature_holds(reply, result.reply_address, node_public_raw=node_key)
    assert dict(reply.properties)["replier"] == "calculator"
    # Bound to the reply address, and to what it says
    assert not reply_signature_holds(reply, "$reply/someone-else", node_public_raw=node_key)
    reply.body = b"43"
    assert not reply_signature_holds(reply, result.reply_address, node_public_raw=node_key)


async def test_fields_that_are_not_covered_may_change_after_signing(tmp_path: Path) -> None:
    # §11.2 "Not covered": the `to` property and the `lang` application property.
    async with secured_node(tmp_path) as s:

        def make_message(reply_to: str, node: str) -> Message:
            command = dataclasses.replace(_add(s, node, 20, 22), reply_to=reply_to)
            signature = s.identity.signature_properties(command.canonical(), node)
            changed = dataclasses.replace(command, to="amqps://elsewhere:1/other", lang="go")
            return changed.message(signature)

        result = await _call(s, make_message)

    assert result.failure is None, result.failure
    assert result.outcome == "accepted", (result.condition, result.description)
    assert result.reply is not None
    assert result.reply.body == 42
    assert result.reply.correlation_id == result.message_id  # the request carried none
    assert s.calculator.calls == [(20, 22)]


def _signed_then_changed(**changes: Any) -> Callable[[Secured, Command], Message]:
    def make(s: Secured, command: Command) -> Message:
        signature = s.identity.signature_properties(command.canonical(), command.node)
        return dataclasses.replace(command, **changes).message(signature)

    return make


def _signed_for_another_actor(s: Secured, command: Command) -> Message:
    other = dataclasses.replace(command, actor="other")  # then sent to the calculator
    return command.message(s.identity.signature_properties(other.canonical(), command.node))


def _signed_for_another_node(s: Secured, command: Command) -> Message:
    # Signed (and sig_node set) for another node hosting a calculator, sent here.
    other = dataclasses.replace(command, node="server-0123456789ab")
    return command.message(s.identity.signature_properties(other.canonical(), other.node))


def _signed_for_another_node_claiming_this_one(s: Secured, command: Command) -> Message:
    other = dataclasses.replace(command, node="server-0123456789ab")
    return command.message(s.identity.signature_properties(other.canonical(), command.node))


def _signed_in_the_first_version(s: Secured, command: Command) -> Message:
    # actorctl-auth-v1: no node in the canonical bytes, and no sig_node.
    old = command.canonical().replace(b"-v2\n" + _text(command.node), b"-v1\n", 1)
    signature = s.identity.signature_properties(old, command.node)
    del signature["sig_node"]
    return command.message(signature)


def _unsigned(s: Secured, command: Command) -> Message:
    return command.message(None)


def _signed_by_an_unknown_key(s: Secured, command: Command) -> Message:
    stranger = Identity.generate()
    return command.message(stranger.signature_properties(command.canonical(), command.node))


REFUSED: dict[str, tuple[Callable[[Secured, Command], Message], str]] = {
    "body changed": (_signed_then_changed(body=b"[[2,4],{}]"), "actorctl:bad-signature"),
    "header changed": (
        _signed_then_changed(headers={"x-tenant": "Zurich", "x-attempt": 1, "x-urgent": True}),
        "actorctl:bad-signature",
    ),
    "header added": (
        _signed_then_changed(
            headers={"x-tenant": "Zürich", "x-attempt": 1, "x-urgent": True, "x-more": 0}
        ),
        "actorctl:bad-signature",
    ),
    "subject changed": (_signed_then_changed(subject="sub"), "actorctl:bad-signature"),
    "correlation-id changed": (
        _signed_then_changed(correlation_id="other"),
        "actorctl:bad-signature",
    ),
    "creation-time changed": (
        lambda s, c: _signed_then_changed(creation_ms=c.creation_ms + 1)(s, c),
        "actorctl:bad-signature",
    ),
    "expiry changed": (
        lambda s, c: _signed_then_changed(expiry_ms=(c.expiry_ms or 0) + 1000)(s, c),
        "actorctl:bad-signature",
    ),
    "reply-to changed": (
        _signed_then_changed(reply_to="$reply/elsewhere"),
        "actorctl:bad-signature",
    ),
    "kind changed": (_signed_then_changed(kind="event"), "actorctl:bad-signature"),
    "signed for another actor": (_signed_for_another_actor, "actorctl:bad-signature"),
    "signed for another node": (_signed_for_another_node, "actorctl:wrong-node"),
    "signed for another node, sig_node changed": (
        _signed_for_another_node_claiming_this_one,
        "actorctl:bad-signature",
    ),
    "signed in the first version": (_signed_in_the_first_version, "actorctl:auth-version"),
    "unsigned": (_unsigned, "actorctl:unauthenticated"),
    "unknown key": (_signed_by_an_unknown_key, "actorctl:unknown-key"),
}


@pytest.mark.parametrize("case", REFUSED)
async def test_a_changed_or_unsigned_message_is_rejected_and_not_run(
    tmp_path: Path, case: str
) -> None:
    make, condition = REFUSED[case]
    async with secured_node(tmp_path) as s:

        def make_message(reply_to: str, node: str) -> Message:
            command = dataclasses.replace(
                _add(s, node, 2, 3, correlation_id="c-1"), reply_to=reply_to
            )
            return make(s, command)

        result = await _call(s, make_message)

    assert result.failure is None, result.failure
    assert result.outcome == "rejected"
    assert result.condition == condition, result.description
    assert result.reply is None  # a rejected command gets no reply document
    assert s.calculator.calls == [], "the handler ran for a refused message"
