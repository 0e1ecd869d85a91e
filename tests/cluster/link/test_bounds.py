"""Nothing starved: fair credit and resource bounds against hostile and careless peers.

Each peer below is real: a raw AMQP 1.0 client (tests/support/rawpeer.py) over mutual
TLS with a certificate from the cluster CA, or plain TCP sockets, against a
node on 127.0.0.1; and beside it an ordinary client node whose ask must still
be answered.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from proton import Link

from actorctl import Actor, Address, ConfigError, Node, handler, open_node
from actorctl.cluster import INSECURE, load_cluster
from actorctl.cluster.link import _limits
from actorctl.cluster.link._credit import InboxCredit
from actorctl.cluster.link._raw import lib
from actorctl.cluster.link.peer import _peer
from actorctl.mailbox import decode
from tests.apps.actors import SMALL_CAPACITY as CAPACITY
from tests.apps.actors import Small
from tests.support.harness import Logs, Secrets, node_pair
from tests.support.rawpeer import RawPeer, raw_peer


@pytest.fixture
def secrets(tmp_path: Path) -> Secrets:
    return Secrets.make(tmp_path, "server", "client", "raw")


# -- fair credit ----------------------------------------------------------------------


@asynccontextmanager
async def credit_held(
    secrets: Secrets, deadline: float
) -> AsyncIterator[tuple[Node, Node, RawPeer, Link]]:
    """A server hosting ``small`` (drains answered within ``deadline`` s), a
    client node, and a raw AMQP peer whose sender link holds all of
    ``small``'s credit: (server, client, peer, its link)."""
    async with (
        node_pair([Small()], secrets=secrets, credit_deadline=deadline) as (server, client),
        raw_peer(server.port, secrets.tls["raw"]) as peer,
    ):
        link = peer.sender("small")
        await peer.wait(lambda: link.credit == CAPACITY)
        yield server, client, peer, link


async def test_an_idle_client_ignoring_drain_does_not_starve_a_second_caller(
    secrets: Secrets, logs: Logs
) -> None:
    deadline = 1.0
    # Given a client that holds all of the actor's credit and never uses it
    async with credit_held(secrets, deadline) as (server, client, idle, hog):
        address = server.address_of("small")
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
        assert reclaimed
        assert reclaimed[0]["actor"] == "small"
        assert reclaimed[0]["credit"] == CAPACITY
        await idle.wait(lambda: hog.credit <= 1)
        # and the second caller goes on being served while the idle one stays
        for i in range(3 * CAPACITY):
            assert await client.ref(address).ask("ping", f"b{i}") == f"pong b{i}"
        stats = server.statistics()["small"]
        assert stats.links == 2
        assert stats.max_depth <= CAPACITY


async def test_a_drain_answer_that_crosses_the_revoke_of_its_credit_does_not_starve_the_link(
    secrets: Secrets, logs: Logs, monkeypatch: pytest.MonkeyPatch
) -> None:
    deadline = 1.0
    # Given a sender that holds all of the actor's credit without using it
    async with credit_held(secrets, deadline) as (server, client, slow, held):
        address = server.address_of("small")
        # ... which answers the node's drain just as the node gives up waiting
        # and revokes the credit: the two flows cross on the wire (a loaded
        # machine makes this timing; here the node's revoke triggers it)
        revoke = InboxCredit.revoke

        def crossing(credit: InboxCredit, idle: int = 2) -> int:
            if lib.pn_link_get_drain(credit.link) and held.credit > 0:
                lib.pn_link_drained(held._impl)  # the sender gives its credit back
                assert slow.engine is not None
                slow.engine.wake()
            return revoke(credit, idle)

        monkeypatch.setattr(InboxCredit, "revoke", crossing)
        # When a second caller asks (its link needs credit: the first is drained)
        assert await client.ref(address).with_options(timeout=5).ask("ping", "b") == "pong b"
        assert logs.of_type("actorctl:credit:reclaimed")
        # Then, the actor idle and its slots free, the first sender is granted
        # credit again (before the fix it was left below zero for good: -7)
        await slow.wait(lambda: held.credit > 0, timeout=4 * deadline)
        stats = server.statistics()["small"]
        assert stats.depth == 0


