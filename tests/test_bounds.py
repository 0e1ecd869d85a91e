"""Nothing starved: fair credit and resource bounds against hostile and careless peers.

Each peer below is real: a raw AMQP 1.0 client (tests/rawpeer.py) over mutual
TLS with a certificate from the cluster CA, or plain TCP sockets, against a
node on 127.0.0.1; and beside it an ordinary client node whose ask must still
be answered.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import trio

from actorctl import Actor, Envelope, handler, open_node
from actorctl.mailbox import encode, sign_ed25519

from .harness import Logs, Secrets, node_pair
from .rawpeer import raw_peer

CAPACITY = 10


class Small(Actor):
    mailbox_capacity = CAPACITY

    @handler
    async def ping(self, who: str) -> str:
        return f"pong {who}"


@pytest.fixture
def secrets(tmp_path: Path) -> Secrets:
    return Secrets.make(tmp_path, "server", "client", "raw")


# -- fair credit ----------------------------------------------------------------------


async def test_an_idle_client_ignoring_drain_does_not_starve_a_second_caller(
    secrets: Secrets, logs: Logs
) -> None:
    deadline = 1.0
    async with node_pair([Small()], secrets=secrets, credit_deadline=deadline) as (server, client):
        address = server.address_of("small")
        async with raw_peer(server.port, secrets.tls["raw"]) as idle:
            # Given a client that holds all of the actor's credit and never uses it
            hog = idle.sender("small")
            await idle.wait(lambda: hog.credit == CAPACITY)
            # When a second caller asks
            started = trio.current_time()
            with trio.fail_after(5):
                answer = await client.ref(address).with_options(timeout=5).ask("ping", "b")
            elapsed = trio.current_time() - started
            # Then it is answered within the drain deadline (and its connection set-up)
            assert answer == "pong b"
            assert elapsed < deadline + 0.5, elapsed
            # because the idle link was drained, ignored it, and lost its credit
            assert idle.links[hog.name].drain_seen
            reclaimed = logs.of_type("actorctl:credit:reclaimed")
            assert reclaimed and reclaimed[0]["actor"] == "small"
            assert reclaimed[0]["credit"] == CAPACITY
            await idle.wait(lambda: hog.credit <= 1)
            # and the second caller goes on being served while the idle one stays
            for i in range(3 * CAPACITY):
                assert await client.ref(address).ask("ping", f"b{i}") == f"pong b{i}"
            stats = server.statistics()["small"]
            assert stats.links == 2
            assert stats.max_depth <= CAPACITY


# -- message size -----------------------------------------------------------------------


async def test_an_oversized_message_is_refused_before_it_is_buffered_whole(
    secrets: Secrets, logs: Logs
) -> None:
    limit = 1 << 20
    async with node_pair([Small()], secrets=secrets) as (server, client):
        address = server.address_of("small")
        async with raw_peer(server.port, secrets.tls["raw"]) as raw:
            # Given a link to the actor, which announces the node's size limit
            link = raw.sender("small")
            await raw.wait(lambda: link.credit > 0)
            assert raw.links[link.name].max_message_size == limit
            # When a client sends a message four times that size
            raw.send(link, b"big", b"\x00" * (4 * limit))
            await raw.wait(lambda: b"big" in raw.outcomes)
            # Then it is rejected with the AMQP condition, naming the limit
            outcome = raw.outcomes[b"big"]
            assert outcome.state == "rejected"
            assert outcome.condition == "amqp:link:message-size-exceeded"
            assert str(limit) in (outcome.description or "")
            # as soon as the limit was passed, not once the whole message was in
            (refusal,) = [
                m
                for m in logs.of_type("actorctl:delivery:rejected")
                if m["condition"] == "amqp:link:message-size-exceeded"
            ]
            assert limit < refusal["received"] < limit + 256 * 1024
            # and a normal ask on another connection is answered meanwhile
            assert await client.ref(address).ask("ping", "b") == "pong b"
            # as is one more message on the same link, and the connection lives on
            raw.send(link, b"small", b"\x00" * 100)
            await raw.wait(lambda: b"small" in raw.outcomes)
            assert raw.outcomes[b"small"].condition != "amqp:link:message-size-exceeded"
            assert not raw.links[link.name].closed


# -- links per connection -----------------------------------------------------------------


async def test_links_beyond_the_cap_on_one_connection_are_refused(
    secrets: Secrets, logs: Logs
) -> None:
    cap = 1000
    async with node_pair([Small()], secrets=secrets) as (server, client):
        async with raw_peer(server.port, secrets.tls["raw"]) as raw:
            # Given a client that attaches 2,000 links on one connection
            links = [raw.sender("small") for _ in range(2 * cap)]
            states = [raw.links[link.name] for link in links]
            with trio.fail_after(30):
                await raw.wait(lambda: all(s.opened for s in states), timeout=30)
                # Then the first 1,000 are attached and the rest refused, naming the cap
                await raw.wait(lambda: sum(s.closed for s in states) >= cap, timeout=30)
            assert not any(s.closed for s in states[:cap])
            assert all(s.closed for s in states[cap:])
            assert {s.condition for s in states[cap:]} == {"amqp:resource-limit-exceeded"}
            assert "max_links_per_connection" in (states[-1].description or "")
            assert len(logs.of_type("actorctl:link:refused")) == cap
            # and the node still answers, on that connection and on others
            assert raw.closed_condition is None
            ask = client.ref(server.address_of("small")).with_options(timeout=5)
            assert await ask.ask("ping", "b") == "pong b"
