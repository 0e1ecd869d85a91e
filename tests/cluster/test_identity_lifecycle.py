"""Identities while nodes run: keys added and revoked without a restart, and
certificates issued by the cluster's existing CA.

The nodes are real (TLS, signed AMQP 1.0 messages over 127.0.0.1); the
keyring changes go through the ``actorctl`` command in real subprocesses. A
node looks at its keyring directory about once a second: a test waits for the
node in its own process to have read the change (``Node.key_watch``), and for a
node in another process by trying a real ask again within a deadline.
"""

from __future__ import annotations

import functools
import json
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from actorctl import ConfigError, Envelope, Node, Rejected, TlsFiles, open_node
from actorctl.mailbox import (
    AuthError,
    IdentityKey,
    Keyring,
    SessionOffer,
    SessionTable,
    Verifier,
    canonical,
    encode,
    sign_ed25519,
)
from actorctl.mailbox._keydir import add_public_key, revoke_key
from actorctl.mailbox._signing import sign_hmac
from actorctl.ops import init_certs, issue_cert
from tests.apps.actors import Vault
from tests.support.cli import cli_output, run_cli_async, start_cli
from tests.support.harness import Logs, free_port, open_session, send_raw
from tests.support.keys import APPLIES_WITHIN
from tests.support.output import Output
from tests.support.tls import make_tls


def keyring_dir(directory: Path, *names: str) -> Path:
    """A keyring directory with a key pair for each name."""
    for name in names:
        IdentityKey.generate(name).save(directory, name)
    return directory


async def changed(node: Node, change: Awaitable[object]) -> None:
    """Make ``change`` to ``node``'s keyring; return once the node has read it."""
    watch = node.key_watch
    assert watch is not None, "the node does not watch its keyring"
    generation = watch.keyring.generation
    await change
    with trio.fail_after(APPLIES_WITHIN):
        await watch.wait_changed(generation)


async def ask(client: Node, address: str, handler: str, *args: object) -> object:
    """Ask an actor; its answer, or the refusal (a :class:`Rejected`)."""
    try:
        with trio.fail_after(10):
            return await client.ref(address).ask(handler, *args)
    except Rejected as exc:
        return exc


async def ask_open(client: Node, server: Node, who: str) -> object:
    """Ask the vault on ``server`` to open; its answer, or the refusal."""
    return await ask(client, str(server.address_of("vault")), "open", who)


def envelope(client: Node, who: str) -> Envelope:
    return Envelope(
        message_id=client.new_message_id(),
        to="vault",
        subject="open",
        body=[[who], {}],
        creation_time=client.now(),
    )


async def test_a_key_added_to_a_running_nodes_keyring_is_trusted_within_seconds(
    tmp_path: Path, logs: Logs
) -> None:
    # Given a running node whose keyring does not hold the client's key
    tls = make_tls(tmp_path / "tls", "server", "client")
    server_keys = keyring_dir(tmp_path / "server-keys", "server")
    client_keys = keyring_dir(tmp_path / "client-keys", "client")
    await cli_output("keys", "add", server_keys / "server.pub", "--dir", client_keys)
    vault = Vault()
    async with (
        open_node(
            "server", [vault], tls=tls["server"], keyring=Keyring.load(server_keys, "server")
        ) as server,
        open_node(
            "client", host=None, tls=tls["client"], keyring=Keyring.load(client_keys, "client")
        ) as client,
    ):
        started_as = server.node_id
        refused = await ask_open(client, server, "before")
        assert isinstance(refused, Rejected)
        assert refused.condition == "actorctl:unknown-key"
        # When an operator adds the client's key with `actorctl keys add`
        add = cli_output(
            "keys", "add", client_keys / "client.pub", "--name", "client", "--dir", server_keys
        )
        await changed(server, add)  # the node reads it within seconds, without a restart
        # Then the same running node answers the client
        assert await ask_open(client, server, "alice") == "opened for alice"
        assert server.node_id == started_as, "the node was restarted"
        assert vault.opened[-1] == "alice"
        assert "before" not in vault.opened
    [change] = logs.of_type("actorctl:keyring:changed")
    assert change["node"] == "server"
    assert client.identity is not None
    assert change["added"] == [f"client ({client.identity.key_id})"]


