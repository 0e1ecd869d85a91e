"""A client in "another language": one call to an actor over AMQP 1.0, the
canonical byte form it signs, and the check of the node's signed replies.

This is what tests/cluster/link/test_foreign_client.py,
tests/cluster/link/test_foreign_signed.py and tests/tasks/test_foreign_pool.py
share. Like them, it stands for a client written in any language from
docs/protocol.md alone, so it uses ONLY python-qpid-proton
(its threaded ``Container`` and ``MessagingHandler``, with ``SSLDomain`` for
mutual TLS), trio (to run the client in a worker thread), the ``cryptography``
package (Ed25519) and the standard library: no actorctl import, no actorctl
helper, no knowledge of actorctl's internals. It carries a message (§2
transport, §4 inbox links, §8 replies, §9 outcomes), writes the canonical
bytes of §11.2, and checks a reply's signature as §8.1 says (field 0 the empty
text, field 1 the reply address), and, for a named reply address (§8), the
reply proof that goes with its attach. What goes in the message (a JSON
command, a signature) is each test module's own business.

Each call runs in a worker thread with its own proton Container, and every wait
is bounded by a Container timer that gives up (and closes the connection) after
a few seconds, and, around it, by ``trio.fail_after``.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import math
import struct
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import trio
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from proton import Delivery, Link, Message, SSLDomain, symbol, timestamp
from proton.handlers import MessagingHandler
from proton.reactor import Container, LinkOption

CLIENT_TIMEOUT = 10.0  # seconds before the client gives up on a call
CLOSE_TIMEOUT = 2.0  # seconds the node gets to answer our close before we stop anyway

MakeMessage = Callable[[str, str], Message]
"""Makes the message to send, given the reply address the node assigned (§8) and
the node's container id, from its open frame (§3: what a signature names, §11.2)."""

_OUTCOMES = {
    Delivery.ACCEPTED: "accepted",
    Delivery.REJECTED: "rejected",
    Delivery.RELEASED: "released",
    Delivery.MODIFIED: "modified",
}


# --- §11.2: the canonical byte form ------------------------------------------------

PREFIX = b"actorctl-auth-v2\n"
ABSENT = b"\xff\xff\xff\xff"
# Application properties that are not headers of the canonical form (§11.2 "headers").
NOT_HEADERS = frozenset({"kind", "lang", "sig_alg", "sig_key", "sig", "sig_node"})

# JSON string escapes of §11.2: every other character below U+0020 is \u00xx.
_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def _u32(n: int) -> bytes:
    return struct.pack(">I", n)


def _bytes(value: bytes) -> bytes:
    """*bytes*: a 4-byte big-endian length, then the bytes."""
    return _u32(len(value)) + value


def _text(value: str) -> bytes:
    """*text*: the UTF-8 bytes as *bytes* (no normalization of any kind)."""
    return _bytes(value.encode("utf-8"))


def _optional_text(value: str | None) -> bytes:
    """*optional text*: absent if absent, null or empty."""
    return ABSENT if not value else _text(value)


def _time(ms: int | None) -> bytes:
    """*time*: absent if absent or 0; otherwise the milliseconds in decimal ASCII."""
    if not ms:
        return ABSENT
    if not isinstance(ms, int) or isinstance(ms, bool):
        raise TypeError(f"a timestamp is a whole number of milliseconds, not {ms!r}")
    return _text(str(ms))


def json_string(value: str) -> str:
    """A JSON string as §11.2 writes it: only `"`, `\\` and the controls escaped."""
    out = ['"']
    for ch in value:
        escaped = _ESCAPES.get(ch)
        if escaped is not None:
            out.append(escaped)
        elif ch < " ":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def header_json(value: Any) -> str:
    """The compact JSON text of an application property value (§11.2 table)."""
    if value is None:  # only inside a list or a map: a null header is left out
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):  # every AMQP integer type, and timestamps (ms)
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        # Python's repr is the shortest decimal that reads back as the same double,
        # in fixed notation for -4 <= e < 16 and d.ddde±XX otherwise: §11.2 exactly.
        return repr(value)
    if isinstance(value, str):  # string and symbol
        return json_string(value)
    if isinstance(value, uuid.UUID):
        return json_string(str(value))
    if isinstance(value, list):
        return "[" + ",".join(header_json(v) for v in value) + "]"
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise ValueError("a map with a key that is not a string cannot be signed")
        # Python sorts str by code point, as §11.2 asks.
        members = (f"{json_string(k)}:{header_json(value[k])}" for k in sorted(value))
        return "{" + ",".join(members) + "}"
    raise ValueError(f"a {type(value).__name__} application property cannot be signed")


