"""Write docs/test-vectors.json: message authentication (docs/protocol.md §11) test vectors.

Every input is fixed (an RFC 8032 seed, a MAC key, a session id, times), and
Ed25519 and HMAC are deterministic, so running this again writes the same file.
The replies and result documents (§8.1) are made by the node's own code: the
reply an actor sends (``send_reply``), the result document a worker sends
(``result_document``), written and signed as a node writes them on a reply
link (``encode_reply``); so are the reply proof a named reply link's attach
carries (``proof_properties``, §8) and the one message of an ``$identity``
link (``identity_document``, §11.2). tests/docs/test_vectors.py recomputes every
vector from the file, checks that this script writes the file as it is, and
checks the examples of docs/protocol.md against the code, so the vectors, the
doc and the code cannot drift apart.

    .venv/bin/python docs/make_test_vectors.py
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

from actorctl.actors import Outbox
from actorctl.actors._replies import send_reply
from actorctl.cluster.link._identity import identity_document
from actorctl.cluster.link._reply_auth import REPLY_NODE, encode_reply
from actorctl.cluster.link._reply_claims import (
    PROOF_SUBJECT,
    own_reply_address,
    proof_canonical,
    proof_properties,
)
from actorctl.mailbox import KIND_COMMAND, STATUS_OK, Envelope, encode, json_dumps, to_ms
from actorctl.mailbox._signing import (
    IdentityKey,
    SessionOffer,
    SessionSigner,
    canonical_bytes,
    sign_ed25519,
    sign_hmac,
)
from actorctl.tasks.worker._documents import document_headers, result_document

# RFC 8032 section 7.1, TEST 1: its public key is d75a9801...f707511a.
SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
MAC_KEY = bytes(range(32))
SESSION_ID = "00112233445566778899aabbccddeeff"
NODE = "server-1a2b3c4d5e6f"  # the receiving node's container id (protocol.md §13)
CREATED_MS = 1767225600000  # 2026-01-01T00:00:00Z
REPLY_TO = "$reply/5d41402abc4b2a76b9719d911017c592"  # the caller's reply address (§8)
TASK_ID = "9f0b7c1e-3d2a-4b5c-8e6f-a1b2c3d4e5f6"
WORKER = "worker-1-6f5e4d3c2b1a"  # the container id of the worker's node (§14.4)
CLIENT = "client-7c9e"  # the client's own container id (protocol.md §13)
PROOF_ID = "7d1e5c3a9b2f4e6d8c0a1b3e5f7d9c2a"  # a reply proof's proof_id (§8)
PROOF_MS = CREATED_MS - 2000  # its proof_time
IDENTITY_ID = "a2c9d7f5e3b1a0c8d6e4f2b9a3c5e1d7"  # the message-id of an $identity answer
NODE_NAME = "server"  # the node whose container id is NODE

MESSAGES: list[dict[str, Any]] = [
    {
        "name": "request",
        "fields": {
            "node": NODE,
            "to": "calculator",
            "subject": "add",
            "message_id": "c0ffee-0001",
            "correlation_id": None,
            "reply_to": "$reply/5d41402abc4b2a76b9719d911017c592",
            "creation_ms": CREATED_MS,
            "expiry_ms": CREATED_MS + 30_000,
            "kind": "command",
            "headers": {
                "lang": "js",
                "retries": 1,
                "timelimit": 30.5,
                "trace": "4f1e0b7e-2a4c-4d1e-9c3b-0a9f5d2e6b71",
                "x-tenant": "Zürich",
                "x-urgent": True,
                "x-absent": None,
            },
        },
        "body": b"[[2,3],{}]",
    },
    {
        "name": "minimal event",
        "fields": {
            "node": NODE,
            "to": "audit",
            "subject": "user_registered",
            "message_id": "c0ffee-0002",
            "correlation_id": None,
            "reply_to": None,
            "creation_ms": CREATED_MS,
            "expiry_ms": None,
            "kind": "event",
            "headers": {},
        },
        "body": b'[["ada@example.org"],{}]',
    },
    {
        "name": "request with correlation-id",
        "fields": {
            "node": NODE,
            "to": "calculator",
            "subject": "add",
            "message_id": "c0ffee-0003",
            "correlation_id": "order-42/step-1",
            "reply_to": REPLY_TO,
            "creation_ms": CREATED_MS,
            "expiry_ms": CREATED_MS + 30_000,
            "kind": "command",
            "headers": {"lang": "js"},
        },
        "body": b"[[2,3],{}]",
    },
    {
        # Every header value type of §11.2's table that JSON can carry, with
        # every double example of the table: the values hardest to reproduce.
        "name": "header values",
        "fields": {
            "node": NODE,
            "to": "calculator",
            "subject": "add",
            "message_id": "c0ffee-0004",
            "correlation_id": None,
            "reply_to": None,
            "creation_ms": CREATED_MS,
            "expiry_ms": None,
            "kind": "command",
            "headers": {
                "x-d-a": 30.5,
                "x-d-b": 2.0,
                "x-d-c": -0.0,
                "x-d-d": 0.0001,
                "x-d-e": 1e-05,
                "x-d-f": 1e15,
                "x-d-g": 1e16,
                "x-d-h": 1.25e-07,
                "x-int-min": -17,
                "x-int-zero": 0,
                "x-ulong": 18446744073709551615,
                "x-false": False,
                "x-list": [1, "a", True, None],
                "x-map": {"b": [], "a": 1},
                "x-escapes": 'q"b\\\b\t\n\f\r\x01\x1f',
            },
        },
        "body": b"[[2,3],{}]",
    },
]


class _Recorder:
    """The part of a node's outbox that an actor's reply and a worker's result
    document use (``actors.Outbox``): fixed ids and times, and what was sent."""

    def __init__(self, message_id: str, now_ms: int) -> None:
        self.message_id = message_id
        self.now_ms = now_ms
        self.sent: list[Envelope] = []

    def new_message_id(self) -> str:
        return self.message_id

    def now(self) -> float:
        return self.now_ms / 1000

    def reply(self, envelope: Envelope, *, quiet: bool = False) -> bool:
        self.sent.append(envelope)
        return True


def _reply() -> Envelope:
    """§13.3: calculator's reply to the request of §13.2 (the "request" vector)."""
    request = Envelope(
        message_id="c0ffee-0001",
        to="calculator",
        subject="add",
        body=[[2, 3], {}],
        reply_to=REPLY_TO,
        creation_time=CREATED_MS / 1000,
    )
    outbox = _Recorder(f"{NODE}-0", CREATED_MS + 12)
    send_reply(cast(Outbox, outbox), "calculator", request, STATUS_OK, 5)
    [reply] = outbox.sent
    return reply


