"""Nothing lost, nothing waits forever: bounded waits on a dead peer, the
backlog of durable sends, and routers that keep a message's ids.

Real nodes on 127.0.0.1, mutual TLS and signed messages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from actorctl import Actor, Address, PeerUnavailable, handler, open_node
from actorctl.cluster import Router
from actorctl.mailbox import ACCEPTED, Envelope, Outcome
from tests.harness import Logs, Secrets, free_port

WAIT = 20.0


class Tally(Actor):
    """Counts every run of each message id, and wakes the test at ``expected``."""

    def __init__(self, expected: int = 1) -> None:
        self.runs: dict[str, int] = {}
        self.values: list[Any] = []
        self.expected = expected
        self.arrived = trio.Event()

    @handler
    async def note(self, value: Any) -> None:
        self.values.append(value)
        if len(self.values) >= self.expected:
            self.arrived.set()


@pytest.fixture
def secrets(tmp_path: Path) -> Secrets:
    return Secrets.make(tmp_path, "sender", "receiver", "router")


async def test_a_send_to_an_unreachable_peer_fails_with_peer_unavailable(
    secrets: Secrets, logs: Logs
) -> None:
    # Given a node that sends to a port nothing listens on
    dead = Address("127.0.0.1", free_port(), "tally", "amqps")
    async with open_node(
        "sender", host=None, connect_timeout=0.5, **secrets.options("sender")
    ) as node:
        ref = node.ref(dead)
        # When it tells, asks or delivers there, each fails within the bound
        started = trio.current_time()
        with trio.fail_after(WAIT):
            with pytest.raises(PeerUnavailable, match=rf"{dead.port} within 0.5 s"):
                await ref.tell("note", 1)
            with pytest.raises(PeerUnavailable, match="last error"):
                await ref.ask("note", 1)
            with pytest.raises(PeerUnavailable):
                await ref.deliver("note", 1)
        # Then no wait outlived the connect timeout by much (the peer was already
        # known down for the later ones)
        assert trio.current_time() - started < WAIT
    assert logs.of_type("actorctl:peer:unreachable")


async def test_a_durable_tell_waits_in_the_backlog_until_the_peer_starts(
    secrets: Secrets,
) -> None:
    port = free_port()
    target = Address("127.0.0.1", port, "tally", "amqps")
    tally = Tally(expected=3)
    async with open_node(
        "sender", host=None, connect_timeout=0.5, **secrets.options("sender")
    ) as node:
        # Given durable tells to a node that is not running yet
        ref = node.ref(target).with_options(durable=True)
        with trio.fail_after(WAIT):
            for value in range(3):
                await ref.tell("note", value)  # returns at once: the backlog holds it
        assert len(node.outbox.backlog) == 3
        # When the node starts, they are delivered, oldest first
        async with open_node(
            "receiver", {"tally": tally}, port=port, **secrets.options("receiver")
        ):
            with trio.fail_after(WAIT):
                await tally.arrived.wait()
            assert tally.values == [0, 1, 2]
            with trio.fail_after(WAIT):
                await node.outbox.backlog.wait_empty()  # each settled: out of it


def _client(secrets: Secrets) -> dict[str, Any]:
    """A node that only sends, and gives up on an unreachable peer after 0.5 s."""
    return {"host": None, "connect_timeout": 0.5, **secrets.options("sender")}


class Worker(Actor):
    """Counts the runs of each message id it takes."""

    def __init__(self) -> None:
        self.runs: dict[str, int] = {}

    async def handle_unmatched(
        self, envelope: Envelope
    ) -> tuple[Outcome, tuple[str, Any] | None] | None:
        self.runs[envelope.message_id] = self.runs.get(envelope.message_id, 0) + 1
        return ACCEPTED, None


async def test_a_router_keeps_the_message_id_so_a_resend_runs_once(secrets: Secrets) -> None:
    worker = Worker()
    async with (
        open_node("receiver", {"work": worker}, **secrets.options("receiver")) as receiver,
        open_node(
            "router",
            {"pool": Router([receiver.address_of("work")])},
            **secrets.options("router"),
        ) as router,
        open_node("sender", host=None, **secrets.options("sender")) as sender,
    ):
        pool = router.address_of("pool")
        outbox = sender.outbox
        envelope = Envelope(
            message_id=outbox.new_message_id(),
            to=str(pool),
            subject="work",
            body=[[7], {}],
            creation_time=outbox.now(),
        )
        # When the sender sends the same message twice (as after a reconnect)
        with trio.fail_after(WAIT):
            await outbox.send(pool, envelope, presettled=False, confirm=True)
            again = attrs.evolve(envelope, creation_time=outbox.now())
            await outbox.send(pool, again, presettled=False, confirm=True)
    # Then the worker saw it under its own id, and ran it once
    assert worker.runs == {envelope.message_id: 1}