def canonical_bytes(
    *,
    node: str,
    to: str,
    subject: str | None,
    message_id: str,
    correlation_id: str | None,
    reply_to: str | None,
    creation_ms: int | None,
    expiry_ms: int | None,
    kind: str | None,
    headers: Mapping[str, Any],
    body: bytes,
) -> bytes:
    """The eleven fields of §11.2 after the prefix. ``node`` is the container id
    of the node it is for (from the node's open frame); ``to`` is the *actor
    name* the link target resolves to (not the ``to`` property); ``headers`` are
    all the application properties (those that are not headers are skipped here)."""
    pairs = sorted(
        (key.encode("utf-8"), header_json(value).encode("utf-8"))
        for key, value in headers.items()
        if value is not None and key not in NOT_HEADERS
    )
    return b"".join(
        [
            PREFIX,
            _text(node),
            _text(to),
            _text(subject or ""),
            _text(message_id),
            _optional_text(correlation_id),
            _optional_text(reply_to),
            _time(creation_ms),
            _time(expiry_ms),
            _text(kind or "command"),
            _u32(len(pairs)),
            *(_bytes(key) + _bytes(value) for key, value in pairs),
            _bytes(body),
        ]
    )


# --- §11.4: identity keys -------------------------------------------------------------


@dataclass(frozen=True)
class Identity:
    """An Ed25519 identity key (§11.4)."""

    private: Ed25519PrivateKey

    @classmethod
    def generate(cls) -> Identity:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def load(cls, path: str) -> Identity:
        """A key registered with the cluster (§11.10): unencrypted PKCS#8 PEM."""
        with open(path, "rb") as file:
            private = serialization.load_pem_private_key(file.read(), password=None)
        if not isinstance(private, Ed25519PrivateKey):
            raise ValueError(f"{path} is not an Ed25519 private key")
        return cls(private)

    @property
    def raw_public(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )

    @property
    def key_id(self) -> str:
        """The first 16 lowercase hex digits of SHA-256 of the raw public key."""
        return hashlib.sha256(self.raw_public).hexdigest()[:16]

    def public_pem(self) -> bytes:
        """What a node's keyring holds as ``NAME.pub``: PEM SubjectPublicKeyInfo."""
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def signature_properties(self, canonical: bytes, node: str) -> dict[str, Any]:
        """§11.3: ``sig`` is binary (Python bytes, which proton writes as binary);
        ``sig_node`` names the node the canonical bytes were made for."""
        return {
            "sig_alg": "ed25519",
            "sig_key": self.key_id,
            "sig": self.private.sign(canonical),
            "sig_node": node,
        }


def hmac_sha256(mac_key: bytes, canonical: bytes) -> bytes:
    """The ``hmac-sha256`` form's ``sig`` (§11.1)."""
    return hmac.new(mac_key, canonical, hashlib.sha256).digest()


# --- §6: a command, and the proton message that carries it ---------------------------


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _proton_seconds(ms: int) -> float:
    # proton's Message takes timestamps as float seconds and writes int(seconds * 1000),
    # truncating: hand it the middle of the millisecond so that it writes exactly ``ms``.
    return (ms + 0.5) / 1000


def _timestamp_on_the_wire(ms: int) -> bytes:
    return b"\x83" + ms.to_bytes(8, "big")  # AMQP timestamp: 0x83, then ms64


