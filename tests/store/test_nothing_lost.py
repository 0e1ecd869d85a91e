"""Nothing lost, nothing waits forever: bounded waits on a dead peer, the
backlog of durable sends, and routers that keep a message's ids.

Real nodes on 127.0.0.1, mutual TLS and signed messages.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from actorctl import Actor, Address, PeerUnavailable, handler, open_node
from actorctl.cluster import Router
from actorctl.mailbox import ACCEPTED, Envelope, Outcome
from actorctl.store import Store
from tests.support.harness import Logs, Secrets, free_port

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


async def first_of(logs: Logs, *message_types: str) -> None:
    """Wait until a message of one of ``message_types`` was written."""
    async with trio.open_nursery() as nursery:

        async def wait(message_type: str) -> None:
            await logs.wait_for(message_type)
            nursery.cancel_scope.cancel()

        for message_type in message_types:
            nursery.start_soon(wait, message_type)


async def test_a_durable_tell_to_an_actor_its_node_has_not_started_yet_is_delivered(
    secrets: Secrets, logs: Logs
) -> None:
    # (A node's backlog sends what it kept as soon as the node starts again,
    # its own router included: a beat's firing refused then was lost.)
    port = free_port()
    target = Address("127.0.0.1", port, "tally", "amqps")
    tally = Tally()
    async with open_node(
        "sender", host=None, connect_timeout=0.5, **secrets.options("sender")
    ) as node:
        # Given a durable tell to an actor of a node that listens already and
        # has not hosted its actors yet: it waits for a worker thread to look
        # at its keyring (a loaded machine's wait, held here: the test takes
        # every token of trio's thread limiter)
        await node.ref(target).with_options(durable=True).tell("note", 1)
        threads = trio.to_thread.current_default_thread_limiter()
        tokens = [object() for _ in range(int(threads.total_tokens))]
        for token in tokens:
            threads.acquire_on_behalf_of_nowait(token)
        stop = trio.Event()

        async def receiver() -> None:
            async with open_node(
                "receiver", {"tally": tally}, port=port, **secrets.options("receiver")
            ):
                await stop.wait()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(receiver)
            try:
                # When the backlog's link to the actor is answered meanwhile
                with trio.fail_after(WAIT):
                    await first_of(logs, "actorctl:link:held", "actorctl:link:refused")
            finally:
                for token in tokens:
                    threads.release_on_behalf_of(token)
            # Then the message is delivered once the actor runs, not refused for good
            with trio.fail_after(WAIT):
                await tally.arrived.wait()
            assert tally.values == [1]
            assert not logs.of_type("actorctl:backlog:refused")
            with trio.fail_after(WAIT):
                await node.outbox.backlog.wait_empty()
            stop.set()


def _client(secrets: Secrets) -> dict[str, Any]:
    """A node that only sends, and gives up on an unreachable peer after 0.5 s."""
    return {"host": None, "connect_timeout": 0.5, **secrets.options("sender")}


class Worker(Actor):
    """Counts the runs of each message id it takes, and wakes the test at ``expected``."""

    def __init__(self, expected: int = 1) -> None:
        self.runs: dict[str, int] = {}
        self.expected = expected
        self.arrived = trio.Event()

    async def handle_unmatched(
        self, envelope: Envelope
    ) -> tuple[Outcome, tuple[str, Any] | None] | None:
        self.runs[envelope.message_id] = self.runs.get(envelope.message_id, 0) + 1
        if len(self.runs) >= self.expected:
            self.arrived.set()
        return ACCEPTED, None


class HandingOver(Router):
    """A router that hands what it forwards to its node's backlog, as a task pool's does."""

    relays_replies = False
    hands_over = True


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


async def test_a_router_moves_what_waits_for_an_unreachable_instance_to_another(
    secrets: Secrets, logs: Logs
) -> None:
    worker = Worker(expected=20)
    dead = Address("127.0.0.1", free_port(), "work", "amqps")
    async with (
        open_node("receiver", {"work": worker}, **secrets.options("receiver")) as receiver,
        open_node(
            "router",
            {"pool": HandingOver([dead, receiver.address_of("work")])},
            connect_timeout=0.5,
            **secrets.options("router"),
        ) as router,
        open_node("sender", host=None, **secrets.options("sender")) as sender,
    ):
        # Given a router whose first instance is on a node that is not running
        ref = sender.ref(router.address_of("pool"))
        # When it hands over tasks, some of them to that instance
        with trio.fail_after(WAIT):
            async with trio.open_nursery() as nursery:
                for task in range(20):
                    nursery.start_soon(functools.partial(ref.tell, "work", task))
        # Then those are moved to the other instance once the first has been
        # unreachable for the connect timeout: every task runs, once
        with trio.fail_after(WAIT):
            await worker.arrived.wait()
    assert sorted(worker.runs.values()) == [1] * 20
    moved = logs.of_type("actorctl:router:rerouted")
    assert moved
    assert all(str(dead) in m["reason"] and "peer-unavailable" in m["reason"] for m in moved)


async def test_a_restarted_router_takes_back_its_nodes_backlog_and_moves_it(
    secrets: Secrets, tmp_path: Path, logs: Logs
) -> None:
    path = tmp_path / "router" / "store.sqlite"
    dead = Address("127.0.0.1", free_port(), "work", "amqps")
    port = free_port()
    alive = Address("127.0.0.1", port, "work", "amqps")
    sender_options = {"host": None, **secrets.options("sender")}
    # Given a router (durable store) that took tasks while neither instance ran
    async with (
        open_node(
            "router",
            {"pool": HandingOver([dead, alive])},
            store=Store(path, name="router"),
            connect_timeout=60.0,
            **secrets.options("router"),
        ) as router,
        open_node("sender", **sender_options) as sender,
    ):
        ref = sender.ref(router.address_of("pool"))
        with trio.fail_after(WAIT):
            for task in range(6):
                await ref.deliver("work", task)  # settled once the router's node holds it
        assert len(router.outbox.backlog) == 6
    # When its node comes back with only the second instance running
    worker = Worker(expected=6)
    async with (
        open_node("receiver", {"work": worker}, port=port, **secrets.options("receiver")),
        open_node(
            "router",
            {"pool": HandingOver([dead, alive])},
            store=Store(path, name="router"),
            connect_timeout=0.5,
            **secrets.options("router"),
        ),
    ):
        # Then the tasks held for the dead instance move to the live one: all run
        with trio.fail_after(WAIT):
            await worker.arrived.wait()
    assert sorted(worker.runs.values()) == [1] * 6
    # (those held for the live instance may have gone before the router started)
    [adopted] = logs.of_type("actorctl:router:adopted")
    assert 3 <= adopted["messages"] <= 6


async def test_a_store_that_cannot_write_logs_it_and_the_backlog_goes_on_in_memory(
    secrets: Secrets, tmp_path: Path, logs: Logs
) -> None:
    # Given a node whose data directory cannot be made (its parent is a file:
    # refused to root as to anyone)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    store = Store(blocker / "data" / "store.sqlite", name="sender")
    port = free_port()
    tally = Tally(expected=2)
    async with open_node("sender", store=store, **_client(secrets)) as node:
        # Then the failure is logged, naming the path, and the node runs on
        assert not store.durable
        [failed] = logs.of_type("actorctl:store:failed")
        assert str(blocker) in failed["path"]
        # And durable sends are kept in memory until their peer takes them
        ref = node.ref(Address("127.0.0.1", port, "tally", "amqps")).with_options(durable=True)
        with trio.fail_after(WAIT):
            await ref.tell("note", "a")
            await ref.tell("note", "b")
        async with open_node(
            "receiver", {"tally": tally}, port=port, **secrets.options("receiver")
        ):
            with trio.fail_after(WAIT):
                await tally.arrived.wait()
    assert tally.values == ["a", "b"]
