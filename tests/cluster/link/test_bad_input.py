"""Bad input: the node names what was wrong, drops only what is broken, keeps serving."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import trio
from proton import Message

from actorctl import Actor, Rejected, RemoteError, handler, open_node
from actorctl.mailbox import DECODE_ERROR
from tests.apps.actors import Calculator
from tests.support.harness import Logs, Secrets, free_port, node_pair, send_raw


async def _served(node_port: int, client_ref) -> None:  # type: ignore[no-untyped-def]
    with trio.fail_after(10):
        assert await client_ref.ask("add", 20, 22) == 42


async def test_malformed_frames_drop_only_that_connection(logs: Logs) -> None:
    async with node_pair([Calculator()]) as (server, client):
        ref = client.ref(server.address_of("calculator"))
        await _served(server.port, ref)
        # Given a peer that speaks garbage
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        await stream.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 4)
        # Then the node answers with a protocol error and closes that connection
        with trio.fail_after(10):
            received = b""
            while chunk := await stream.receive_some(4096):
                received += chunk
        await stream.aclose()
        assert received.startswith(b"AMQP")  # the AMQP header proton answers with
        assert logs.of_type("actorctl:connection:protocol-error")
        # And every other peer is still served
        await _served(server.port, ref)


async def test_a_body_that_is_not_json_is_rejected_naming_the_message(logs: Logs) -> None:
    async with node_pair([Calculator()]) as (server, client):
        address = server.address_of("calculator")
        msg = Message(id="bad-json-1", subject="add", body=b"[[1, 2], {", inferred=True)
        msg.content_type = "application/json"
        outcome = await send_raw(client, address, msg.encode(), str(msg.id))
        assert outcome.state == "rejected"
        assert outcome.condition == "actorctl:decode-error"
        assert "bad-json-1" in (outcome.description or "")
        assert "not valid UTF-8 JSON" in (outcome.description or "")
        await _served(server.port, client.ref(address))


async def test_a_pickled_body_is_refused_outright() -> None:
    async with node_pair([Calculator()]) as (server, client):
        address = server.address_of("calculator")
        msg = Message(id="pickle-1", subject="add", body=b"\x80\x04K\x01.", inferred=True)
        msg.content_type = "application/x-python-serialize"
        outcome = await send_raw(client, address, msg.encode(), str(msg.id))
        assert outcome.state == "rejected"
        assert "refused" in (outcome.description or "")


async def test_a_body_that_is_not_args_and_kwargs_is_rejected() -> None:
    async with node_pair([Calculator()]) as (server, client):
        address = server.address_of("calculator")
        msg = Message(
            id="shape-1", subject="add", body=json.dumps({"a": 1}).encode(), inferred=True
        )
        outcome = await send_raw(client, address, msg.encode(), str(msg.id))
        assert outcome.condition == "actorctl:decode-error"
        assert "[args, kwargs]" in (outcome.description or "")


class Gate(Actor):
    def __init__(self) -> None:
        self.entered = trio.Event()
        self.release = trio.Event()
        self.finished = 0

    @handler
    async def wait(self) -> str:
        self.entered.set()
        await self.release.wait()
        self.finished += 1
        return "done"

    @handler
    async def ping(self) -> str:
        return "pong"


async def test_a_peer_that_disappears_mid_delivery_does_not_disturb_the_node() -> None:
    gate = Gate()
    async with open_node("server", [gate], insecure=True) as server:
        # Given a peer whose request is being handled
        async with open_node("client", host=None, insecure=True) as client:
            ref = client.ref(server.address_of("gate"))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ref.ask, "wait")
                with trio.fail_after(10):
                    await gate.entered.wait()
                # When the peer vanishes (its node is cancelled, sockets torn down)
                nursery.cancel_scope.cancel()
            client.stop(grace=0)
        # Then the handler still finishes, its settlement goes nowhere, and the node serves others
        gate.release.set()
        async with open_node("client2", host=None, insecure=True) as other:
            with trio.fail_after(10):
                assert await other.ref(server.address_of("gate")).ask("ping") == "pong"
        assert gate.finished == 1


async def test_a_sender_reconnects_when_the_peer_comes_back_and_resends_what_was_unsettled(
    logs: Logs,
) -> None:
    port = free_port()
    first = Gate()
    async with open_node("client", host=None, insecure=True) as client:
        ref = client.ref(f"amqp://127.0.0.1:{port}/gate")
        async with trio.open_nursery() as nursery:
            # Given a delivery in flight to a node that then dies before settling it
            async with open_node("server", [first], port=port, grace=0, insecure=True):
                nursery.start_soon(ref.deliver, "wait")
                with trio.fail_after(10):
                    await first.entered.wait()
                # (a grace of 0 cancels the handler at the stop: it is never settled)
            # When a node comes back on the same address
            second = Gate()
            second.release.set()
            async with open_node("server", [second], port=port, insecure=True):
                # Then the sender reconnects, and the unsettled delivery arrives again
                with trio.fail_after(20):
                    await second.entered.wait()
                    assert await ref.ask("ping") == "pong"
    assert first.finished == 0
    assert second.finished == 1
    assert logs.of_type("actorctl:peer:reconnected") or logs.of_type("actorctl:peer:resending")


async def test_rejections_name_the_message_id_in_the_logs(logs: Logs) -> None:
    async with node_pair([Calculator()]) as (server, client):
        with trio.fail_after(10), pytest.raises(Rejected) as caught:
            await client.ref(server.address_of("calculator")).deliver("nope")
    [line] = [
        m for m in logs.of_type("actorctl:delivery:rejected") if m.get("actor") == "calculator"
    ]
    assert line["message_id"] == caught.value.message_id
    assert line["condition"] == "actorctl:unknown-handler"


async def test_a_result_that_is_not_json_reaches_the_caller_as_an_error() -> None:
    from tests.apps.actors import Odd

    async with node_pair([Odd()]) as (server, client):
        with trio.fail_after(10), pytest.raises(RemoteError) as caught:
            await client.ref(server.address_of("odd")).ask("nan")
    assert caught.value.type_name == "WireFormatError"
    assert "NaN" in caught.value.message or "JSON" in caught.value.message


async def test_binary_ids_and_documents_are_refused_at_the_inbox() -> None:
    async with node_pair([Calculator()]) as (server, client):
        address = server.address_of("calculator")
        binary = Message(id=b"\x01\x02", subject="add", body=b"[[1, 2], {}]", inferred=True)
        outcome = await send_raw(client, address, binary.encode(), str(binary.id))
        assert outcome.condition == "actorctl:decode-error"
        assert "message-id is binary" in (outcome.description or "")
        document = Message(id="doc-1", subject="add", body=b"3", inferred=True)
        document.properties = {"kind": "document", "status": "ok"}
        outcome = await send_raw(client, address, document.encode(), str(document.id))
        assert outcome.condition == "actorctl:bad-kind"
        await _served(server.port, client.ref(address))


async def test_an_event_is_handled_but_never_answered(logs: Logs) -> None:
    calculator = Calculator()
    async with node_pair([calculator]) as (server, client):
        address = server.address_of("calculator")
        event = Message(id="ev-1", subject="remember", body=b'[["seen"], {}]', inferred=True)
        event.reply_to = "$reply/nobody"
        event.properties = {"kind": "event"}
        outcome = await send_raw(client, address, event.encode(), str(event.id))
        assert outcome.state == "accepted"
    assert calculator.told == ["seen"]
    assert not logs.of_type("actorctl:reply:dropped")


async def test_a_peer_that_never_opens_the_connection_is_dropped(logs: Logs) -> None:
    # Given a node with a short handshake timeout, and a client that connects and says nothing
    async with open_node("server", [Calculator()], insecure=True, handshake_timeout=0.5) as server:
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        # Then the node hangs up on it
        with trio.fail_after(10):
            while await stream.receive_some(4096):
                pass
        await stream.aclose()
    [line] = logs.of_type("actorctl:connection:no-open")
    assert line["waited"] == 0.5


def _nested_lists(depth: int, message_id: str) -> bytes:
    """A message whose body nests ``depth`` lists (9 bytes a level): what a
    peer sends to make a recursive reader run out of stack."""
    props = b"\xa1" + bytes([len(message_id)]) + message_id.encode() + b"\x40\x40\xa1\x03add"
    props += b"\x40" * 6
    properties = b"\x00\x53\x73\xd0" + struct.pack(">II", len(props) + 4, 10) + props
    inner = b"\x40"
    for _ in range(depth):
        inner = b"\xd0" + struct.pack(">II", len(inner) + 4, 1) + inner
    return properties + b"\x00\x53\x77" + inner  # an amqp-value section


@pytest.mark.parametrize("secured", [False, True], ids=["insecure", "secured"])
async def test_lists_nested_past_the_readers_stack_are_rejected_and_the_node_serves_on(
    secured: bool, tmp_path: Path
) -> None:
    secrets = Secrets.make(tmp_path, "server", "client") if secured else None
    async with node_pair([Calculator()], secrets=secrets) as (server, client):
        address = server.address_of("calculator")
        # Given a message whose lists nest 5,000 deep (45 KB)
        data = _nested_lists(5000, "deep-1")
        # When a peer sends it
        outcome = await send_raw(client, address, data, "deep-1")
        # Then it is rejected as undecodable, saying why, and the node serves on
        assert outcome.state == "rejected"
        assert outcome.condition == DECODE_ERROR
        assert "nest too deep" in (outcome.description or "")
        await _served(server.port, client.ref(address))
