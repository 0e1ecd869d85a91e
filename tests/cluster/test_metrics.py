"""A node's /metrics: scraped over real sockets while signed messages flow.

The counters must equal what was sent, the histogram must hold every handled
message, and the exposition must parse with prometheus-client's own parser
and follow Prometheus naming conventions (``lint`` below).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from actorctl import Actor, ConfigError, Node, handler
from actorctl.cluster import INSECURE
from actorctl.cluster._http import http_get
from tests.support.harness import Secrets, node_pair

_NAME = re.compile(r"^actorctl_[a-z0-9_]+$")
_UNITS = ("_seconds", "_bytes", "_messages", "_credit", "_connections", "_links", "_peers")


def lint(text: str) -> dict[str, Any]:
    """Parse an exposition with prometheus-client's parser and check the
    naming rules: the actorctl_ prefix, snake case, counters ending in
    _total, histograms with buckets, a sum and a count, durations in seconds
    (not ms), sizes in bytes. Returns the families by name."""
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families, "nothing exposed"
    for name, family in families.items():
        assert _NAME.match(name), name
        assert family.documentation, f"{name} has no help text"
        assert not re.search(r"_(ms|milliseconds|kb|mb|percent)(_|$)", name), name
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples), name
            assert not name.endswith("_total"), f"{name}: the parser strips _total"
        if family.type == "histogram":
            assert name.endswith("_seconds"), name
            kinds = {s.name.removeprefix(name) for s in family.samples}
            assert kinds <= {"_bucket", "_sum", "_count", "_created"}, (name, kinds)
        if family.type == "gauge":
            assert not name.endswith("_total"), name
    return families


def value(families: dict[str, Any], name: str, **labels: str) -> float:
    """The one sample of ``name`` whose labels include ``labels``."""
    found = [
        s.value
        for f in families.values()
        for s in f.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (name, labels, found)
    return float(found[0])


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


async def scrape(node: Node) -> dict[str, Any]:
    assert node.metrics is not None
    status, body = await http_get(*node.metrics, "/metrics", timeout=5.0)
    assert status == 200
    return lint(body.decode())


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


async def test_a_node_serves_no_metrics_unless_asked_and_refuses_a_bad_address() -> None:
    with trio.fail_after(10):
        async with node_pair([Counted()]) as (server, _):
            assert server.metrics is None
            assert server.metrics_url is None
    with pytest.raises(ConfigError, match="HOST:PORT"):
        Node("n", security=INSECURE, metrics="nowhere")