async def test_a_drain_while_a_sender_yields_does_not_leave_its_link_short_of_credit(
    secrets: Secrets, monkeypatch: pytest.MonkeyPatch
) -> None:
    deadline = 1.0
    async with (
        node_pair([Small()], secrets=secrets, credit_deadline=deadline) as (server, client),
        raw_peer(server.port, secrets.tls["raw"]) as raw,
    ):
        address = server.address_of("small")
        ref = client.ref(address).with_options(timeout=5)
        # Given a client whose link to the actor holds all of its credit
        assert await ref.ask("ping", "a") == "pong a"
        # ... and whose sender yields before each send it has credit for
        monkeypatch.setattr(_peer, "_YIELD_EVERY", 1)
        second: list[Link] = []
        take_turn = _peer._take_turn

        async def drained_meanwhile() -> None:
            if not second:
                # While it yields, a second sender attaches: the node drains the
                # client's unused credit, and the client gives it all back (its
                # sender is not parked: the credit looks unused)
                second.append(raw.sender("small"))
                await raw.wait(lambda: second[0].credit > 0)
            await take_turn()

        monkeypatch.setattr(_peer, "_take_turn", drained_meanwhile)
        credit_after: list[int] = []
        send = _peer.send

        def counted(link: object, tag: bytes, message: bytes) -> object:
            delivery = send(link, tag, message)
            credit_after.append(lib.pn_link_credit(link))
            return delivery

        monkeypatch.setattr(_peer, "send", counted)
        # When the client asks again (and it yields just before it sends)
        assert await ref.ask("ping", "b") == "pong b"
        # Then it did not send without credit (before the fix it did: its link
        # ran one credit below what the node counted, and stalled once idle)
        assert second, "the drain was not made"
        assert min(credit_after) >= 0, credit_after
        # ... and it goes on being answered, the second sender idle beside it
        for i in range(3 * CAPACITY):
            assert await ref.ask("ping", f"c{i}") == f"pong c{i}"


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
    async with (
        node_pair([Small()], secrets=secrets) as (server, client),
        raw_peer(server.port, secrets.tls["raw"]) as raw,
    ):
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
        # and the node keeps that connection, and answers on others
        assert raw.closed_condition is None
        ask = client.ref(server.address_of("small")).with_options(timeout=5)
        assert await ask.ask("ping", "b") == "pong b"


async def test_a_peer_that_goes_on_attaching_past_twice_the_cap_loses_its_connection(
    secrets: Secrets, logs: Logs
) -> None:
    async with (
        node_pair([Small()], secrets=secrets, max_links_per_connection=5) as (server, client),
        raw_peer(server.port, secrets.tls["raw"]) as raw,
    ):
        for _ in range(11):
            raw.sender("small")
        await raw.wait(lambda: raw.engine is not None and raw.engine.closed)
        assert raw.closed_condition == "amqp:resource-limit-exceeded"
        (line,) = logs.of_type("actorctl:connection:closed")
        assert line["condition"] == "amqp:resource-limit-exceeded"
        assert await client.ref(server.address_of("small")).ask("ping", "b") == "pong b"


# -- connections and handshakes ---------------------------------------------------------


