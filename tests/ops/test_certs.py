"""Development certificates: init_certs makes a CA and node certificates that chain to it."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import trio
import trio.testing

from actorctl import ConfigError
from actorctl.ops._certs import init_certs


def _context(directory: Path, name: str, *, server: bool) -> ssl.SSLContext:
    """Mutual TLS as the nodes do it: each side presents its certificate and checks
    the other's against ca.pem."""
    purpose = ssl.Purpose.CLIENT_AUTH if server else ssl.Purpose.SERVER_AUTH
    context = ssl.create_default_context(purpose, cafile=str(directory / "ca.pem"))
    context.load_cert_chain(directory / f"{name}.pem", directory / f"{name}.key")
    context.verify_mode = ssl.CERT_REQUIRED
    return context


async def _handshake(server_dir: Path, server: str, client_dir: Path, client: str) -> None:
    """A real TLS handshake over an in-memory stream: ``client`` dials ``server`` by name."""
    client_raw, server_raw = trio.testing.memory_stream_pair()
    server_side = trio.SSLStream(
        server_raw, _context(server_dir, server, server=True), server_side=True
    )
    client_side = trio.SSLStream(
        client_raw, _context(client_dir, client, server=False), server_hostname=server
    )
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server_side.do_handshake)
            nursery.start_soon(client_side.do_handshake)
    subject = [attribute for rdn in server_side.getpeercert()["subject"] for attribute in rdn]
    assert ("commonName", client) in subject


def test_node_certificates_chain_to_the_ca_and_pass_a_mutual_tls_handshake(
    tmp_path: Path,
) -> None:
    # Given a directory made by init_certs
    init_certs(tmp_path, ["node-a", "node-b"])
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["ca.key", "ca.pem", "node-a.key", "node-a.pem", "node-b.key", "node-b.pem"]
    for key in ("ca.key", "node-a.key", "node-b.key"):
        assert (tmp_path / key).stat().st_mode & 0o777 == 0o600
    # Then its nodes authenticate each other against its CA
    trio.run(_handshake, tmp_path, "node-a", tmp_path, "node-b")


def test_running_it_again_keeps_the_ca_and_adds_only_new_nodes(tmp_path: Path) -> None:
    init_certs(tmp_path, ["node-a"])
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    # When it runs again with one more node
    init_certs(tmp_path, ["node-a", "node-c"])
    # Then nothing was rewritten, and the new node is issued by the same CA
    assert all((tmp_path / name).read_bytes() == data for name, data in before.items())
    trio.run(_handshake, tmp_path, "node-c", tmp_path, "node-a")


def test_a_certificate_from_another_ca_is_refused(tmp_path: Path) -> None:
    init_certs(tmp_path / "one", ["node-a"])
    init_certs(tmp_path / "two", ["node-b"])
    # Either side may give up first, or both: the nursery raises what failed as a group
    with pytest.raises(ExceptionGroup) as caught:
        trio.run(_handshake, tmp_path / "one", "node-a", tmp_path / "two", "node-b")
    assert caught.group_contains(trio.BrokenResourceError)


@pytest.mark.parametrize(
    ("present", "names"),
    [
        (["node-a.pem"], ["node-a"]),  # a certificate without its key
        (["ca.pem"], ["node-a"]),  # a CA certificate without its key
        (["node-a.pem", "node-a.key"], ["node-a"]),  # a node without the CA that issued it
    ],
)
def test_a_partial_set_is_refused_naming_the_files(
    tmp_path: Path, present: list[str], names: list[str]
) -> None:
    for name in present:
        (tmp_path / name).write_text("left over")
    with pytest.raises(ConfigError, match="incomplete set") as caught:
        init_certs(tmp_path, names)
    assert str(tmp_path / present[0]) in str(caught.value)


@pytest.mark.parametrize("name", ["ca", "node_1", "a b", "-a", ""])
def test_a_node_name_that_cannot_name_a_certificate_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match="cannot name a certificate"):
        init_certs(tmp_path, [name])
    assert not tmp_path.joinpath("ca.pem").exists()