async def test_a_key_just_added_is_trusted_at_its_first_message(tmp_path: Path) -> None:
    # Given a running node whose watch would not look at its keyring for an hour
    tls = make_tls(tmp_path / "tls", "server", "client")
    server_keys = keyring_dir(tmp_path / "server-keys", "server")
    client_keys = keyring_dir(tmp_path / "client-keys", "client")
    await cli_output("keys", "add", server_keys / "server.pub", "--dir", client_keys)
    vault = Vault()
    async with (
        open_node(
            "server",
            [vault],
            tls=tls["server"],
            keyring=Keyring.load(server_keys, "server"),
            key_poll=3600.0,
        ) as server,
        open_node(
            "client", host=None, tls=tls["client"], keyring=Keyring.load(client_keys, "client")
        ) as client,
    ):
        # When the client's key is added and the client calls at once (as the
        # README's commands do, one after the other)
        await cli_output(
            "keys", "add", client_keys / "client.pub", "--name", "client", "--dir", server_keys
        )
        # Then its first message, signed by a key the node did not know, made
        # the node look at its keyring again, and it is answered
        assert await ask_open(client, server, "carol") == "opened for carol"
        assert vault.opened == ["carol"]


async def test_a_revoked_key_is_refused_and_its_open_session_is_closed(
    tmp_path: Path, logs: Logs
) -> None:
    # Given a running node that trusts two clients, one of which holds a session
    tls = make_tls(tmp_path / "tls", "server", "mallory", "alice")
    keys = keyring_dir(tmp_path / "keys", "server", "mallory", "alice")
    vault = Vault()

    def options(name: str) -> dict[str, Any]:
        return {"tls": tls[name], "keyring": Keyring.load(keys, name)}

    async with (
        open_node("server", [vault], **options("server")) as server,
        open_node("mallory", host=None, **options("mallory")) as mallory,
        open_node("alice", host=None, **options("alice")) as alice,
    ):
        assert await ask_open(mallory, server, "mallory") == "opened for mallory"
        session = await open_session(mallory, server.address_of("vault"))
        identity = mallory.identity
        assert identity is not None
        # When the operator revokes mallory's key with `actorctl keys revoke`
        await changed(server, cli_output("keys", "revoke", identity.key_id, "--dir", keys))
        vault.opened.clear()
        # Then a message within the session mallory opened before is refused
        message = envelope(mallory, "mallory")
        data = encode(
            message,
            signer=functools.partial(sign_hmac, session),
            actor="vault",
            node=server.node_id,
        )
        outcome = await send_raw(mallory, server.address_of("vault"), data, message.message_id)
        assert (outcome.state, outcome.condition) == ("rejected", "actorctl:revoked-key")
        assert session.id in (outcome.description or "")
        # and so is a message that mallory signs with the key itself
        message = envelope(mallory, "mallory")
        data = encode(
            message,
            signer=functools.partial(sign_ed25519, identity),
            actor="vault",
            node=server.node_id,
        )
        outcome = await send_raw(mallory, server.address_of("vault"), data, message.message_id)
        assert (outcome.state, outcome.condition) == ("rejected", "actorctl:revoked-key")
        assert identity.key_id in (outcome.description or "")
        # and mallory's own node's next ask
        refused = await ask_open(mallory, server, "mallory")
        assert isinstance(refused, Rejected)
        assert refused.condition == "actorctl:revoked-key"
        assert vault.opened == [], "a refused message ran"
        # while the other client is served as before, by the same running node
        assert await ask_open(alice, server, "alice") == "opened for alice"
    rejected = [
        m
        for m in logs.of_type("actorctl:delivery:rejected")
        if m.get("condition") == "actorctl:revoked-key"
    ]
    assert rejected, "the refusals were not logged"
    assert any(
        f"mallory ({identity.key_id})" in m["revoked"]
        for m in logs.of_type("actorctl:keyring:changed")
        if m["node"] == "server"
    )