class Silent:
    """TCP connections that send nothing (not even a TLS hello), from given
    source addresses: when each was made and when the node closed it."""

    def __init__(self, port: int, sources: list[str]) -> None:
        self.port = port
        self.sources = sources
        self.connected = trio.Event()
        self.opened: list[float] = []
        self.closed: list[float] = []
        self._one_closed = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Open them all at once; started once every one is connected, returns
        once the node has closed every one."""
        async with trio.open_nursery() as nursery:
            for source in self.sources:
                nursery.start_soon(self._one, source)
            await self.connected.wait()
            task_status.started()

    async def _one(self, source: str) -> None:
        with trio.socket.socket() as sock:
            await sock.bind((source, 0))
            await sock.connect(("127.0.0.1", self.port))
            self.opened.append(trio.current_time())
            if len(self.opened) == len(self.sources):
                self.connected.set()
            try:
                while await sock.recv(4096):
                    pass
            except OSError:
                pass  # closed with a reset: closed all the same
            self.closed.append(trio.current_time())
            self._one_closed.set()
            self._one_closed = trio.Event()

    async def wait_closed(self, count: int) -> None:
        """Wait until the node has closed ``count`` of them."""
        while len(self.closed) < count:
            await self._one_closed.wait()


async def test_connections_that_never_finish_the_handshake_are_closed_at_the_deadline(
    secrets: Secrets, logs: Logs
) -> None:
    # Long enough for a new client's TLS handshake while the node takes 500
    # connections at once on a small, shared machine.
    deadline = 3.0
    options = {"handshake_timeout": deadline, "max_handshakes": 1000}
    async with node_pair([Small()], secrets=secrets, **options) as (server, client):
        ref = client.ref(server.address_of("small")).with_options(timeout=deadline)
        # Given 500 TCP connections (100 from each of five addresses) that never
        # start their TLS handshake
        silent = Silent(server.port, [f"127.0.0.{2 + i // 100}" for i in range(500)])
        with trio.fail_after(deadline + 10):
            async with trio.open_nursery() as nursery:
                await nursery.start(silent.run)
                # Then the node answers a normal ask meanwhile, on a new connection
                assert await ref.ask("ping", "b") == "pong b"
                assert not silent.closed
            # and closes every silent one at its deadline
        assert len(silent.closed) == 500
        assert min(silent.closed) >= min(silent.opened) + deadline - 0.05
        assert max(silent.closed) <= max(silent.opened) + deadline + 3
        assert len(logs.of_type("actorctl:connection:no-open")) == 500
        # and goes on serving
        assert await ref.ask("ping", "c") == "pong c"


async def test_connections_beyond_the_caps_are_closed_at_once(secrets: Secrets, logs: Logs) -> None:
    # (a handshake deadline well above what a busy machine takes to refuse at once)
    deadline = 6.0
    async with node_pair([Small()], secrets=secrets, handshake_timeout=deadline) as (
        server,
        client,
    ):
        ref = client.ref(server.address_of("small"))
        assert await ref.ask("ping", "a") == "pong a"  # a connection made before
        # Given 150 silent connections from one address (the cap is 100), then 150
        # from two others (at most 200 may be in their handshake at once)
        first = Silent(server.port, ["127.0.0.2"] * 150)
        second = Silent(server.port, ["127.0.0.3", "127.0.0.4"] * 75)
        with trio.fail_after(deadline + 10):
            async with trio.open_nursery() as nursery:
                await nursery.start(first.run)
                await nursery.start(second.run)
                # Then the 50 beyond the per-address cap are refused: the first
                # SPOKEN_REFUSALS get a handshake to be told why in (they count as
                # handshakes, and these never start theirs), the rest are closed at
                # once; so are the 54 beyond max_handshakes
                spoken = _limits.SPOKEN_REFUSALS
                with trio.fail_after(deadline / 2):
                    await first.wait_closed(50 - spoken)
                    await second.wait_closed(50 + spoken)
                refused = trio.current_time()
                lines = logs.of_type("actorctl:connection:refused")
                reasons = [line["reason"] for line in lines]
                assert len(reasons) == 100 + spoken
                assert sum("max_connections_per_address = 100" in r for r in reasons) == 50
                assert sum("max_handshakes = 200" in r for r in reasons) == 50 + spoken
                # and the node still answers on the connection it had
                assert await ref.ask("ping", "b") == "pong b"
                closed_at_once = len(first.closed) + len(second.closed)
            # and the 200 it took (and the refusals in words) are closed at the deadline
        assert closed_at_once == 100
        assert max(first.closed + second.closed) >= refused + deadline / 2
        # after which a new client is served again
        async with open_node("late", host=None, **secrets.options("client")) as late:
            assert await late.ref(server.address_of("small")).ask("ping", "c") == "pong c"


# -- replies to a caller that grants no credit -------------------------------------------


class Echo(Actor):
    mailbox_capacity = 100

    @handler
    async def echo(self, value: int) -> int:
        return value


async def test_a_caller_that_grants_no_reply_credit_gets_a_bounded_queue(
    secrets: Secrets, logs: Logs
) -> None:
    bound = 20
    async with (
        node_pair([Echo()], secrets=secrets, max_queued_replies=bound) as (
            server,
            client,
        ),
        raw_peer(server.port, secrets.tls["raw"]) as raw,
    ):
        # Given a caller whose reply link grants no credit
        # When it asks 60 times, as fast as its credit lets it
        replies = await raw.ask_unread(
            "echo", 60, identity=secrets.keys["raw"].identity, node=server.node_id
        )
        # Then every ask was handled, but no reply reached it (it would time out)
        assert {o.state for o in raw.outcomes.values()} == {"accepted"}
        assert raw.messages == []
        # and the node held only `bound` replies for it, dropping the rest, logged
        dropped = [
            line
            for line in logs.of_type("actorctl:reply:dropped")
            if line["reason"] == "no reply credit"
        ]
        assert len(dropped) == 60 - bound
        assert {line["correlation_id"] for line in dropped} == {
            f"raw-{i}" for i in range(bound, 60)
        }
        # while a normal ask on another connection is answered
        assert await client.ref(server.address_of("echo")).ask("echo", 7) == 7
        # and once the caller grants credit, it gets the replies that were kept
        replies.flow(100)
        raw.engine.wake()  # type: ignore[union-attr]
        await raw.wait(lambda: len(raw.messages) == bound)
        kept = [decode(message) for message in raw.messages]
        assert [reply.correlation_id for reply in kept] == [f"raw-{i}" for i in range(bound)]
        assert [reply.body for reply in kept] == list(range(bound))


# -- idle outgoing connections --------------------------------------------------------------


class Slow(Actor):
    @handler
    async def slow(self, seconds: float) -> str:
        await trio.sleep(seconds)
        return "done"


async def test_an_idle_outgoing_connection_is_closed_and_a_later_send_reopens_it(
    secrets: Secrets, logs: Logs
) -> None:
    idle = 0.5
    options = {"peer_idle_timeout": idle}
    async with node_pair([Small()], secrets=secrets, client_options=options) as (server, client):
        address = server.address_of("small")
        ref = client.ref(address)
        # Given a client that asked once
        assert await ref.ask("ping", "a") == "pong a"
        engine = client.outbox.open_peer(address).engine
        assert engine is not None
        assert client.outbox.peers == 1
        # When it sends nothing more for the idle timeout
        # Then its connection there is closed, and forgotten
        with trio.fail_after(idle * 4):
            await engine.finished.wait()
        assert client.outbox.peers == 0
        (pruned,) = logs.of_type("actorctl:peer:pruned")
        assert pruned["peer"] == f"127.0.0.1:{server.port}"
        # and the next ask opens a new one
        assert await ref.ask("ping", "b") == "pong b"
        assert client.outbox.peers == 1
        assert client.outbox.open_peer(address).engine is not engine


async def test_a_connection_something_waits_on_is_not_closed_as_idle(
    secrets: Secrets, logs: Logs
) -> None:
    idle = 0.5
    options = {"peer_idle_timeout": idle}
    async with node_pair([Slow(), Small()], secrets=secrets, client_options=options) as (
        server,
        client,
    ):
        slow = client.ref(server.address_of("slow")).with_options(timeout=10)
        # Given an ask whose reply takes four times the idle timeout
        # Then the connection it waits on stays, and the reply arrives
        assert await slow.ask("slow", 4 * idle) == "done"
        engine = client.outbox.open_peer(server.address_of("slow")).engine
        assert engine is not None
        assert not logs.of_type("actorctl:peer:pruned")
        # And while an actor there is watched, the connection stays however idle
        watcher = Address("127.0.0.1", 1, "watcher", "amqps")
        await client.monitors.watch(watcher, server.address_of("small"))
        with trio.move_on_after(4 * idle):
            await engine.finished.wait()
        assert not engine.closed
        assert not logs.of_type("actorctl:peer:pruned")
        # until the watch ends
        await client.monitors.unwatch(watcher, server.address_of("small"))
        with trio.fail_after(idle * 4):
            await engine.finished.wait()
        assert logs.of_type("actorctl:peer:pruned")


# -- configuration ---------------------------------------------------------------------------


def test_a_node_table_sets_the_bounds_and_a_wrong_one_is_named(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(
        """
[cluster]
insecure = true
[[node]]
name = "n1"
listen = "127.0.0.1:5701"
[node.limits]
max_message_size = 4096
handshake_timeout = 2.5
"""
    )
    node = load_cluster(path).node("n1")
    assert node.limits == {"max_message_size": 4096, "handshake_timeout": 2.5}
    assert Node("n1", security=INSECURE, limits=node.bounds).limits.max_message_size == 4096
    path.write_text(path.read_text() + "max_link_per_connection = 5\n")
    with pytest.raises(
        ConfigError,
        match=r"node\[0\]\.limits\.max_link_per_connection.*"
        r"did you mean 'max_links_per_connection'\?",
    ):
        load_cluster(path)
    path.write_text(path.read_text().replace("max_link_per_connection = 5", "max_handshakes = 0"))
    with pytest.raises(ConfigError, match=r"max_handshakes.*a whole number above 0, got 0"):
        load_cluster(path)
