"""A node's /metrics: scraped over real sockets while signed messages flow.

The counters must equal what was sent, the histogram must hold every handled
message, and the exposition must parse with prometheus-client's own parser
and follow Prometheus naming conventions (``lint`` below).
"""

from __future__ import annotations

import pytest
import trio
from proton import Message

from actorctl import Actor, ConfigError, Node, handler
from actorctl.cluster import INSECURE
from tests.support.harness import Secrets, node_pair, send_raw
from tests.support.metrics import scrape, value


class Counted(Actor):
    name = "counted"

    def __init__(self) -> None:
        self.seen = 0
        self.done = trio.Event()
        self.expect = 0

    @handler
    async def work(self, n: int) -> int:
        self.seen += 1
        if self.seen == self.expect:
            self.done.set()
        return n

    @handler
    async def boom(self) -> None:
        raise ValueError("boom")


@pytest.mark.parametrize("sent", [1, 300])
async def test_a_scrape_counts_every_message_sent_and_times_each(
    secrets: Secrets, sent: int
) -> None:
    # Given a secured node serving /metrics and an actor that counts
    counted = Counted()
    counted.expect = sent + 1  # the asks below, and the one that fails is not "work"
    with trio.fail_after(20):
        async with node_pair([counted], secrets=secrets, metrics="127.0.0.1:0") as (server, c):
            ref = c.ref(server.address_of("counted"))
            # When it is sent `sent` signed tells, one ask, and one failing ask
            for i in range(sent):
                await ref.tell("work", i)
            assert await ref.ask("work", -1) == -1
            await counted.done.wait()
            with pytest.raises(Exception, match="boom"):
                await ref.ask("boom")
            families = await scrape(server)
    # Then the counters equal what was sent, and every handled message was timed
    assert value(families, "actorctl_actor_messages_received_total", actor="counted") == sent + 2
    assert value(families, "actorctl_actor_messages_handled_total", actor="counted") == sent + 1
    assert value(families, "actorctl_actor_messages_failed_total", actor="counted") == 1
    count = value(families, "actorctl_actor_handler_duration_seconds_count", actor="counted")
    assert count == sent + 2
    inf = value(
        families, "actorctl_actor_handler_duration_seconds_bucket", actor="counted", le="+Inf"
    )
    assert inf == count
    assert value(families, "actorctl_actor_mailbox_capacity_messages", actor="counted") > 0
    assert value(families, "actorctl_node_connections") >= 1
    assert value(families, "actorctl_node_received_bytes_total") > 0
    assert value(families, "actorctl_node_sent_bytes_total") > 0
    assert value(families, "actorctl_node_backlog_messages") == 0


async def test_a_refused_message_is_counted_by_its_condition(secrets: Secrets) -> None:
    with trio.fail_after(20):
        async with node_pair([Counted()], secrets=secrets, metrics="127.0.0.1:0") as (server, c):
            ref = c.ref(server.address_of("counted"))
            # When it is asked for a handler it does not have
            with pytest.raises(Exception, match="no handler"):
                await ref.ask("nope")
            families = await scrape(server)
    # Then it is counted as rejected, with the condition it was rejected with
    samples = [
        s
        for s in families["actorctl_actor_messages_refused"].samples
        if s.labels["actor"] == "counted"
    ]
    assert [(s.labels["outcome"], s.value) for s in samples] == [("rejected", 1.0)]
    assert samples[0].labels["condition"]


class Idle(Actor):
    """An actor no message reaches but the one refused."""


async def test_a_refusal_to_an_actor_that_took_no_message_is_its_own(secrets: Secrets) -> None:
    # Given a secured node with two actors that have taken no message yet
    actors = {"first": Idle(), "second": Idle()}
    with trio.fail_after(20):
        async with node_pair(actors, secrets=secrets, metrics="127.0.0.1:0") as (server, c):
            # When an unsigned message to the first is refused before it ran
            msg = Message(id="unsigned-1", subject="work", body=b"[[], {}]", inferred=True)
            msg.content_type = "application/json"
            outcome = await send_raw(c, server.address_of("first"), msg.encode(), "unsigned-1")
            assert outcome.state == "rejected"
            families = await scrape(server)
    # Then the first counts it, and the second, idle all along, counts nothing
    refused = [
        (s.labels["actor"], s.value) for s in families["actorctl_actor_messages_refused"].samples
    ]
    assert refused == [("first", 1.0)]


async def test_a_node_serves_no_metrics_unless_asked_and_refuses_a_bad_address() -> None:
    with trio.fail_after(10):
        async with node_pair([Counted()]) as (server, _):
            assert server.metrics is None
            assert server.metrics_url is None
    with pytest.raises(ConfigError, match="HOST:PORT"):
        Node("n", security=INSECURE, metrics="nowhere")
