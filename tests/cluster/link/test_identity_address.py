"""A client that cannot see the node's ``open`` frame still signs (docs/protocol.md
§4, §11.2): it reads the node's container id from the ``$identity`` address.

The client (tests/support/foreign_identity.py, then tests/support/foreign.py) uses only
python-qpid-proton, ``cryptography`` and the standard library, and the id it
signs with is the one ``$identity`` gave: never ``connection.remote_container``,
which uAMQP and the Azure SDKs built on it do not show. With it, it proves its
named reply address (§8), signs its call, and verifies the node's signed reply
(§8.1): the whole way, end to end. The node is secured
(mutual TLS, a keyring that requires signatures); the tests use actorctl only
to host the actor and to make the TLS files and keys.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import trio
from proton import Message

from tests.support.foreign import (
    foreign_call,
    json_command,
    reply_signature_holds,
)
from tests.support.foreign_identity import read_identity
from tests.support.secured import secured_node


async def test_a_client_that_cannot_see_the_open_frame_learns_the_node_signs_and_verifies(
    tmp_path: Path,
) -> None:
    async with secured_node(tmp_path) as s:
        # Given a client that reads the node's container id from $identity
        # (its source written as a full address, as uAMQP writes it)
        source = f"amqps://127.0.0.1:{s.node.port}/$identity"
        with trio.fail_after(30):
            read = await read_identity(s.node.port, source=source, tls=s.tls)
        assert read.failure is None, read.failure
        assert read.condition is None, read.description
        # Then it got one unsigned, pre-settled JSON document naming the node
        [[answer]] = read.messages
        assert answer["body"] == {"node": s.node.node_id, "name": "server"}
        assert answer["subject"] == "$identity"
        assert answer["content_type"] == "application/json"
        assert answer["presettled"]
        assert answer["properties"]["kind"] == "document"
        assert "sig" not in answer["properties"]
        learned = read.node
        assert learned is not None

        # When it attaches its own named reply address with a reply proof made
        # for that id, and signs a call with it (never reading the open frame)
        def make_message(reply_to: str, node: str) -> Message:
            assert node == learned  # what the client signs for: $identity's answer
            command = json_command(learned, "calculator", "add", [2, 3], {})
            command = dataclasses.replace(command, reply_to=reply_to)
            return command.message(s.identity.signature_properties(command.canonical(), learned))

        with trio.fail_after(30):
            result = await foreign_call(
                s.node.port, "calculator", make_message, tls=s.tls, named=s.identity, node=learned
            )
        assert s.node.identity is not None
        node_key = s.node.identity.public.raw  # what the node's NAME.pub holds

    # Then the node takes the proof (the reply address is the client's own) and
    # the call (a v2 signature for this node), and answers
    assert result.failure is None, result.failure
    assert not result.link_refused, result.description
    assert result.reply_address is not None
    assert result.reply_address.startswith(f"$reply/{s.identity.key_id}/")
    assert result.outcome == "accepted", (result.condition, result.description)
    assert result.reply is not None
    assert result.reply.body == 5
    assert s.calculator.calls == [(2, 3)]
    # And the reply verifies as §8.1 says, from the node's key: bound to the
    # reply address and to what it says
    reply = result.reply.message
    assert reply is not None
    assert reply_signature_holds(reply, result.reply_address, node_public_raw=node_key)
    properties: dict[str, object] = dict(reply.properties or {})
    assert properties["replier"] == "calculator"
    assert not reply_signature_holds(reply, "$reply/someone-else", node_public_raw=node_key)
    reply.body = b"6"
    assert not reply_signature_holds(reply, result.reply_address, node_public_raw=node_key)
    print(f"learned {learned} from $identity; proved {result.reply_address}; answered, verified")


async def test_identity_answers_once_per_link_and_is_read_only(tmp_path: Path) -> None:
    async with secured_node(tmp_path) as s:
        # Given a client that grants 10 credits on each of two $identity links
        # (the second attached once the first link's answer came)
        with trio.fail_after(30):
            read = await read_identity(s.node.port, tls=s.tls, links=2, credit=10)
        # Then each link got exactly one message: the node answered the first
        # link's credit once, before it saw the second link
        assert read.failure is None, read.failure
        assert [len(on_link) for on_link in read.messages] == [1, 1]
        assert {m[0]["body"]["node"] for m in read.messages} == {s.node.node_id}

        # When a client attaches a sender link to $identity
        def make_message(reply_to: str, node: str) -> Message:
            raise AssertionError("no credit on a refused link: nothing is sent")

        with trio.fail_after(30):
            refused = await foreign_call(s.node.port, "$identity", make_message, tls=s.tls)
        # Then the link is refused: nothing can be sent there
        assert refused.link_refused
        assert refused.condition == "amqp:not-allowed"
        assert refused.description is not None
        assert "$identity on node 'server' is read-only" in refused.description
        assert s.calculator.calls == []