@dataclass(frozen=True)
class Command:
    """A command as §6 lays it out, with its times as the integer ms on the wire."""

    node: str  # the node's container id, from its open frame: canonical field 1
    actor: str  # the link target (§4) and canonical field 2
    subject: str  # the handler
    body: bytes  # the data section, exactly: JSON [args, kwargs] in UTF-8
    message_id: str
    creation_ms: int
    expiry_ms: int | None = None
    correlation_id: str | None = None
    reply_to: str | None = None
    kind: str = "command"
    headers: Mapping[str, Any] = field(default_factory=dict)  # other application properties
    lang: str = "proton-python"
    to: str | None = None  # the informative `to` property (§6.1): not covered

    def application_properties(self) -> dict[str, Any]:
        return {"kind": self.kind, "lang": self.lang, **self.headers}

    def canonical(self) -> bytes:
        return canonical_bytes(
            node=self.node,
            to=self.actor,
            subject=self.subject,
            message_id=self.message_id,
            correlation_id=self.correlation_id,
            reply_to=self.reply_to,
            creation_ms=self.creation_ms,
            expiry_ms=self.expiry_ms,
            kind=self.kind,
            headers=self.application_properties(),
            body=self.body,
        )

    def message(self, signature: Mapping[str, Any] | None) -> Message:
        """The proton message, with ``signature``'s properties if it is signed."""
        message = Message(
            id=self.message_id,
            subject=self.subject,
            content_type="application/json",
            properties={**self.application_properties(), **(signature or {})},
            body=self.body,
            inferred=True,  # bytes as a data section, not an amqp-value holding binary
        )
        if self.to is not None:
            message.address = self.to
        if self.correlation_id is not None:
            message.correlation_id = self.correlation_id
        if self.reply_to is not None:
            message.reply_to = self.reply_to
        message.creation_time = _proton_seconds(self.creation_ms)
        if self.expiry_ms is not None:
            message.expiry_time = _proton_seconds(self.expiry_ms)
        # What is signed must be what goes on the wire: check proton's encoding.
        encoded = message.encode()
        assert _timestamp_on_the_wire(self.creation_ms) in encoded, "creation-time"
        if self.expiry_ms is not None:
            assert _timestamp_on_the_wire(self.expiry_ms) in encoded, "absolute-expiry-time"
        assert encoded.endswith(b"\x00\x53\x75" + _data_size(self.body) + self.body), "body"
        return message


def _data_size(body: bytes) -> bytes:
    return (b"\xa0" + bytes([len(body)])) if len(body) < 256 else (b"\xb0" + _u32(len(body)))


def json_command(
    node: str,
    actor: str,
    handler: str,
    args: list[Any],
    kwargs: dict[str, Any],
    *,
    headers: Mapping[str, Any] | None = None,
    correlation_id: str | None = None,
    to: str | None = None,
    ttl_ms: int = 30_000,
) -> Command:
    """A command made now, expiring ``ttl_ms`` later; reply-to is set when sending."""
    created = now_ms()
    return Command(
        node=node,
        actor=actor,
        subject=handler,
        body=json.dumps([args, kwargs], separators=(",", ":"), ensure_ascii=False).encode(),
        message_id=f"foreign-{uuid.uuid4()}",
        creation_ms=created,
        expiry_ms=created + ttl_ms,
        correlation_id=correlation_id,
        headers=dict(headers or {}),
        to=to,
    )


# --- §8: a named reply address, and the proof its attach carries -----------------------

#: What a node that takes reply proofs offers in its open frame (§8).
REPLY_CAPABILITY = "actorctl:reply-proof"


def named_reply_address(identity: Identity, container_id: str) -> str:
    """``$reply/<key-id>/<container-id>``: ours, on a node with a keyring (§8)."""
    return f"$reply/{identity.key_id}/{container_id}"


def reply_proof(
    identity: Identity,
    node: str,
    address: str,
    *,
    time_ms: int | None = None,
    proof_id: str | None = None,
) -> dict[Any, Any]:
    """The attach properties that prove ``identity`` for ``address`` to the node
    whose open frame said ``node`` (§8): the canonical bytes of §11.2 for that node,
    ``to`` the address, subject ``$reply``, message-id the proof id, creation-time
    the proof time, kind ``command``, no headers and an empty body."""
    time_ms = now_ms() if time_ms is None else time_ms
    proof_id = uuid.uuid4().hex if proof_id is None else proof_id
    canonical = canonical_bytes(
        node=node,
        to=address,
        subject="$reply",
        message_id=proof_id,
        correlation_id=None,
        reply_to=None,
        creation_ms=time_ms,
        expiry_ms=None,
        kind="command",
        headers={},
        body=b"",
    )
    return {
        symbol("sig_alg"): "ed25519",
        symbol("sig_key"): identity.key_id,
        symbol("sig"): identity.private.sign(canonical),
        symbol("sig_node"): node,
        symbol("proof_id"): proof_id,
        symbol("proof_time"): timestamp(time_ms),
    }