async def test_a_certificate_issued_by_certs_issue_joins_a_running_cluster(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    # Given a node of a cluster, running in its own process, with the cluster's
    # CA made by `certs init` and a keyring of its own
    certs = tmp_path / "certs"
    init_certs(certs, ["vault"])
    vault_keys = keyring_dir(tmp_path / "vault-keys", "vault")
    port = free_port()
    proc = await start_cli(
        nursery, "node", "run", "tests.apps.actors:Calculator", "--name", "vault",
        "--listen", f"127.0.0.1:{port}", "--certs", certs, "--keys", vault_keys,
    )  # fmt: skip
    assert proc.stdout is not None
    output = Output(proc.stdout)
    nursery.start_soon(output.run)
    with trio.fail_after(20):
        await output.wait_for(b"actorctl:node:ready")
    # When the operator issues a certificate for a newcomer with the existing CA
    # and trusts its key, and the newcomer trusts the node's key
    newcomer_certs, newcomer_keys = tmp_path / "newcomer-certs", tmp_path / "newcomer-keys"
    issued = await cli_output("certs", "issue", "newcomer", "--dir", certs, "--out", newcomer_certs)
    assert str(newcomer_certs / "newcomer.pem") in issued
    keyring_dir(newcomer_keys, "newcomer")
    add_public_key(newcomer_keys, vault_keys / "vault.pub")
    address = f"amqps://127.0.0.1:{port}/calculator"
    async with open_node(
        "newcomer",
        host=None,
        tls=TlsFiles.from_dir(newcomer_certs, "newcomer"),
        keyring=Keyring.load(newcomer_keys, "newcomer"),
    ) as newcomer:
        # Then, before the node trusts its key, the newcomer's TLS is accepted
        # (a certificate of the cluster's CA) and its messages are refused
        refused = await ask(newcomer, address, "add", 20, 22)
        assert isinstance(refused, Rejected), refused
        assert refused.condition == "actorctl:unknown-key", refused
        # and once the node has read the newcomer's key, the same client (whose
        # session was refused) is answered, signed, over mutual TLS
        seen = len(output.data)
        await cli_output("keys", "add", newcomer_keys / "newcomer.pub", "--dir", vault_keys)
        with trio.fail_after(APPLIES_WITHIN):
            await output.wait_for(b"actorctl:keyring:changed", seen)
        assert await ask(newcomer, address, "add", 20, 22) == 42
    # and so does the command line, with the issued files
    called = await cli_output(
        "call", address, "add", "1", "2", "--certs", newcomer_certs, "--cert-name", "newcomer",
        "--keys", newcomer_keys, "--key-name", "newcomer",
    )  # fmt: skip
    assert json.loads(called) == 3
    proc.send_signal(signal.SIGINT)  # our own child, by its PID
    with trio.fail_after(20):
        await proc.wait()
        await output.wait_closed()
    assert b"actorctl:connection:failed" not in output.data


async def test_a_bad_file_in_the_keyring_is_logged_and_the_other_keys_stay(
    tmp_path: Path, logs: Logs
) -> None:
    # Given a running node that trusts a client
    tls = make_tls(tmp_path / "tls", "server", "client")
    keys = keyring_dir(tmp_path / "keys", "server", "client")
    async with (
        open_node(
            "server", [Vault()], tls=tls["server"], keyring=Keyring.load(keys, "server")
        ) as server,
        open_node(
            "client", host=None, tls=tls["client"], keyring=Keyring.load(keys, "client")
        ) as client,
    ):
        # When a file that is not a key appears in its keyring, with a new key
        async def copy_badly() -> None:
            (keys / "half-copied.pub").write_text("-----BEGIN PUBLIC KEY-----\nAAAA")
            keyring_dir(keys, "carol")

        await changed(server, copy_badly())
        # Then it names the file, trusts the new key, and goes on trusting the others
        [bad] = logs.of_type("actorctl:keyring:bad-file")
        assert "half-copied.pub" in bad["error"]
        carol = IdentityKey.load(keys / "carol.key")
        assert server.keyring is not None
        assert server.keyring.trusted(carol.key_id) is not None
        assert await ask_open(client, server, "bob") == "opened for bob"


@pytest.mark.parametrize("missing", ["ca.pem", "ca.key"])
async def test_certs_issue_without_a_ca_says_how_to_make_one(tmp_path: Path, missing: str) -> None:
    init_certs(tmp_path / "certs", ["n1"])
    (tmp_path / "certs" / missing).unlink()
    done = await run_cli_async("certs", "issue", "bob", "--dir", tmp_path / "certs")
    assert done.returncode == 1
    assert b"no CA in" in done.stderr
    assert missing.encode() in done.stderr
    assert b"actorctl certs init" in done.stderr
    assert b"Traceback" not in done.stderr
    assert not (tmp_path / "certs" / "bob.pem").exists()


# --- The parts, without a network -------------------------------------------------


def test_a_verifier_drops_the_sessions_of_a_key_revoked_after_it_was_built(
    tmp_path: Path,
) -> None:
    # Given a receiver that holds a session opened by a trusted key
    keys = keyring_dir(tmp_path / "keys", "receiver", "sender")
    keyring = Keyring.load(keys, "receiver")
    sender = IdentityKey.load(keys / "sender.key")
    clock = 1_700_000_000.0
    verifier = Verifier(keyring, SessionTable(), clock=lambda: clock)
    offer = SessionOffer.new(sender, now=clock)
    verifier.sessions.add(offer.session(), clock)
    message = Envelope(message_id="m-1", to="vault", subject="open", body=[[], {}],
                       creation_time=clock)  # fmt: skip

    def verify(signer: Callable[[bytes], dict[str, object]], message_id: str) -> str:
        data = canonical(attrs.evolve(message, message_id=message_id), "vault", b"[[],{}]")
        try:
            verifier.verify(
                signer(data), data, message_id=message_id, creation_ms=int(clock * 1000)
            )
        except AuthError as exc:
            return exc.condition
        return "accepted"

    hmac_signer = functools.partial(sign_hmac, offer.session())
    ed_signer = functools.partial(sign_ed25519, sender)
    assert verify(hmac_signer, "m-1") == "accepted"
    # When its key is revoked in the directory and the keyring reloaded
    revoke_key(keys, "sender")
    change, problems = keyring.reload()
    assert [k.key_id for k in change.revoked] == [sender.key_id]
    assert problems == []
    # Then the session and the key are both refused, as revoked
    assert verify(hmac_signer, "m-2") == "actorctl:revoked-key"
    assert verify(ed_signer, "m-3") == "actorctl:revoked-key"
    assert len(verifier.sessions) == 0
    # and a key that was never trusted is still only unknown
    stranger = functools.partial(sign_ed25519, IdentityKey.generate("stranger"))
    assert verify(stranger, "m-4") == "actorctl:unknown-key"


def test_keys_add_refuses_a_revoked_key_and_a_name_that_holds_another(tmp_path: Path) -> None:
    keys = keyring_dir(tmp_path / "keys", "node")
    elsewhere = keyring_dir(tmp_path / "elsewhere", "bob", "eve")
    added, new = add_public_key(keys, elsewhere / "bob.pub")
    assert new
    assert added.path == keys / "bob.pub"
    assert add_public_key(keys, elsewhere / "bob.pub")[1] is False  # the same again: no change
    with pytest.raises(ConfigError, match="holds another key"):
        add_public_key(keys, elsewhere / "eve.pub", "bob")
    revoke_key(keys, "bob")
    with pytest.raises(ConfigError, match="was revoked"):
        add_public_key(keys, elsewhere / "bob.pub")
    with pytest.raises(ConfigError, match="not a PEM public key"):
        add_public_key(keys, elsewhere / "eve.key")
    with pytest.raises(ConfigError, match="has no key named 'nobody'"):
        revoke_key(keys, "nobody")


def test_certs_issue_refuses_to_overwrite_unless_forced(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    init_certs(certs, ["n1"])
    cert, _ = issue_cert(certs, "bob")
    first = cert.read_bytes()
    with pytest.raises(ConfigError, match="exist already"):
        issue_cert(certs, "bob")
    issue_cert(certs, "bob", force=True)
    assert cert.read_bytes() != first
    # and the CA's own key must be a key, and its own
    (certs / "ca.key").write_bytes((certs / "n1.key").read_bytes())
    with pytest.raises(ConfigError, match="does not belong to the certificate"):
        issue_cert(certs, "carol")
    (certs / "ca.key").write_text("not a key")
    with pytest.raises(ConfigError, match="cannot be read"):
        issue_cert(certs, "carol")


def test_certs_issue_refuses_an_out_directory_of_another_ca(tmp_path: Path) -> None:
    init_certs(tmp_path / "one", ["n1"])
    init_certs(tmp_path / "two", ["n1"])
    with pytest.raises(ConfigError, match="is not the CA of"):
        issue_cert(tmp_path / "one", "bob", out=tmp_path / "two")
    assert not (tmp_path / "two" / "bob.pem").exists()


def test_a_revoked_file_that_is_not_a_key_keeps_the_keys_as_they_were(tmp_path: Path) -> None:
    # Given a keyring that revoked bob
    keys = keyring_dir(tmp_path / "keys", "node", "bob")
    revoke_key(keys, "bob")
    keyring = Keyring.load(keys, "node")
    bob = IdentityKey.load(keys / "bob.key")
    generation = keyring.generation
    # When bob's key comes back beside the others and revoked/ holds a damaged file
    (keys / "bob.pub").write_bytes(bob.public.pem())
    (keys / "revoked" / "bob.pub").write_text("damaged")
    # Then reading it again fails, naming the file, and bob stays untrusted
    with pytest.raises(ConfigError, match=r"revoked/bob.pub is not a PEM public key"):
        keyring.reload()
    assert keyring.generation == generation
    assert keyring.trusted(bob.key_id) is None
    assert keyring.revoked(bob.key_id) is not None
