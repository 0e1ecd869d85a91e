"""Who may take a reply address (docs/protocol.md §8): the address forms, the
proof that an attacher holds the key an address names, and the ``reply-to`` a
request may carry.

- A **named** reply address names the identity it belongs to:
  ``$reply/<key-id>/<container-id>`` (or that, then ``/`` and more), where the
  key id is that of the attacher's signing key and the container id that of its
  own ``open``. On a node with a keyring, the attach of a receiving link to it
  carries a **reply proof** in its ``properties``: an Ed25519 signature by that
  key over the canonical bytes of §11.2 for this node and this address, within
  the time window and never seen before (:func:`reply_proof`). Whoever proves the
  key takes the address, and nobody else can: nothing is remembered per address.
- A **dynamic** address (``$reply/<32 hex digits>``) is made fresh by the node
  and belongs to the link that asked for it, while that link lives.
- A node **without a keyring** has no signing identities: there a named address
  is ``$reply/<container-id>`` or ``$reply/<key-id>/<container-id>`` (each
  maybe followed by ``/`` and more), taken by the first certificate subject that
  attaches it (``ReplyRoutes.claim``), as before reply proofs.
- A request whose ``reply-to`` names another key's reply address is refused
  (``actorctl:foreign-reply-to``) unless a cluster member signed it (members
  send on behalf of callers: chains, retries, relays, re-drives), so that a
  caller cannot have a node's genuine reply delivered to someone else's ask:
  :func:`reply_to_refusal`.

All of it is checked when a link attaches, or once per request whose
``reply-to`` names a key: never per reply.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final

from proton import symbol, timestamp

from ...mailbox import AuthError, IdentityKey, Verifier, canonical_bytes
from ...mailbox._auth import SIG_NODE
from ...mailbox._signing import ED25519, SIG_ALG

if TYPE_CHECKING:
    from proton._data import PythonAMQPData

__all__ = [
    "PROOF_ID",
    "PROOF_SUBJECT",
    "PROOF_TIME",
    "REPLY_CAPABILITY",
    "REPLY_PREFIX",
    "named_key",
    "own_reply_address",
    "proof_canonical",
    "proof_properties",
    "reply_address_refusal",
    "reply_proof",
    "reply_to_refusal",
]

REPLY_PREFIX: Final = "$reply/"
#: The ``subject`` (canonical field 2) of a reply proof.
PROOF_SUBJECT: Final = "$reply"
#: Attach properties of a reply proof, besides the signature properties (§11.3).
PROOF_ID: Final = "proof_id"
PROOF_TIME: Final = "proof_time"
#: What a node offers in its ``open`` (``offered-capabilities``): it takes named
#: reply addresses that name a key, with a reply proof (docs/protocol.md §8).
REPLY_CAPABILITY: Final = symbol("actorctl:reply-proof")

_KEYED = re.compile(r"\$reply/([0-9a-f]{16})/")


def own_reply_address(container_id: str, key_id: str | None) -> str:
    """The named reply address of a caller whose ``open`` says ``container_id``
    and who signs with the key ``key_id`` (None: it has no key, and its address
    names none)."""
    if key_id is None:
        return f"{REPLY_PREFIX}{container_id}"
    return f"{REPLY_PREFIX}{key_id}/{container_id}"


def named_key(address: str) -> str | None:
    """The key id that the reply address ``address`` names, or None (a dynamic
    address, or one of a caller without a key)."""
    match = _KEYED.match(address)
    return None if match is None else match.group(1)


def proof_canonical(node: str, address: str, proof_id: str, time_ms: int) -> bytes:
    """The canonical bytes (§11.2) that a reply proof signs: for the node whose
    container id is ``node``, ``to`` the reply address, subject ``$reply``,
    ``message-id`` the proof id, ``creation-time`` the proof time, kind
    ``command``, no header and an empty body."""
    return canonical_bytes(
        node=node,
        to=address,
        subject=PROOF_SUBJECT,
        message_id=proof_id,
        correlation_id=None,
        reply_to=None,
        creation_ms=time_ms,
        expiry_ms=None,
        kind="command",
        headers={},
        body=b"",
    )


def reply_proof(
    identity: IdentityKey, node: str, address: str, now: float
) -> dict[symbol, PythonAMQPData]:
    """The attach ``properties`` that prove to the node whose container id is
    ``node`` that this caller holds ``identity``, the key ``address`` names."""
    return proof_properties(identity, node, address, uuid.uuid4().hex, round(now * 1000))


def proof_properties(
    identity: IdentityKey, node: str, address: str, proof_id: str, time_ms: int
) -> dict[symbol, PythonAMQPData]:
    """The reply proof of :func:`reply_proof` with its id and time given: what
    docs/test-vectors.json shows for fixed ones."""
    signature = identity.sign(proof_canonical(node, address, proof_id, time_ms))
    return {
        symbol("sig_alg"): ED25519,
        symbol("sig_key"): identity.key_id,
        symbol("sig"): signature,
        symbol(SIG_NODE): node,
        symbol(PROOF_ID): proof_id,
        symbol(PROOF_TIME): timestamp(time_ms),
    }


def reply_address_refusal(
    address: str,
    container: str,
    subject: str | None,
    *,
    dynamic: bool,
    node: str,
    verifier: Verifier | None,
    properties: Mapping[object, object] | None,
    claim: Callable[[str, str | None], bool],
) -> str | None:
    """Why a connection may not attach the reply address ``address`` (None: it
    may). ``container`` is the container id of the connection's ``open``,
    ``subject`` that of its TLS certificate (None on plain TCP), and ``node``
    this node's container id: what a proof names.

    A dynamic address is the node's own making. On a node with a keyring
    (``verifier``), a named address must be ``$reply/<key-id>/<container-id>``
    (or start with that and ``/``), and the attach ``properties`` must prove the
    key. Without a keyring, the container id rule holds, and the first
    certificate subject to attach an address keeps it (``claim``).
    """
    if dynamic:
        return None
    key = named_key(address)
    if verifier is not None:
        if key is None or not _names_container(address, f"{REPLY_PREFIX}{key}/", container):
            return _not_own(address, own_reply_address(container, "<key-id>"))
        return _proof_refusal(verifier, node, address, key, properties)
    bare = f"{REPLY_PREFIX}{container}"
    keyed = f"{REPLY_PREFIX}{key}/" if key is not None else None
    if not container or not (
        _names_container(address, REPLY_PREFIX, container)
        or (keyed is not None and _names_container(address, keyed, container))
    ):
        return _not_own(address, bare)
    if not claim(address, subject):
        return (
            f"reply address {address!r} belongs to another identity (the one that "
            "attached it first on this node): attach a dynamic source, or your own "
            "$reply/<container-id> with your own certificate"
        )
    return None


def reply_to_refusal(reply_to: str, sender: str, signer: str, verifier: Verifier) -> str | None:
    """Why a request that ``signer`` signed for ``sender`` (the origin a member
    asserts, else the signer) may not name ``reply_to``: it names another key's
    reply address, and no member signed it. None: it may."""
    if reply_to.startswith(f"{REPLY_PREFIX}{sender}/"):
        return None  # the sender's own: what nearly every request names
    key = named_key(reply_to)
    if key is None or key == sender or verifier.is_member(signer):
        return None
    return (
        f"reply-to {reply_to!r} is the reply address of key {key}, not of the key that "
        f"sent the request ({sender}): name your own reply address "
        "($reply/<your key id>/<your container id>, or a dynamic one)"
    )


def _names_container(address: str, head: str, container: str) -> bool:
    own = head + container
    return bool(container) and (address == own or address.startswith(own + "/"))


def _not_own(address: str, own: str) -> str:
    return (
        f"reply address {address!r} is not this connection's own: a named reply address "
        f"is {own!r} (or starts with {own + '/'!r}), where the container id is that of "
        "this connection's open; or attach a dynamic source and the node makes one"
    )


def _proof_refusal(
    verifier: Verifier,
    node: str,
    address: str,
    key: str,
    properties: Mapping[object, object] | None,
) -> str | None:
    """Why the attach ``properties`` do not prove ``key`` for ``address`` on this node."""
    # proton hands binary values over as memoryviews.
    props = {
        str(k): bytes(v) if isinstance(v, memoryview) else v for k, v in (properties or {}).items()
    }
    proof_id, time_ms = props.get(PROOF_ID), props.get(PROOF_TIME)
    if props.get(SIG_ALG) != ED25519 or not isinstance(proof_id, str) or not proof_id:
        return (
            f"reply address {address!r} names key {key}: the attach must prove it with "
            f"the properties sig_alg = {ED25519!r}, sig_key, sig, sig_node, {PROOF_ID} "
            f"(a fresh string) and {PROOF_TIME} (a timestamp), docs/protocol.md §8"
        )
    if not isinstance(time_ms, timestamp):
        return f"reply proof of {address!r}: {PROOF_TIME} must be an AMQP timestamp"
    if props.get("sig_key") != key:
        return (
            f"reply address {address!r} names key {key}, but the reply proof is by key "
            f"{props.get('sig_key')!r}: a reply address belongs to the key it names"
        )
    canonical = proof_canonical(node, address, proof_id, int(time_ms))
    try:
        verifier.verify(props, canonical, message_id=proof_id, creation_ms=int(time_ms))
    except AuthError as exc:
        return f"reply proof of {address!r} refused ({exc.condition}): {exc.description}"
    return None