class AttachProperties(LinkOption):
    """Puts ``properties`` in a link's attach frame (where a reply proof goes)."""

    def __init__(self, properties: Mapping[Any, Any]) -> None:
        self.properties = dict(properties)

    def apply(self, link: Link) -> None:
        link.properties = self.properties


# --- §8.1: checking a signed reply ---------------------------------------------------

#: Canonical field 0 of a reply: the empty text (00 00 00 00), and its sig_node (§8.1).
REPLY_NODE = ""


def reply_canonical(reply: Message, reply_address: str) -> bytes:
    """The canonical bytes (§11.2) of ``reply``, a reply or result document that
    came back on our reply link whose address is ``reply_address``, as §8.1
    says: field 0 the empty text, field 1 the reply address, the rest as for
    any message."""
    props = dict(reply.properties or {})
    body = reply.body
    return canonical_bytes(
        node=REPLY_NODE,
        to=reply_address,
        subject=reply.subject,
        message_id=str(reply.id),
        correlation_id=None if reply.correlation_id is None else str(reply.correlation_id),
        reply_to=reply.reply_to,
        # proton reads a timestamp as float seconds: the ms on the wire, exactly
        creation_ms=round(reply.creation_time * 1000) or None,
        expiry_ms=round(reply.expiry_time * 1000) or None,
        kind=props.get("kind"),
        headers=props,
        body=bytes(body) if isinstance(body, memoryview | bytes) else b"",
    )


def reply_signature_holds(
    reply: Message,
    reply_address: str,
    *,
    node_public_raw: bytes | None = None,
    sessions: Mapping[str, bytes] | None = None,
) -> bool:
    """Whether ``reply``, which came back on our reply link whose address is
    ``reply_address``, is signed as §8.1 item 2 says: ``ed25519`` by the node's
    key ``node_public_raw`` (32 raw bytes), or ``hmac-sha256`` under the MAC key
    of one of the ``sessions`` we opened on that connection (by session id)."""
    props = dict(reply.properties or {})
    sig, sig_key = props.get("sig"), props.get("sig_key")
    if not isinstance(sig, bytes | memoryview) or props.get("sig_node") != REPLY_NODE:
        return False  # sig is binary (§11.3), which proton reads as a memoryview
    sig = bytes(sig)
    canonical = reply_canonical(reply, reply_address)
    if props.get("sig_alg") == "hmac-sha256":
        mac_key = (sessions or {}).get(str(sig_key))
        if mac_key is None:
            return False
        expected = hmac.new(mac_key, canonical, hashlib.sha256).digest()
        return hmac.compare_digest(expected, sig)
    if props.get("sig_alg") != "ed25519" or node_public_raw is None:
        return False
    if sig_key != hashlib.sha256(node_public_raw).hexdigest()[:16]:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(node_public_raw).verify(sig, canonical)
    except InvalidSignature:
        return False
    return True


# --- §2, §4, §8, §9: one call ------------------------------------------------------


@dataclass(frozen=True)
class ClientTls:
    """The client's TLS files: the cluster CA, its certificate chain and its key."""

    ca: str
    cert: str
    key: str

    def domain(self) -> SSLDomain:
        domain = SSLDomain(SSLDomain.MODE_CLIENT)
        domain.set_credentials(self.cert, self.key, None)
        domain.set_trusted_ca_db(self.ca)
        # We dial an IP address: check the node's certificate against the CA only.
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER)
        return domain


@dataclass
class Reply:
    """A reply document as the client received it."""

    body: Any  # the decoded JSON body
    application_properties: dict[str, Any]
    correlation_id: Any
    subject: str | None
    content_type: str | None
    presettled: bool
    message: Message | None = None  # as received: what a client that verifies reads (§8.1)


@dataclass
class CallResult:
    """What one call produced on the wire."""

    message_id: str | None = None  # the id of the message sent, once sent
    node: str | None = None  # the container id signed for: its open frame's, or as given
    reply_address: str | None = None  # the $reply/... address the node assigned
    outcome: str | None = None  # accepted | rejected | released | modified
    condition: str | None = None  # the rejected outcome's (or refused link's) condition
    description: str | None = None
    reply: Reply | None = None
    link_refused: bool = False  # the node detached a link with an error (condition)
    capabilities: list[str] = field(default_factory=list)  # the node's offered ones
    failure: str | None = None  # why the client gave up, if it did
    events: list[str] = field(default_factory=list)


