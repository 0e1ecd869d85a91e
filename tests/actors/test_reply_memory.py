"""What a node remembers of the messages it answered is bounded in bytes.

The dedup windows keep replies for duplicates within a bound per actor and a
bound per node (the oldest forgotten first); a duplicate of a message whose
reply was forgotten gets a ``ReplyForgotten`` error and does not run again.
The replay cache is bounded in bytes too. The end-to-end test sends real
signed asks over TLS on 127.0.0.1 and reads the node's /metrics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from actorctl import Actor, ConfigError, Envelope, Node, handler
from actorctl.actors import REPLY_FORGOTTEN, ReplyMemory
from actorctl.actors._dedup import Handled, SeenWindow
from actorctl.cluster import INSECURE, load_cluster
from actorctl.mailbox import ACCEPTED, STATUS_ERROR, STATUS_OK, ReplayCache
from actorctl.mailbox._replay import ENTRY_BYTES
from tests.support.harness import Logs, Secrets, node_pair
from tests.support.metrics import scrape, value

KIB = 1024
MIB = 1024 * KIB
REPLY = 500 * KIB
ACTORS = 8
ASKS = 1000


def answered(body: str = "x") -> Handled:
    return Handled(ACCEPTED, (STATUS_OK, body))


def test_an_actor_keeps_its_newest_replies_within_its_bound(logs: Logs) -> None:
    # Given a window whose actor may keep 100 bytes of replies (the node 1,000)
    memory = ReplyMemory(max_bytes=1000, per_actor=100, node="n")
    window = SeenWindow(50, 60.0, clock=lambda: 0.0, memory=memory, name="a")
    # When it answers five messages with 30-byte replies
    for key in "abcde":
        window.start(key)
        window.finish(key, answered(key), 30)
    # Then it keeps the newest three (90 bytes) and forgot the two oldest
    assert window.bytes == memory.bytes == 90
    assert memory.forgotten == 2
    for key in "cde":
        assert window.get(key) == answered(key)
    for key in "ab":
        entry = window.get(key)
        assert entry is not None  # still known: not run again
        assert entry.outcome is ACCEPTED
        assert entry.reply is not None
        assert entry.reply[0] == STATUS_ERROR
        assert entry.reply[1]["type"] == REPLY_FORGOTTEN
        assert "max_kept_reply_bytes_per_actor" in entry.reply[1]["message"]
    [reached] = logs.of_type("actorctl:dedup:bound-reached")
    assert reached["actor"] == "a"
    assert reached["bound"] == "max_kept_reply_bytes_per_actor"


def test_the_node_forgets_its_oldest_reply_whichever_actor_kept_it() -> None:
    # Given two actors whose node may keep 100 bytes of replies in all
    memory = ReplyMemory(max_bytes=100, per_actor=100)
    one = SeenWindow(50, 60.0, clock=lambda: 0.0, memory=memory, name="one")
    two = SeenWindow(50, 60.0, clock=lambda: 0.0, memory=memory, name="two")
    one.finish("1", answered(), 40)
    two.finish("2", answered(), 40)
    # When the second actor keeps another 40 bytes
    two.finish("3", answered(), 40)
    # Then the node's oldest (the first actor's) went, and the totals agree
    assert (one.bytes, two.bytes, memory.bytes) == (0, 80, 80)
    forgotten = one.get("1")
    assert forgotten is not None
    assert forgotten.reply is not None
    assert forgotten.reply[1]["type"] == REPLY_FORGOTTEN
    assert "max_kept_reply_bytes" in forgotten.reply[1]["message"]
    assert two.get("2") == answered()


def test_a_reply_larger_than_a_bound_is_not_kept_and_entries_release_their_bytes() -> None:
    memory = ReplyMemory(max_bytes=1000, per_actor=100)
    window = SeenWindow(2, 60.0, clock=lambda: 0.0, memory=memory)
    # A reply larger than the actor's bound is never kept
    window.finish("big", answered(), 101)
    big = window.get("big")
    assert big is not None
    assert big.reply is not None
    assert big.reply[1]["type"] == REPLY_FORGOTTEN
    assert "larger than max_kept_reply_bytes_per_actor (100 bytes)" in big.reply[1]["message"]
    assert memory.bytes == 0
    # An entry that leaves the window (by count) gives its bytes back
    window.finish("a", answered(), 60)
    window.finish("b", answered(), 10)
    assert memory.bytes == 70
    window.finish("c", answered(), 10)  # "big" and then "a" go
    assert (window.bytes, memory.bytes, len(window)) == (20, 20, 2)
    # A result that costs nothing to keep (None) is kept, uncharged
    window.finish("tell", Handled(ACCEPTED, (STATUS_OK, None)), 0)
    assert window.get("tell") == Handled(ACCEPTED, (STATUS_OK, None))
    assert memory.bytes == 10


def test_the_replay_cache_is_bounded_in_bytes(logs: Logs) -> None:
    # Given a replay cache of 10 entries' worth of bytes for 8-character ids
    cost = 4 + 4 + ENTRY_BYTES
    cache = ReplayCache(max_entries=1000, max_bytes=10 * cost, node="n")
    # When 15 messages are accepted
    for i in range(15):
        assert not cache.check_and_add(("key1", f"m{i:03d}"), until_ms=1e9, now_ms=0.0)
    # Then it holds the newest 10, within its bound, and said so once
    assert cache.bytes == 10 * cost
    assert len(cache) == 10
    assert cache.dropped == 5
    assert cache.check_and_add(("key1", "m014"), until_ms=1e9, now_ms=0.0)  # kept: a replay
    assert not cache.check_and_add(("key1", "m000"), until_ms=1e9, now_ms=0.0)  # dropped
    assert len(logs.of_type("actorctl:replay:bound-reached")) == 1


def test_the_bounds_are_node_limits_in_cluster_toml(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(
        """\
