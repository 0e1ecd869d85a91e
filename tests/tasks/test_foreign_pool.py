"""A caller that sends tasks through a pool's router, knowing only docs/protocol.md:
what it is told, and how (§9, §14.1, §14.4; docs/guarantees.md, "Settlement").

A services node (the pool's router, with its backlog in a durable store) and a
worker node run in-process, with mutual TLS and signed messages, on real sockets
on 127.0.0.1. The caller is the foreign client of tests/support/foreign.py (proton,
cryptography and the standard library, written from the doc): it signs its task
commands with a key the cluster trusts, connects to the services node only, so
the worker's documents reach it through ``_relay`` (§14.4), and checks their
signatures as §8.1 says. The doc says: the router settles a task ``accepted``
once its backlog holds it, whatever the worker then says; a worker's refusal is
logged on the router's node and reaches the caller as the ``FAILURE`` document;
the router itself refuses only a body that is not ``[args, kwargs]``.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
from proton import Message

from actorctl import Node
from actorctl.cluster import load_cluster
from actorctl.ops._foreman import ensure_dev_secrets
from tests.apps.pool_app import add
from tests.support.foreign import (
    CallResult,
    ClientTls,
    Identity,
    foreign_call,
    json_command,
    reply_signature_holds,
)
from tests.support.harness import Logs, free_port
from tests.support.in_process import in_process

WAIT = 20.0  # seconds a refusal may take to reach the router's log on a loaded machine


@dataclass
class Pool:
    services: Node
    tls: ClientTls  # the cluster's "cli" certificate: a client of the cluster (§11.10)
    identity: Identity  # the "cli" key, which the cluster trusts


@asynccontextmanager
async def pool_cluster(tmp_path: Path) -> AsyncIterator[Pool]:
    """A services node and one worker node of pool ``celery``, in-process."""
    ports = [free_port() for _ in range(2)]
    path = tmp_path / "cluster.toml"
    path.write_text(
        '[cluster]\nname = "foreign-pool"\ndev = true\n'
        f'[[node]]\nname = "services"\nlisten = "127.0.0.1:{ports[0]}"\n'
        'actors = "tests.apps.pool_app:app"\nservices = true\n'
        f'[[node]]\nname = "w1"\nlisten = "127.0.0.1:{ports[1]}"\n'
        'actors = "tests.apps.pool_app:app"\npools = ["celery"]\n'
    )
    config = load_cluster(path)
    ensure_dev_secrets(config)  # the caller's certificate and key, below
    tls = ClientTls(
        ca=str(config.certs / "ca.pem"),
        cert=str(config.certs / "cli.pem"),
        key=str(config.certs / "cli.key"),
    )
    identity = Identity.load(str(config.keys / "cli.key"))
    async with in_process(path, "w1", "services") as cluster:
        yield Pool(cluster.nodes["services"], tls, identity)


async def send_task(pool: Pool, subject: str, body: bytes) -> tuple[CallResult, str]:
    """Send one task command (§14.2) to the pool's address on the services node,
    signed ed25519, with the reply address the node assigned as its reply-to;
    returns what came back and the task id."""
    task_id = uuid.uuid4().hex

    def make(reply_to: str, node: str) -> Message:
        command = json_command(
            node,
            "celery",
            subject,
            [],
            {},
            headers={"task_id": task_id, "pool": "celery"},
            correlation_id=task_id,
        )
        command = dataclasses.replace(command, body=body, reply_to=reply_to)
        return command.message(pool.identity.signature_properties(command.canonical(), node))

    result = await foreign_call(pool.services.port, "celery", make, tls=pool.tls)
    assert result.failure is None, result.failure
    return result, task_id


def _document(pool: Pool, result: CallResult, task_id: str) -> tuple[str, Any]:
    """The one result document that came back: its state and body, after
    checking that it is for this task and signed as §8.1 says."""
    reply = result.reply
    assert reply is not None, result.events
    assert reply.message is not None
    assert result.reply_address is not None
    props = reply.application_properties
    assert props["kind"] == "document"
    assert reply.correlation_id == task_id  # §14.4: the id the caller waits on
    assert props["task_id"] == task_id
    assert reply.presettled  # §14.4: pre-settled, as a reply is
    # §14.4: it comes from the node the caller is connected to (the services
    # node's _relay), signed with that node's key: no session was opened.
    assert pool.services.identity is not None
    services_key = pool.services.identity.public.raw
    assert reply_signature_holds(reply.message, result.reply_address, node_public_raw=services_key)
    return props["state"], reply.body


BAD_CALLS = {
    "unknown task": ("pool.nope", b"[[2,3],{}]", "UnknownTask", "actorctl:unknown-task"),
    "bad arguments": (add.name, b'[[2],{"c":1}]', "BadArguments", "actorctl:bad-arguments"),
}


@pytest.mark.parametrize("case", BAD_CALLS)
async def test_a_refused_task_is_accepted_by_the_router_and_fails_in_its_document(
    tmp_path: Path, logs: Logs, case: str
) -> None:
    subject, body, error_type, condition = BAD_CALLS[case]
    async with pool_cluster(tmp_path) as pool:
        result, task_id = await send_task(pool, subject, body)
        # §14.1 and §9: the router settled it once its backlog held it ...
        assert (result.outcome, result.condition) == ("accepted", None)
        # ... and the worker's refusal is logged on the router's node, not sent on.
        with trio.fail_after(WAIT):
            await logs.wait_for("actorctl:backlog:refused")
    state, error = _document(pool, result, task_id)
    assert state == "FAILURE"
    assert error["type"] == error_type, error
    [refused] = logs.of_type("actorctl:backlog:refused")
    assert refused["node"] == "services"
    assert refused["condition"] == condition
    assert refused["message_id"] == result.message_id
    assert [m for m in logs.of_type("actorctl:router:rerouted")] == []  # not sent elsewhere


async def test_a_task_through_the_router_is_accepted_and_succeeds_in_its_document(
    tmp_path: Path, logs: Logs
) -> None:
    async with pool_cluster(tmp_path) as pool:
        result, task_id = await send_task(pool, add.name, b"[[2,3],{}]")
    assert (result.outcome, result.condition) == ("accepted", None)
    assert _document(pool, result, task_id) == ("SUCCESS", 5)
    assert logs.of_type("actorctl:backlog:refused") == []


async def test_a_body_that_is_not_args_and_kwargs_is_the_routers_own_refusal(
    tmp_path: Path, logs: Logs
) -> None:
    async with pool_cluster(tmp_path) as pool:
        result, _ = await send_task(pool, add.name, json.dumps({"a": 2}).encode())
    # §14.1: the one refusal the router makes itself, as the outcome; no worker saw it.
    assert (result.outcome, result.condition) == ("rejected", "actorctl:decode-error")
    assert result.reply is None
    assert logs.of_type("actorctl:backlog:refused") == []
