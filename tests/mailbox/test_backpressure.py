"""A bounded mailbox is the link credit: a fast sender is paced by a slow actor."""

from __future__ import annotations

import trio
import trio.lowlevel

from actorctl import Actor, Node, handler, open_node
from tests.apps.actors import SMALL_CAPACITY as CAPACITY
from tests.apps.actors import Small
from tests.support.harness import node_pair

MESSAGES = 3000


class Slow(Actor):
    mailbox_capacity = CAPACITY

    def __init__(self) -> None:
        self.handled = 0
        self.sent = 0  # set by the test as each tell returns
        self.max_ahead = 0
        self.max_held = 0
        self.node: Node | None = None
        self.done = trio.Event()

    @handler
    async def work(self, i: int) -> None:
        for _ in range(3):
            await trio.lowlevel.checkpoint()  # slower than the sender
        self.handled += 1
        self.max_ahead = max(self.max_ahead, self.sent - self.handled)
        assert self.node is not None
        stats = self.node.statistics()["slow"]
        self.max_held = max(self.max_held, stats.depth + stats.credit)
        if self.handled == MESSAGES:
            self.done.set()


async def test_a_fast_sender_is_paced_and_the_receiver_holds_at_most_its_capacity() -> None:
    # Given an actor with a mailbox of 10 that is slower than its sender
    slow = Slow()
    async with node_pair([slow]) as (server, client):
        slow.node = server
        ref = client.ref(server.address_of("slow"))
        # When a few thousand messages are told as fast as the sender can
        with trio.fail_after(60):
            for i in range(MESSAGES):
                await ref.tell("work", i)
                slow.sent += 1
            await slow.done.wait()
        stats = server.statistics()["slow"]
    # Then every message was handled, once
    assert slow.handled == MESSAGES
    assert stats.received == MESSAGES
    # and the receiver never held more than its capacity (queued + credit granted)
    assert stats.max_depth <= CAPACITY
    assert slow.max_held <= CAPACITY
    # and the sender was never more than the mailbox (plus the message in hand) ahead
    assert slow.max_ahead <= CAPACITY + 1


async def test_an_idle_link_holding_all_the_credit_does_not_starve_a_second_sender() -> None:
    async with (
        node_pair([Small()], names=("server", "a")) as (server, a),
        open_node("b", host=None, insecure=True) as b,
    ):
        address = server.address_of("small")
        with trio.fail_after(10):
            # Given a first sender whose link got the whole window and then sits idle
            assert await a.ref(address).ask("ping", "a") == "pong a"
            assert server.statistics()["small"].credit >= CAPACITY - 1  # (nearly) all of it
            # When a second sender attaches to the same actor
            # Then the idle link's credit is reclaimed, and the second is served
            assert await b.ref(address).with_options(timeout=5).ask("ping", "b") == "pong b"
            # and the first still is, too
            assert await a.ref(address).ask("ping", "a") == "pong a"
            # and both take turns at the one slot
            async with trio.open_nursery() as nursery:
                for i in range(20):
                    nursery.start_soon(a.ref(address).ask, "ping", f"a{i}")
                    nursery.start_soon(b.ref(address).ask, "ping", f"b{i}")
        stats = server.statistics()["small"]
        assert stats.max_depth <= CAPACITY
        assert stats.received == 43