def _task_command(subject: str) -> Envelope:
    """A task command sent to the pool ``celery`` (§14.2), as its worker took it."""
    return Envelope(
        message_id="c0ffee-0005",
        to="celery",
        subject=subject,
        body=[[2, 3], {}],
        kind=KIND_COMMAND,
        reply_to=REPLY_TO,
        correlation_id=TASK_ID,
        creation_time=CREATED_MS / 1000,
        headers={"task_id": TASK_ID, "retries": 0},
    )


def _result_document(subject: str, state: str, body: Any, at_ms: int) -> Envelope:
    """§14.4: the document a worker sends to the caller of ``subject``."""
    request = _task_command(subject)
    outbox = _Recorder(f"{WORKER}-7", at_ms)
    headers = document_headers(request, state)
    return result_document(cast(Outbox, outbox), request, REPLY_TO, body, headers)


DOCUMENTS: list[tuple[str, Envelope]] = [
    ("reply", _reply()),
    ("result document SUCCESS", _result_document("tasks.add", "SUCCESS", 5, CREATED_MS + 250)),
    (
        "result document FAILURE",
        _result_document(
            "tasks.nope",
            "FAILURE",
            {
                "type": "UnknownTask",
                "message": "pool 'celery' has no task 'tasks.nope' (it has: tasks.add)",
            },
            CREATED_MS + 30,
        ),
    ),
]


def session_offer(identity: IdentityKey) -> SessionOffer:
    """The fixed session: expires one hour after the messages were made."""
    return SessionOffer(SESSION_ID, MAC_KEY, (CREATED_MS + 3_600_000) / 1000, identity.key_id)


def _signatures(props: dict[str, object]) -> dict[str, object]:
    sig = props["sig"]
    assert isinstance(sig, bytes)
    return {"sig_alg": props["sig_alg"], "sig_key": props["sig_key"], "sig_hex": sig.hex()}


def _vector(identity: IdentityKey, offer: SessionOffer, message: dict[str, Any]) -> dict[str, Any]:
    canonical = canonical_bytes(**message["fields"], body=message["body"])
    vector = {
        "name": message["name"],
        "fields": message["fields"],
        "body_hex": message["body"].hex(),
        "canonical_hex": canonical.hex(),
        "ed25519": _signatures(sign_ed25519(identity, canonical)),
    }
    if message["fields"]["subject"] != "$session":
        vector["hmac-sha256"] = _signatures(sign_hmac(offer.session(), canonical))
    for form in ("ed25519", "hmac-sha256"):
        if form in vector:  # sig_node travels beside the signature (§11.3)
            vector[form]["sig_node"] = message["fields"]["node"]
    return vector


def _recording(sign: Callable[[bytes], Mapping[str, object]], into: list[bytes]) -> Any:
    def signer(canonical: bytes) -> Mapping[str, object]:
        into.append(canonical)
        return sign(canonical)

    return signer


