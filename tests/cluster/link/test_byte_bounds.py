"""What a node holds for a peer is bounded in bytes, not only in count
(cluster/link/_limits.py, docs/cluster-toml.md): replies queued for a caller
that grants no reply credit, and messages sent to a peer and not yet settled
by it. Real nodes over mutual TLS on 127.0.0.1, and a raw AMQP 1.0 caller
(tests/support/rawpeer.py) for a reply link without credit.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from actorctl import Actor, ConfigError, Node, handler
from actorctl.cluster import INSECURE, Limits, node_records
from actorctl.mailbox import decode
from tests.support.harness import Logs, Secrets, node_pair
from tests.support.rawpeer import raw_peer

BODY = 1000  # characters of each reply
ASKS = 60


class Blob(Actor):
    @handler
    async def blob(self, n: int) -> str:
        return f"{n:04d}" + "x" * (BODY - 4)


@pytest.fixture
def secrets(tmp_path: Path) -> Secrets:
    return Secrets.make(tmp_path, "server", "client", "raw")


async def test_replies_queued_for_a_caller_without_credit_are_bounded_in_bytes(
    secrets: Secrets, logs: Logs
) -> None:
    bound = 20_000
    async with (
        node_pair(
            [Blob()], secrets=secrets, max_queued_replies=1000, max_queued_reply_bytes=bound
        ) as (server, client),
        raw_peer(server.port, secrets.tls["raw"]) as raw,
    ):
        # Given a caller whose reply link grants no credit (and a count bound
        # it never reaches)
        # When it asks 60 times for a reply of about 1 KiB
        replies = await raw.ask_unread(
            "blob", ASKS, identity=secrets.keys["raw"].identity, node=server.node_id
        )
        assert {o.state for o in raw.outcomes.values()} == {"accepted"}
        # Then the node held replies only up to the bound in bytes, and dropped
        # the rest with a log line naming the bound
        dropped = [
            line
            for line in logs.of_type("actorctl:reply:dropped")
            if line["reason"] == "no reply credit"
        ]
        assert dropped, "nothing was dropped: the bound was never reached"
        assert all("max_queued_reply_bytes = 20000" in line["description"] for line in dropped)
        # while a normal ask on another connection is answered
        assert len(await client.ref(server.address_of("blob")).ask("blob", 7)) == BODY
        # and once the caller grants credit, it gets the replies that were kept
        replies.flow(ASKS)
        raw.engine.wake()  # type: ignore[union-attr]
        kept_count = ASKS - len(dropped)
        await raw.wait(lambda: len(raw.messages) == kept_count)
        kept = raw.messages
        held = sum(len(message) for message in kept)
        print(f"kept {kept_count} replies, {held} bytes; dropped {len(dropped)}")
        # (the bound is checked before each reply: the last one kept may pass it)
        assert held - len(kept[-1]) < bound <= held + len(kept[-1])
        bodies = [decode(message).body for message in kept]
        assert [int(body[:4]) for body in bodies] == list(range(kept_count))


class Held(Actor):
    """Takes messages and holds each unsettled until ``release`` is set;
    ``all_seen`` is set once ``count`` were taken."""

    mailbox_capacity = 100

    def __init__(self, release: trio.Event, seen: list[int], count: int) -> None:
        self.release = release
        self.seen = seen
        self.count = count
        self.all_seen = trio.Event()

    @handler
    async def hold(self, n: int, padding: str) -> None:
        self.seen.append(n)
        if len(self.seen) == self.count:
            self.all_seen.set()
        await self.release.wait()


async def test_messages_a_peer_has_not_settled_are_bounded_in_bytes_and_senders_wait(
    secrets: Secrets, logs: Logs
) -> None:
    # Given a peer's actor that settles nothing until told, with room for 100
    # messages (link credit), and a sender whose node holds at most 50 kB
    # unsettled for one peer
    release = trio.Event()
    seen: list[int] = []
    bound = 50_000
    tells = 20
    held = Held(release, seen, tells)
    async with node_pair(
        {"held": held},
        secrets=secrets,
        client_options={"max_unsettled_bytes": bound},
    ) as (server, client):
        ref = client.ref(server.address_of("held"))
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                # When it tells 20 messages of 10 kB each
                for n in range(tells):
                    nursery.start_soon(ref.tell, "hold", n, "p" * 10_000)
                # Then it sends what fits in the bound and the rest wait, with a
                # log line naming the bound
                await logs.wait_for("actorctl:peer:unsettled-full")
                [full] = logs.of_type("actorctl:peer:unsettled-full")
                assert "max_unsettled_bytes = 50000" in full["description"]
                assert full["held"] <= bound < full["held"] + full["size"]
                # and once the peer settles, every one of them goes
                release.set()
            await held.all_seen.wait()
            await server.cells["held"].mailbox.wait_settled()
        stats = server.cells["held"].mailbox.statistics()
    # Then none was lost, and the peer never held more than the bound
    assert sorted(seen) == list(range(tells))
    assert stats.max_depth * 10_000 <= bound, stats
    assert stats.max_depth >= 4, stats  # the bound, not something else, held them back


def test_the_byte_bounds_are_node_limits_and_a_wrong_one_is_named() -> None:
    bounds = Limits(max_queued_reply_bytes=4096, max_unsettled_bytes=1 << 20)
    node = Node("n", security=INSECURE, limits=bounds)
    assert node.limits.max_queued_reply_bytes == 4096
    assert node.limits.max_unsettled_bytes == 1 << 20
    # given flat (as open_node takes them), they land in the node's Limits too
    flat = node_records({"insecure": True, "max_unsettled_bytes": 1 << 21})
    assert Node("n", **flat).limits.max_unsettled_bytes == 1 << 21
    with pytest.raises(ConfigError, match=r"max_unsettled_bytes: expected a whole number above 0"):
        node_records({"insecure": True, "max_unsettled_bytes": 0})
