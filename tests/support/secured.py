"""A node that a client written from docs/protocol.md alone may call.

``secured_node`` runs a node with mutual TLS, hosting a
``CountingCalculator``, whose keyring trusts a key made for the foreign
client (tests/support/foreign.py); the client gets TLS files from the same CA.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from actorctl import Node, open_node
from tests.apps.actors import CountingCalculator
from tests.support.foreign import ClientTls, Identity
from tests.support.keys import make_keys
from tests.support.tls import make_tls

__all__ = ["Secured", "secured_node"]


@dataclass
class Secured:
    node: Node
    calculator: CountingCalculator
    tls: ClientTls
    identity: Identity  # the foreign client's key, trusted by the node


@asynccontextmanager
async def secured_node(tmp_path: Path) -> AsyncIterator[Secured]:
    """A node with mutual TLS and a keyring that trusts the foreign client's key."""
    tls = make_tls(tmp_path / "tls", "server", "foreign")
    identity = Identity.generate()
    keys_dir = tmp_path / "keys"
    keys_dir.mkdir()
    # In the keyring BEFORE the node's keyring is loaded: every *.pub is trusted.
    (keys_dir / "foreign.pub").write_bytes(identity.public_pem())
    keyring = make_keys(keys_dir, "server")["server"]
    assert keyring.trusted(identity.key_id) is not None
    foreign = tls["foreign"]
    client_tls = ClientTls(ca=str(foreign.ca), cert=str(foreign.cert), key=str(foreign.key))
    calculator = CountingCalculator()
    async with open_node("server", [calculator], tls=tls["server"], keyring=keyring) as node:
        yield Secured(node, calculator, client_tls, identity)