[cluster]
insecure = true
[[node]]
name = "n1"
listen = "127.0.0.1:5701"
[node.limits]
max_kept_reply_bytes = 1048576
max_kept_reply_bytes_per_actor = 65536
max_replay_bytes = 2097152
"""
    )
    node = Node("n1", security=INSECURE, limits=load_cluster(path).node("n1").bounds)
    assert (node.kept_replies.max_bytes, node.kept_replies.per_actor) == (1 << 20, 1 << 16)
    assert node.limits.max_replay_bytes == 2 << 20
    path.write_text(path.read_text().replace("1048576", '"64 MiB"'))
    with pytest.raises(
        ConfigError,
        match=r"node\[0\]\.limits\.max_kept_reply_bytes.*a whole number above 0, got '64 MiB'",
    ):
        load_cluster(path)
    path.write_text(
        path.read_text().replace('max_kept_reply_bytes = "64 MiB"', "max_kept_replies = 1")
    )
    with pytest.raises(ConfigError, match=r"did you mean 'max_kept_reply_bytes'\?"):
        load_cluster(path)


class Big(Actor):
    """Answers every ask with 500 KiB, counting its runs."""

    def __init__(self, runs: list[str]) -> None:
        self.runs = runs

    @handler
    async def fetch(self, tag: str) -> str:
        self.runs.append(tag)
        return tag + "x" * (REPLY - len(tag))


def rss() -> int:
    """This process's resident set, in bytes (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * KIB
    raise AssertionError("no VmRSS in /proc/self/status")


async def test_a_thousand_large_replies_stay_within_the_node_bound(
    secrets: Secrets, logs: Logs, record_property: Any
) -> None:
    # Given a secured node with the default bounds (64 MiB a node, 16 MiB an
    # actor) hosting 8 actors that answer with 500 KiB each
    runs: list[str] = []
    actors = {f"big-{n}": Big(runs) for n in range(ACTORS)}
    with trio.fail_after(240):
        async with node_pair(actors, secrets=secrets, metrics="127.0.0.1:0") as (server, client):
            before = rss()

            def ask(n: int, i: int) -> Envelope:
                address = server.address_of(f"big-{n}")
                return Envelope(
                    message_id=f"ask-{n}-{i}",
                    to=str(address),
                    subject="fetch",
                    body=[[f"{n}-{i}"], {}],
                    creation_time=client.now(),  # a copy is signed anew (not a replay)
                    reply_to=client.outbox.reply_address(address),
                    correlation_id=f"ask-{n}-{i}",
                )

            async def asker(n: int) -> None:
                address = server.address_of(f"big-{n}")
                for i in range(ASKS // ACTORS):
                    reply = await client.outbox.request(address, ask(n, i), 30.0)
                    assert len(reply.body) == REPLY

            # When 1,000 signed asks are answered, 125 to each actor
            async with trio.open_nursery() as nursery:
                for n in range(ACTORS):
                    nursery.start_soon(asker, n)
            after = rss()
            record_property("rss_growth_bytes", after - before)
            families = await scrape(server)
            kept = value(families, "actorctl_node_kept_reply_bytes")
            bound = value(families, "actorctl_node_kept_reply_max_bytes")
            # Then the bytes its windows keep stay within the node's bound
            assert bound == 64 * MIB
            assert 0 < kept <= bound
            assert kept == server.kept_replies.bytes
            per_actor = [server.cells[name].kept_reply_bytes for name in actors]
            assert sum(per_actor) == kept
            assert max(per_actor) <= 16 * MIB
            assert value(families, "actorctl_node_replies_forgotten_total") > 0
            assert len(runs) == ASKS
            # And a copy of the first ask (its reply forgotten) gets a
            # ReplyForgotten error without running the handler again
            first = await client.outbox.request(server.address_of("big-0"), ask(0, 0), 30.0)
            assert first.headers["status"] == STATUS_ERROR
            assert first.body["type"] == REPLY_FORGOTTEN
            # While a copy of the last one still gets its reply, not run again
            last = await client.outbox.request(
                server.address_of("big-7"), ask(7, ASKS // ACTORS - 1), 30.0
            )
            assert last.headers["status"] == STATUS_OK
            assert last.body.startswith("7-124")
            assert len(runs) == ASKS  # neither copy ran
            families = await scrape(server)
            assert value(families, "actorctl_node_replies_forgotten_answered_total") == 1
            assert value(families, "actorctl_actor_messages_redelivered_total", actor="big-0") == 1
    # (An actor's own bound is reached only if the asks to it ran ahead of the others.)
    reached = logs.of_type("actorctl:dedup:bound-reached")
    assert "max_kept_reply_bytes" in {r["bound"] for r in reached}
