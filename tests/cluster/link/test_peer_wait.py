"""A send that waits for a peer gets a fresh connection attempt, bounded by the
connect timeout (cluster/link/peer/_peer_dial.py).

Real nodes on 127.0.0.1, mutual TLS and signed messages. The sender's reconnect
backoff is made long (its outbox's settings), so that its reconnect loop is
known to be asleep when the test sends: only a send that wakes it gets through.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import trio

from actorctl import Actor, Address, BreakerPolicy, Node, PeerUnavailable, handler, open_node
from tests.support.harness import Logs, Secrets, free_port

WAIT = 20.0
TIMEOUT = 2.0  # the sender's connect timeout (room for a TLS handshake on a busy machine)
SLACK = 0.5
# The breaker stays closed: these tests are about the wait, not the fail-fast.
CLOSED = BreakerPolicy(failures=1000, reset=1.0)


class Tally(Actor):
    def __init__(self) -> None:
        self.values: list[int] = []

    @handler
    async def note(self, value: int) -> int:
        self.values.append(value)
        return value


@pytest.fixture
def secrets(tmp_path: Path) -> Secrets:
    return Secrets.make(tmp_path, "sender", "receiver")


def _long_backoff(node: Node) -> None:
    """The node's reconnect loop waits 5 s or more after a failed attempt."""
    outbox = node.outbox
    outbox.settings = attrs.evolve(outbox.settings, reconnect_backoff=(10.0, 20.0))


async def test_a_send_right_after_a_peer_restarts_is_sent_not_refused(
    secrets: Secrets, logs: Logs
) -> None:
    port = free_port()
    target = Address("127.0.0.1", port, "tally", "amqps")
    tally = Tally()
    async with open_node(
        "sender",
        host=None,
        connect_timeout=TIMEOUT,
        peer_breaker=CLOSED,
        **secrets.options("sender"),
    ) as sender:
        _long_backoff(sender)
        ref = sender.ref(target)
        with trio.fail_after(WAIT):
            # Given a connection to a peer that then stops
            async with open_node(
                "receiver", {"tally": tally}, port=port, **secrets.options("receiver")
            ):
                assert await ref.ask("note", 1) == 1
            # When a send waits for it while it stays down, then it fails
            # within the connect timeout, naming the peer
            started = trio.current_time()
            with pytest.raises(PeerUnavailable, match=rf"127\.0\.0\.1:{port} within 2 s"):
                await ref.tell("note", 2)
            assert trio.current_time() - started <= TIMEOUT + SLACK
            # (by now the peer has been down longer than the connect timeout,
            # and the reconnect loop sleeps for seconds)
            # When it is started again on the same port, and a send comes the
            # moment it listens
            async with open_node(
                "receiver", {"tally": tally}, port=port, **secrets.options("receiver")
            ):
                started = trio.current_time()
                # Then the send wakes the reconnect loop and goes through
                assert await ref.ask("note", 3) == 3
                assert trio.current_time() - started <= TIMEOUT
    assert tally.values == [1, 3]
    assert logs.of_type("actorctl:peer:reconnected")


async def test_sends_to_a_peer_that_stays_down_fail_in_time_without_a_connect_storm(
    secrets: Secrets,
) -> None:
    port = free_port()
    dead = Address("127.0.0.1", port, "tally", "amqps")
    async with open_node(
        "sender",
        host=None,
        connect_timeout=TIMEOUT,
        peer_breaker=CLOSED,
        **secrets.options("sender"),
    ) as sender:
        _long_backoff(sender)
        ref = sender.ref(dead)
        with trio.fail_after(WAIT):
            # Given a peer that has been down for longer than the connect timeout
            with pytest.raises(PeerUnavailable):
                await ref.tell("note", 0)
            dialer = sender.outbox.open_peer(dead).dialer
            before = dialer._dials
            # When three rounds of 20 sends each wait for it
            failed: list[float] = []

            async def send(value: int) -> None:
                started = trio.current_time()
                with pytest.raises(PeerUnavailable, match=rf"127\.0\.0\.1:{port} within"):
                    await ref.tell("note", value)
                failed.append(trio.current_time() - started)

            rounds = 3
            for _ in range(rounds):
                async with trio.open_nursery() as nursery:
                    for value in range(20):
                        nursery.start_soon(send, value)
        # Then each failed within the connect timeout, naming the peer
        assert len(failed) == 60
        assert max(failed) <= TIMEOUT + SLACK
        # And each round woke at most one connection attempt, not one per send
        assert 1 <= dialer._dials - before <= rounds


async def test_a_host_that_never_answers_a_connect_holds_the_reconnect_loop_only_so_long(
    logs: Logs,
) -> None:
    # Given a listener whose accept queue is full: the kernel drops each further
    # SYN, so a connect to it is never answered (as a host that is gone)
    import socket

    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        hole.listen(0)
        port = hole.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)):
            async with open_node(
                "sender", host=None, insecure=True, connect_timeout=1.0, peer_breaker=CLOSED
            ) as sender:
                ref = sender.ref(f"amqp://127.0.0.1:{port}/tally")
                with trio.fail_after(WAIT):
                    # When two sends wait for it, one after the other
                    for _ in range(2):
                        with pytest.raises(PeerUnavailable):
                            await ref.tell("note", 1)
    # Then the reconnect loop gave the dial up after the connect timeout and said
    # why (without that bound it would wait minutes, for the OS's connect timeout)
    said = [m["error"] for m in logs.of_type("actorctl:peer:unreachable")]
    assert any("no answer within 1 s" in error for error in said), said