def _document_vector(
    identity: IdentityKey, offer: SessionOffer, name: str, document: Envelope
) -> dict[str, Any]:
    """A reply or result document, signed in each form as a node signs it on
    a reply link (§8.1), with the message as the node writes it."""
    body = json_dumps(document.body)
    fields: dict[str, Any] = {
        "node": REPLY_NODE,
        "to": document.to,
        "subject": document.subject,
        "message_id": document.message_id,
        "correlation_id": document.correlation_id,
        "reply_to": document.reply_to,
        "creation_ms": to_ms(document.creation_time),
        "expiry_ms": to_ms(document.expiry_time),
        "kind": document.kind,
        # as they travel: the node's writer adds lang (and kind, which is fields.kind)
        "headers": {"lang": "py", **document.headers},
    }
    canonical = canonical_bytes(**fields, body=body)
    vector: dict[str, Any] = {
        "name": name,
        "fields": fields,
        "body_hex": body.hex(),
        "canonical_hex": canonical.hex(),
    }
    forms = (
        ("ed25519", functools.partial(sign_ed25519, identity)),
        ("hmac-sha256", SessionSigner(offer.session())),
    )
    for form, sign in forms:
        signed: list[bytes] = []
        message = encode_reply(document, _recording(sign, signed))
        # What the node signed is what this vector says the canonical bytes are.
        assert signed == [canonical], f"{name}: the node signs other bytes than canonical_hex"
        vector[form] = {**_signatures(dict(sign(canonical))), "sig_node": REPLY_NODE}
        vector[form]["message_hex"] = message.hex()
    return vector


def _reply_proof_vector(identity: IdentityKey) -> dict[str, Any]:
    """§8: the proof that the client of §13 attaches its named reply address
    with, made by the node's own code for fixed proof_id and proof_time."""
    address = own_reply_address(CLIENT, identity.key_id)
    fields: dict[str, Any] = {
        "node": NODE,
        "to": address,
        "subject": PROOF_SUBJECT,
        "message_id": PROOF_ID,
        "correlation_id": None,
        "reply_to": None,
        "creation_ms": PROOF_MS,
        "expiry_ms": None,
        "kind": "command",
        "headers": {},
    }
    canonical = canonical_bytes(**fields, body=b"")
    # What the node's proof signs is what this vector says the canonical bytes are.
    assert proof_canonical(NODE, address, PROOF_ID, PROOF_MS) == canonical
    props = {
        str(k): v for k, v in proof_properties(identity, NODE, address, PROOF_ID, PROOF_MS).items()
    }
    sig = props["sig"]
    assert isinstance(sig, bytes)
    return {
        "name": "reply proof",
        "fields": fields,
        "body_hex": "",
        "canonical_hex": canonical.hex(),
        "properties": {
            "sig_alg": props["sig_alg"],
            "sig_key": props["sig_key"],
            "sig_hex": sig.hex(),
            "sig_node": props["sig_node"],
            "proof_id": props["proof_id"],
            "proof_time": int(cast(int, props["proof_time"])),
        },
    }


def _identity_vector() -> dict[str, Any]:
    """§11.2: the one message a node sends on an ``$identity`` link, as the
    node's own code writes it (unsigned), for a fixed id and time."""
    created_ms = CREATED_MS + 5
    fields = {
        "node": NODE,
        "name": NODE_NAME,
        "message_id": IDENTITY_ID,
        "creation_ms": created_ms,
    }
    document = identity_document(NODE, NODE_NAME, IDENTITY_ID, created_ms / 1000)
    return {
        "name": "identity document",
        "fields": fields,
        "body_hex": json_dumps(document.body).hex(),
        "message_hex": encode(document).hex(),
    }


def build() -> dict[str, Any]:
    """The whole test-vector document."""
    identity = IdentityKey.from_seed(SEED)
    offer = session_offer(identity)
    session_message = {
        "name": "session",
        "fields": {
            "node": NODE,
            "to": "$session",
            "subject": "$session",
            "message_id": "c0ffee-0000",
            "correlation_id": None,
            "reply_to": None,
            "creation_ms": CREATED_MS - 1000,
            "expiry_ms": None,
            "kind": "command",
            "headers": {"lang": "js"},
        },
        "body": offer.body(NODE),
    }
    return {
        "about": "Test vectors for message authentication, docs/protocol.md section 11 "
        "(actorctl-auth-v2), with the reply proof of section 8 and the $identity "
        "document of section 11.2. Written by docs/make_test_vectors.py; checked by "
        "tests/docs/test_vectors.py.",
        "identity": {
            "seed_hex": SEED.hex(),
            "public_key_hex": identity.public.raw.hex(),
            "key_id": identity.key_id,
        },
        "session": {
            "id": SESSION_ID,
            "mac_key_hex": MAC_KEY.hex(),
            "expires_ms": round(offer.expires * 1000),
            "node": NODE,
            "issuer_key_id": identity.key_id,
        },
        "messages": [_vector(identity, offer, m) for m in (session_message, *MESSAGES)],
        "documents": [_document_vector(identity, offer, n, d) for n, d in DOCUMENTS],
        "reply_proof": _reply_proof_vector(identity),
        "identity_document": _identity_vector(),
    }


PATH = Path(__file__).with_name("test-vectors.json")


def text() -> str:
    """The file as this script writes it."""
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    PATH.write_text(text(), encoding="utf-8")
    print(f"wrote {PATH}")


if __name__ == "__main__":
    main()