def replying_to(message: Message) -> MakeMessage:
    """Send ``message`` as it is, with its reply-to set to the assigned address."""

    def make(reply_to: str, node: str) -> Message:
        message.reply_to = reply_to
        return message

    return make


class ForeignCall(MessagingHandler):
    """Call one handler of one actor and collect the outcome and the reply.

    protocol.md: connect (over mutual TLS with a client certificate from the
    cluster CA, if ``tls`` is given) with SASL ANONYMOUS; attach a receiver with a
    dynamic source and read the address the node assigned (§8) or, with ``named``,
    wait for the node's open and attach our own named address with a reply proof
    by that key (§8); attach a sender
    whose target is the actor (§4); make the message only once that address is
    known (a signature covers the reply-to, and the node's container id, which
    its open frame gave before that); send it unsettled (at-least-once)
    within credit; the delivery's outcome says whether the actor took it (§9),
    and the reply document arrives, pre-settled, on the receiver.
    """

    def __init__(
        self,
        port: int,
        target: str,
        make_message: MakeMessage,
        *,
        tls: ClientTls | None = None,
        timeout: float = CLIENT_TIMEOUT,
        named: Identity | None = None,
        node: str | None = None,
    ) -> None:
        # prefetch: credit for the reply receiver; auto_accept is irrelevant for
        # pre-settled replies; auto_settle settles our sends once they have an outcome.
        super().__init__(prefetch=10, auto_accept=True, auto_settle=True)
        self.url = f"{'amqps' if tls else 'amqp'}://127.0.0.1:{port}"
        self.target = target
        self.make_message = make_message
        self.tls = tls
        self.timeout = timeout
        self.named = named
        # The node's container id as the client learnt it without the open frame
        # ($identity, §11.2); None: read from the open frame (§3).
        self.node = node
        self.result = CallResult()
        self._connection: Any = None
        self._receiver: Any = None
        self._sender: Any = None
        self._container: Any = None
        self._timer: Any = None
        self._sent = False
        self._finished = False

    # -- setting up ---------------------------------------------------------------

    def on_start(self, event: Any) -> None:
        container = self._container = event.container
        self._timer = container.schedule(self.timeout, self)
        self._connection = container.connect(
            self.url,
            ssl_domain=self.tls.domain() if self.tls else None,
            allowed_mechs="ANONYMOUS",
            sasl_enabled=True,
            reconnect=False,
        )
        if self.named is None:
            # A dynamic source: the node answers with the address it made for us.
            self._receiver = container.create_receiver(self._connection, None, dynamic=True)

    def on_connection_opened(self, event: Any) -> None:
        connection = event.connection
        self.result.capabilities = [str(c) for c in connection.remote_offered_capabilities or []]
        if self.named is None or self._receiver is not None:
            return
        # Our own named address: it names our key, and the attach proves it for
        # this node (the container id its open gave).
        address = named_reply_address(self.named, connection.container)
        node = self.node if self.node is not None else connection.remote_container or ""
        proof = reply_proof(self.named, node, address)
        self._receiver = event.container.create_receiver(
            connection, address, options=AttachProperties(proof)
        )

    def on_link_opened(self, event: Any) -> None:
        if event.receiver is not None and event.receiver == self._receiver:
            address = event.receiver.remote_source.address
            self.result.events.append(f"reply link attached: {address}")
            if not address:
                self._finish("the node assigned no reply address")
                return
            self.result.reply_address = address
            # The sender link's target address names the actor.
            self._sender = event.container.create_sender(self._connection, self.target)

    # -- sending --------------------------------------------------------------------

    def on_sendable(self, event: Any) -> None:
        # Sending only when the link has credit is what protocol.md requires.
        if self._sent or event.sender != self._sender or event.sender.credit <= 0:
            return
        assert self.result.reply_address is not None
        # The node's open frame came before its answer to our attach.
        node = self.node if self.node is not None else self._connection.remote_container
        self.result.node = node
        message = self.make_message(self.result.reply_address, node or "")
        self.result.message_id = str(message.id)
        event.sender.send(message)
        self._sent = True
        self.result.events.append("sent")

    def on_accepted(self, event: Any) -> None:
        self._outcome(event)

    def on_rejected(self, event: Any) -> None:
        self._outcome(event)

    def on_released(self, event: Any) -> None:  # released and modified both land here
        self._outcome(event)

    def _outcome(self, event: Any) -> None:
        delivery = event.delivery
        self.result.outcome = _OUTCOMES.get(delivery.remote_state, str(delivery.remote_state))
        condition = delivery.remote.condition
        if condition is not None:
            self.result.condition = condition.name
            self.result.description = condition.description
        self.result.events.append(f"outcome {self.result.outcome} {self.result.condition}")
        self._maybe_done()

    # -- receiving the reply ---------------------------------------------------------

    def on_message(self, event: Any) -> None:
        msg = event.message
        body = msg.body
        if isinstance(body, memoryview | bytes):  # a data section of UTF-8 JSON
            body = json.loads(bytes(body).decode("utf-8"))
        self.result.reply = Reply(
            body=body,
            application_properties=dict(msg.properties or {}),
            correlation_id=msg.correlation_id,
            subject=msg.subject,
            content_type=msg.content_type,
            presettled=event.delivery.settled,
            message=msg,
        )
        self.result.events.append("reply")
        self._maybe_done()

    def _maybe_done(self) -> None:
        outcome = self.result.outcome
        if outcome is None:
            return
        # A reply comes only for a call the actor accepted; any other outcome is final.
        if outcome != "accepted" or self.result.reply is not None:
            self._finish(None)

    # -- failures and the time limit ------------------------------------------------

    def on_timer_task(self, event: Any) -> None:
        self._timer = None
        self._finish(f"gave up after {self.timeout} s; events so far: {self.result.events}")

    def on_link_error(self, event: Any) -> None:
        # The node refuses a link by attaching it and detaching it with an error.
        condition = event.link.remote_condition
        self.result.link_refused = True
        self.result.condition = condition.name if condition else None
        self.result.description = condition.description if condition else None
        self.result.events.append(f"link refused: {condition}")
        self._finish(None)

    def on_connection_error(self, event: Any) -> None:
        self._finish(f"the node closed the connection: {event.connection.remote_condition}")

    def on_transport_error(self, event: Any) -> None:
        self._finish(f"transport error: {event.transport.condition}")

    def on_disconnected(self, event: Any) -> None:
        self._finish("disconnected")

    def _finish(self, failure: str | None) -> None:
        if self._finished:
            return
        self._finished = True
        self.result.failure = failure
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._connection is not None:
            self._connection.close()
        # If the node never answers the close, stop the Container anyway.
        self._container.schedule(CLOSE_TIMEOUT, _StopContainer())

    def on_connection_closed(self, event: Any) -> None:
        # Both ends closed: nothing else to wait for (not even the cancelled timer).
        event.container.stop()


