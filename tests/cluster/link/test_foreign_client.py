"""A client in "another language" calls an actor, knowing only docs/protocol.md.

The client is written with plain python-qpid-proton and imports nothing from
actorctl: its transport (one call in a worker thread with its own proton
Container, every wait bounded by a Container timer) is tests/support/foreign.py, shared
with tests/cluster/link/test_foreign_signed.py, and the command it sends is ``json_command``
below. It stands for a client written in any language from the wire
specification alone. Only the tests at the bottom of this module use actorctl,
to host the actor it calls.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from proton import Message

from tests.support.foreign import foreign_call, replying_to

# =============================================================================
# The foreign client's command.
#
# It uses ONLY python-qpid-proton and what docs/protocol.md specifies: no
# actorctl import, no actorctl helper, no knowledge of actorctl's internals.
# =============================================================================


def json_command(handler: str, args: list[Any], kwargs: dict[str, Any], *, to: str) -> Message:
    """A command as protocol.md lays it out, with a JSON body in a data section."""
    now = time.time()
    return Message(
        id=f"foreign-{uuid.uuid4()}",
        address=to,
        subject=handler,
        content_type="application/json",
        creation_time=now,
        expiry_time=now + 30.0,
        properties={"kind": "command", "lang": "proton-python"},
        body=json.dumps([args, kwargs]).encode("utf-8"),
        inferred=True,  # bytes as a data section, not an amqp-value holding binary
    )


# =============================================================================
# The tests: they host the actor with actorctl and run the foreign client.
# =============================================================================

from actorctl import Actor, handler, open_node  # noqa: E402


class Calculator(Actor):
    @handler
    async def add(self, a: int, b: int) -> int:
        return a + b


async def test_a_foreign_client_calls_a_handler_and_gets_the_reply() -> None:
    async with open_node("server", [Calculator()], insecure=True) as node:
        message = json_command("add", [2, 3], {}, to=f"amqp://127.0.0.1:{node.port}/calculator")
        result = await foreign_call(node.port, "calculator", replying_to(message))

    assert result.failure is None, result.failure
    assert result.reply_address is not None
    assert result.reply_address.startswith("$reply/")
    assert result.outcome == "accepted"
    reply = result.reply
    assert reply is not None
    assert reply.body == 5
    assert reply.application_properties["kind"] == "document"
    assert reply.application_properties["status"] == "ok"
    assert reply.correlation_id == result.message_id  # the request carried none
    assert reply.subject == "add"
    assert reply.content_type == "application/json"
    assert reply.presettled


async def test_a_foreign_client_calling_an_unknown_handler_is_rejected() -> None:
    async with open_node("server", [Calculator()], insecure=True) as node:
        message = json_command("divide", [1, 2], {}, to=f"amqp://127.0.0.1:{node.port}/calculator")
        result = await foreign_call(node.port, "calculator", replying_to(message))

    assert result.failure is None, result.failure
    assert result.outcome == "rejected"
    assert result.condition == "actorctl:unknown-handler"
    assert result.description is not None
    assert "'divide'" in result.description
    assert result.reply is None  # a rejected command gets no reply document


async def test_a_foreign_client_may_send_an_amqp_value_list_body() -> None:
    async with open_node("server", [Calculator()], insecure=True) as node:
        url = f"amqp://127.0.0.1:{node.port}/calculator"
        message = Message(
            id=f"foreign-{uuid.uuid4()}",
            address=url,
            subject="add",
            correlation_id="my-own-correlation-id",
            creation_time=time.time(),
            properties={"kind": "command", "lang": "proton-python"},
            body=[[], {"a": 40, "b": 2}],  # an amqp-value section: list of list and map
        )
        # The full actor URL as the link target is accepted too.
        result = await foreign_call(node.port, url, replying_to(message))

    assert result.failure is None, result.failure
    assert result.outcome == "accepted"
    reply = result.reply
    assert reply is not None
    assert reply.body == 42
    assert reply.application_properties["status"] == "ok"
    assert reply.application_properties["kind"] == "document"
    assert reply.correlation_id == "my-own-correlation-id"  # the request's own, echoed


async def test_a_foreign_client_linking_to_an_unknown_actor_is_refused() -> None:
    async with open_node("server", [Calculator()], insecure=True) as node:
        message = json_command("add", [1, 2], {}, to=f"amqp://127.0.0.1:{node.port}/nobody")
        result = await foreign_call(node.port, "nobody", replying_to(message))

    assert result.failure is None, result.failure
    assert result.link_refused
    assert result.condition == "amqp:not-found"
    assert result.description is not None
    assert "'nobody'" in result.description
    assert result.outcome is None  # nothing was sent: the link never got credit
