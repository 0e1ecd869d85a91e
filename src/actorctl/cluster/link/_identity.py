"""The ``$identity`` address: a node says its container id to a client that
cannot read the node's ``open`` frame (docs/protocol.md §4, §11.2).

A signed message names the container id of the node it is for (field 0 of
the canonical form), and the node's ``open`` carries it; some client libraries
(uAMQP and the Azure SDKs built on it) do not show the remote ``open`` to the
application. Such a client attaches a receiver link whose source is
``$identity`` (or ``amqps://host:port/$identity``) and gets one message: a
document whose JSON body is ``{"node": <container id>, "name": <node name>}``.

The answer is unsigned and read-only: it tells a connection nothing that the
node's ``open`` did not already tell it, on the same connection (after the same
mutual TLS). It is one pre-settled message per link, sent once the link has
credit; the link stays open with nothing more on it. The links themselves
count against the connection's bounds (``max_links_per_connection``). A sender
link to ``$identity`` is refused (``amqp:not-allowed``): nothing can be sent
there, and no actor is reachable by that name.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Final, final

from proton import Link

from ...mailbox import KIND_DOCUMENT, Envelope, encode
from ._engine import Engine
from ._raw import lib

__all__ = ["IDENTITY_ADDRESS", "NOT_ALLOWED", "IdentityLinks", "identity_document", "read_only"]

IDENTITY_ADDRESS: Final = "$identity"
NOT_ALLOWED: Final = "amqp:not-allowed"

_link_credit = lib.pn_link_credit


def identity_document(node_id: str, node_name: str, message_id: str, now: float) -> Envelope:
    """The one message an ``$identity`` link gets: an unsigned document whose
    body is ``{"node": <container id>, "name": <node name>}`` (docs/protocol.md
    §11.2; docs/test-vectors.json shows it as written)."""
    return Envelope(
        message_id=message_id,
        to=IDENTITY_ADDRESS,
        subject=IDENTITY_ADDRESS,
        body={"node": node_id, "name": node_name},
        kind=KIND_DOCUMENT,
        creation_time=now,
    )


def read_only(node_name: str) -> str:
    """Why a sender link to ``$identity`` is refused (its detach's description)."""
    return (
        f"{IDENTITY_ADDRESS} on node {node_name!r} is read-only: attach a receiver link "
        f"whose source is {IDENTITY_ADDRESS} to read the node's container id"
    )


@final
class IdentityLinks:
    """The ``$identity`` links of one connection that wait for credit to get
    their one answer.

    Args:
        node_name: the node's name, in the answer and the log.
        node_id: the node's container id: the answer.
    """

    def __init__(self, node_name: str, node_id: str) -> None:
        self._name = node_name
        self._id = node_id
        self._links: set[Any] = set()  # its $identity links, by raw pn_link_t
        self._waiting: dict[Any, Link] = {}  # those not answered yet

    def attach(self, engine: Engine, link: Link, address: str) -> None:
        """Open a receiver's ``$identity`` link (its source ``address``, in any
        form an actor's address takes: ``$identity``, ``/$identity`` or
        ``amqps://host:port/$identity``); answer it at once if it has credit."""
        link.source.address = address
        link.snd_settle_mode = Link.SND_SETTLED  # a read: nothing to acknowledge
        link.open()
        self._links.add(link._impl)
        self._waiting[link._impl] = link
        self.flowed(engine, link._impl)

    def flowed(self, engine: Engine, link: Any) -> bool:
        """The link ``link`` (raw) may have credit now: answer it once.
        False if it is no ``$identity`` link waiting for its answer."""
        if link not in self._waiting:
            return False
        if _link_credit(link) > 0:
            del self._waiting[link]
            envelope = identity_document(self._id, self._name, uuid.uuid4().hex, time.time())
            engine.send_settled(link, envelope.message_id.encode(), encode(envelope))
        return True

    def detached(self, link: Any) -> bool:
        """The link ``link`` (raw) closed: forget it. False if it was no
        ``$identity`` link."""
        self._waiting.pop(link, None)
        if link not in self._links:
            return False
        self._links.discard(link)
        return True

    def clear(self) -> None:
        self._links.clear()
        self._waiting.clear()