class _StopContainer:
    """A timer handler that ends the Container's run whatever state it is in."""

    def on_timer_task(self, event: Any) -> None:
        event.container.stop()


def run_foreign_call(
    port: int,
    target: str,
    make_message: MakeMessage,
    *,
    tls: ClientTls | None = None,
    named: Identity | None = None,
    node: str | None = None,
) -> CallResult:
    """Run one call in this thread's own proton Container; returns when it ends."""
    call = ForeignCall(port, target, make_message, tls=tls, named=named, node=node)
    Container(call).run()
    return call.result


async def foreign_call(
    port: int,
    target: str,
    make_message: MakeMessage,
    *,
    tls: ClientTls | None = None,
    named: Identity | None = None,
    node: str | None = None,
) -> CallResult:
    """Run one call in a worker thread, bounded whatever the client does. ``node``:
    the node's container id as the client learnt it from ``$identity`` (§11.2),
    signed for (the proof of a ``named`` reply address included) instead of what
    the open frame says."""
    # The client's own timers end its run first; this is the last resort.
    with trio.fail_after(CLIENT_TIMEOUT + CLOSE_TIMEOUT + 5):
        return await trio.to_thread.run_sync(
            functools.partial(
                run_foreign_call, port, target, make_message, tls=tls, named=named, node=node
            ),
            abandon_on_cancel=True,
        )
