"""Mutual TLS on peer links: only peers with a certificate from the cluster CA get in."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import trio
import trustme
from proton import Connection, Endpoint, Transport

from actorctl import ActorRef, AskTimeout, ConfigError, RemoteError, TlsFiles, open_node
from actorctl._log import is_routine
from actorctl.mailbox import Role
from tests.apps.actors import Calculator
from tests.support.harness import Logs, Secrets, node_pair
from tests.support.keys import make_keys
from tests.support.tls import make_tls


async def test_nodes_with_certificates_from_the_cluster_ca_talk_over_tls(
    secrets: Secrets, logs: Logs
) -> None:
    async with node_pair([Calculator()], secrets=secrets) as (server, client):
        address = server.address_of("calculator")
        assert str(address).startswith("amqps://127.0.0.1:")
        with trio.fail_after(10):
            assert await client.ref(address).ask("add", 2, 3) == 5
    assert not logs.of_type("actorctl:node:insecure")


async def _refused(client_ref: ActorRef, logs: Logs, server_port: int) -> None:
    # The client never gets in: its ask can only time out.
    with trio.fail_after(10), pytest.raises(AskTimeout):
        await client_ref.with_options(timeout=1.0).ask("add", 1, 1)
    errors = logs.of_type("actorctl:connection:protocol-error")
    assert errors, "the server logged no handshake failure"


async def test_a_plaintext_client_is_refused_at_the_handshake_and_the_node_keeps_serving(
    secrets: Secrets, logs: Logs
) -> None:
    async with (
        node_pair([Calculator()], secrets=secrets) as (server, client),
        open_node("plain", host=None, insecure=True) as plain,
    ):
        address = server.address_of("calculator")
        await _refused(plain.ref(address), logs, server.port)
        with trio.fail_after(10):
            assert await client.ref(address).ask("add", 1, 2) == 3


async def test_a_client_with_a_certificate_from_another_ca_is_refused(
    tmp_path: Path, logs: Logs
) -> None:
    ours = make_tls(tmp_path / "ours", "server", "client")
    theirs = make_tls(tmp_path / "theirs", "intruder")
    keys = make_keys(tmp_path / "keys", "server", "client", "intruder")
    async with (
        node_pair([Calculator()], secrets=Secrets(ours, keys)) as (server, client),
        open_node(
            "intruder", host=None, tls=theirs["intruder"], keyring=keys["intruder"]
        ) as intruder,
    ):
        address = server.address_of("calculator")
        await _refused(intruder.ref(address), logs, server.port)
        with trio.fail_after(10):
            assert await client.ref(address).ask("add", 2, 2) == 4


def test_missing_tls_files_are_named(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("x")
    with pytest.raises(ConfigError, match=r"server\.pem is missing"):
        TlsFiles.from_dir(tmp_path, "server")


def test_a_node_without_tls_must_say_it_is_insecure() -> None:
    from actorctl import Node

    with pytest.raises(ConfigError, match="insecure=True"):
        Node("n")


def test_a_node_without_keys_must_say_it_is_insecure(tmp_path: Path) -> None:
    from actorctl import Node, NodeSecurity

    tls = make_tls(tmp_path, "n")
    with pytest.raises(ConfigError, match="has no keys"):
        Node("n", security=NodeSecurity(tls=tls["n"]))


async def test_a_peer_dialled_by_name_must_carry_that_name(tmp_path: Path, logs: Logs) -> None:
    import trustme

    ca = trustme.CA()
    good = make_tls(tmp_path / "good", "server", "client", ca=ca)
    keys = make_keys(tmp_path / "keys", "server", "client")
    # Same CA, but a server certificate that does not name "localhost"
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    ca.cert_pem.write_to_path(str(bad_dir / "ca.pem"))
    cert = ca.issue_cert("127.0.0.1", "elsewhere.example")
    cert.private_key_pem.write_to_path(str(bad_dir / "server.key"))
    cert.cert_chain_pems[0].write_to_path(str(bad_dir / "server.pem"))
    misnamed = TlsFiles.from_dir(bad_dir, "server")
    async with open_node("client", host=None, tls=good["client"], keyring=keys["client"]) as client:
        async with open_node(
            "server", [Calculator()], tls=good["server"], keyring=keys["server"]
        ) as server:
            with trio.fail_after(10):
                url = f"amqps://localhost:{server.port}/calculator"
                assert await client.ref(url).ask("add", 1, 1) == 2
        async with open_node(
            "impostor", [Calculator()], tls=misnamed, keyring=keys["server"]
        ) as impostor:
            url = f"amqps://localhost:{impostor.port}/calculator"
            with trio.fail_after(10), pytest.raises(AskTimeout):
                await client.ref(url).with_options(timeout=1.0).ask("add", 1, 1)
    # The client says why, as TLS and with the likely cause (its own log line,
    # not a bare transport error).
    assert any(
        "TLS" in m["error"] and "another name" in m["error"] and "verify" in m["error"]
        for m in logs.of_type("actorctl:peer:unreachable")
    )


async def test_rotated_certificates_are_read_again_for_new_connections(
    tmp_path: Path, logs: Logs
) -> None:
    # Given a node whose certificates come from one CA, a client of that CA
    # connected to it, and clients of a new CA that it does not trust yet
    old = make_tls(tmp_path / "certs", "server", "client")
    new_ca = trustme.CA()
    new = make_tls(tmp_path / "new", "early", "late", ca=new_ca)
    # the client asks the node to read its files again: an operator's work
    operator = {"client": Role.OPERATOR}
    keys = make_keys(tmp_path / "keys", "server", "client", "early", "late", roles=operator)
    async with (
        open_node(
            "server", [Calculator()], host="127.0.0.1", port=0,
            tls=old["server"], keyring=keys["server"],
        ) as server,
        open_node("client", host=None, tls=old["client"], keyring=keys["client"]) as client,
        open_node("early", host=None, tls=new["early"], keyring=keys["early"]) as early,
        open_node("late", host=None, tls=new["late"], keyring=keys["late"]) as late,
    ):  # fmt: skip
        address = server.address_of("calculator")
        with trio.fail_after(10):
            assert await client.ref(address).ask("add", 1, 1) == 2
        await _refused(early.ref(address), logs, server.port)
        # When its files are replaced by the new CA's and it reads them again
        make_tls(tmp_path / "certs", "server", ca=new_ca)
        agent = client.ref(f"{server.url}/_node").with_options(timeout=10)
        with trio.fail_after(10):
            assert await agent.ask("refresh_security") == [
                "keys read again",
                "certificates read again",
            ]
            # Then a new connection from the new CA's client gets in, and the
            # connection that was open keeps working
            assert await late.ref(address).ask("add", 2, 3) == 5
            assert await client.ref(address).ask("add", 3, 3) == 6


async def test_a_missing_rotated_file_keeps_the_certificates_in_use(tmp_path: Path) -> None:
    files = make_tls(tmp_path / "certs", "server", "client")
    keys = make_keys(tmp_path / "keys", "server", "client", roles={"client": Role.OPERATOR})
    async with node_pair([Calculator()], secrets=Secrets(files, keys)) as (server, client):
        (tmp_path / "certs" / "server.pem").unlink()
        agent = client.ref(f"{server.url}/_node").with_options(timeout=10)
        with trio.fail_after(10), pytest.raises(RemoteError, match=r"server\.pem is missing"):
            await agent.ask("refresh_security")
        with trio.fail_after(10):
            assert await client.ref(server.address_of("calculator")).ask("add", 1, 2) == 3


async def _open_then_vanish(stream: trio.abc.Stream) -> None:
    """Speak AMQP 1.0 on ``stream`` up to the node's ``open`` (proton's engine,
    sans-IO, as any client), then send nothing more: no ``close``."""
    connection = Connection()
    connection.container = "vanishing"
    transport = Transport()
    transport.bind(connection)
    connection.open()
    with trio.fail_after(10):
        while not connection.state & Endpoint.REMOTE_ACTIVE:
            pending = transport.pending()
            if pending > 0:
                await stream.send_all(transport.peek(pending))
                transport.pop(pending)
            data = await stream.receive_some(4096)
            assert data, "the node closed the connection before its open"
            transport.push(data)


@pytest.mark.parametrize("tls", [True, False], ids=["tls", "plain"])
async def test_a_peer_that_goes_without_closing_is_logged_as_gone_not_as_a_protocol_error(
    secrets: Secrets, logs: Logs, tls: bool
) -> None:
    # Given a node, and a client with a certificate from its CA (over TLS), that
    # opens an AMQP connection
    options = secrets.options("server") if tls else {"insecure": True}
    async with open_node("server", [Calculator()], **options) as server:
        sock = await trio.open_tcp_stream("127.0.0.1", server.port)
        stream: trio.abc.Stream = sock
        if tls:
            context = ssl.create_default_context(cafile=str(secrets.tls["client"].ca))
            files = secrets.tls["client"]
            context.load_cert_chain(str(files.cert), str(files.key))
            stream = trio.SSLStream(sock, context, server_hostname="127.0.0.1")
        await _open_then_vanish(stream)
        # When it closes its socket with no AMQP close and no TLS close_notify
        # (what uAMQP's clients do)
        await sock.aclose()
        # Then the node logs a peer gone, as information, and no protocol error
        with trio.fail_after(10):
            await logs.wait_for("actorctl:connection:peer-closed")
    (gone,) = logs.of_type("actorctl:connection:peer-closed")
    assert gone["opened"] is True
    expected = "unexpected eof" if tls else "connection aborted"
    assert expected in gone["description"]
    assert is_routine("actorctl:connection:peer-closed")
    assert not logs.of_type("actorctl:connection:protocol-error")
