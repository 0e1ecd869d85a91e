"""A connection that cannot be made says why, within the connect timeout: nothing
listening, a certificate from another CA, TLS against plain TCP and the
reverse, a connection beyond the node's per-address cap, a reply link the node
refuses. Each fails with its own message naming the address; a refusal of a
message on a good connection logs no transport error."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import pytest
import trio

from actorctl import PeerUnavailable, Rejected, open_node
from tests.apps.actors import Calculator
from tests.support.harness import Logs, free_port
from tests.support.keys import make_keys
from tests.support.rawpeer import LinkState, raw_peer
from tests.support.tls import make_tls

CONNECT: Final = 1.0  # the client's connect timeout, seconds
SLACK: Final = 2.0  # what a slow machine may add to it


@pytest.fixture
def secrets(tmp_path: Path) -> dict[str, Any]:
    keys = make_keys(tmp_path / "keys", "server", "client")
    return {
        "ours": make_tls(tmp_path / "ours", "server", "client", "other"),
        "theirs": make_tls(tmp_path / "theirs", "client"),
        "keys": keys,
    }


def _tls(
    secrets: dict[str, Any], name: str, ca: str = "ours", keys: str | None = None
) -> dict[str, Any]:
    return {"tls": secrets[ca][name], "keyring": secrets["keys"][keys or name]}


async def _failure(client_options: dict[str, Any], url: str) -> tuple[str, float]:
    """The PeerUnavailable an ask to ``url`` ends with, and how long it took."""
    async with open_node(
        "client", host=None, grace=0.1, connect_timeout=CONNECT, **client_options
    ) as client:
        started = trio.current_time()
        with trio.fail_after(CONNECT + SLACK), pytest.raises(PeerUnavailable) as caught:
            await client.ref(url).with_options(timeout=30.0).ask("add", 1, 2)
        return str(caught.value), trio.current_time() - started


async def test_nothing_listening_is_named_within_the_connect_timeout(
    secrets: dict[str, Any],
) -> None:
    port = free_port()
    message, took = await _failure(_tls(secrets, "client"), f"amqps://127.0.0.1:{port}/calculator")
    assert f"nothing listens on 127.0.0.1:{port}" in message
    assert "is the node running" in message
    assert took < CONNECT + SLACK


async def test_a_certificate_from_another_ca_is_named_as_tls(secrets: dict[str, Any]) -> None:
    async with open_node("server", [Calculator()], **_tls(secrets, "server")) as server:
        url = f"amqps://127.0.0.1:{server.port}/calculator"
        message, took = await _failure(_tls(secrets, "client", ca="theirs"), url)
    assert message.startswith(f"no connection to node 127.0.0.1:{server.port}")
    assert "TLS: the certificate of" in message
    assert "another CA" in message
    assert "certs init" in message
    assert took < CONNECT + SLACK


async def test_tls_against_a_plain_node_is_named_as_such(secrets: dict[str, Any]) -> None:
    async with open_node("server", [Calculator()], insecure=True) as server:
        url = f"amqps://127.0.0.1:{server.port}/calculator"
        message, took = await _failure(_tls(secrets, "client"), url)
    assert f"TLS: 127.0.0.1:{server.port} closed the connection during the TLS handshake" in (
        message
    )
    assert "plain TCP" in message
    assert "--insecure" in message
    assert took < CONNECT + SLACK


async def test_plain_tcp_against_a_tls_node_is_named_as_such(secrets: dict[str, Any]) -> None:
    async with open_node("server", [Calculator()], **_tls(secrets, "server")) as server:
        url = f"amqp://127.0.0.1:{server.port}/calculator"
        message, took = await _failure({"insecure": True}, url)
    assert f"plain TCP against TLS: 127.0.0.1:{server.port}" in message
    assert "amqps://" in message
    assert "--certs" in message
    assert took < CONNECT + SLACK


async def test_a_connection_beyond_the_per_address_cap_is_named_as_such(
    secrets: dict[str, Any], logs: Logs
) -> None:
    # Given a node that takes one connection from an address, and one client holding it
    async with (
        open_node(
            "server", [Calculator()], max_connections_per_address=1, **_tls(secrets, "server")
        ) as server,
        open_node("first", host=None, **_tls(secrets, "client")) as first,
    ):
        url = f"amqps://127.0.0.1:{server.port}/calculator"
        with trio.fail_after(10):
            assert await first.ref(url).ask("add", 1, 2) == 3
        # When a second client from the same address calls it
        message, took = await _failure(_tls(secrets, "client"), url)
        # Then its error names the cap, not TLS
        assert f"127.0.0.1:{server.port} refused the connection" in message
        assert "max_connections_per_address = 1" in message
        assert "amqp:resource-limit-exceeded" in message
        assert "plain TCP" not in message
        assert took < CONNECT + SLACK
        # and the first client is still served
        with trio.fail_after(10):
            assert await first.ref(url).ask("add", 2, 2) == 4
    reasons = [line["reason"] for line in logs.of_type("actorctl:connection:refused")]
    assert reasons
    assert all("max_connections_per_address = 1" in reason for reason in reasons)


async def test_a_refused_reply_link_is_named_as_such(secrets: dict[str, Any]) -> None:
    # (nodes without keyrings: reply addresses are owned by certificates there,
    # and one can be held by another; with keyrings, no other key can claim it)
    async with (
        open_node("server", [Calculator()], tls=secrets["ours"]["server"], insecure=True) as server,
        open_node(
            "client",
            host=None,
            grace=0.1,
            connect_timeout=CONNECT,
            tls=secrets["ours"]["client"],
            insecure=True,
        ) as client,
    ):
        # Given another identity (a raw peer with another certificate) holding the
        # client's reply address on the node
        reply = f"$reply/{client.node_id}"
        async with raw_peer(server.port, secrets["ours"]["other"], container=client.node_id) as raw:
            assert raw.session is not None
            assert raw.engine is not None
            link = raw.session.receiver("squatter")
            link.source.address = reply
            link.target.address = reply
            link.open()
            raw.engine.wake()
            await raw.wait(lambda: raw.links.get("squatter", LinkState()).opened)
            assert not raw.links["squatter"].closed
            # When the client calls the node
            ref = client.ref(f"amqps://127.0.0.1:{server.port}/calculator")
            with trio.fail_after(CONNECT + SLACK), pytest.raises(PeerUnavailable) as caught:
                await ref.with_options(timeout=30.0).ask("add", 1, 2)
    # Then its error says the node refused its reply link, and why
    message = str(caught.value)
    assert f"127.0.0.1:{server.port} refused our reply link" in message
    assert "belongs to another identity" in message
    assert "amqp:unauthorized-access" in message
    assert "plain TCP" not in message


async def test_a_refused_message_logs_no_transport_error(
    secrets: dict[str, Any], logs: Logs
) -> None:
    async with (
        open_node("server", [Calculator()], **_tls(secrets, "server")) as server,
        open_node("client", host=None, grace=0.1, **_tls(secrets, "client")) as client,
    ):
        ref = client.ref(f"amqps://127.0.0.1:{server.port}/calculator")
        with trio.fail_after(10), pytest.raises(Rejected):
            await ref.deliver("no_such_handler")
    # the refusal is the caller's error; the connection's end is no transport error
    assert not logs.of_type("actorctl:connection:protocol-error")
    assert not [
        m
        for m in logs.of_type("actorctl:peer:unreachable")
        if m["peer"] == f"127.0.0.1:{server.port}"
    ]
