"""Write docs/test-vectors.json: message authentication (docs/protocol.md §11) test vectors.

Every input is fixed (an RFC 8032 seed, a MAC key, a session id, times), and
Ed25519 and HMAC are deterministic, so running this again writes the same file.
tests/test_signing.py recomputes every vector from the file, so the vectors
cannot drift from the code.

    .venv/bin/python docs/make_test_vectors.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from actorctl.mailbox._signing import (
    IdentityKey,
    SessionOffer,
    canonical_bytes,
    sign_ed25519,
    sign_hmac,
)

# RFC 8032 section 7.1, TEST 1: its public key is d75a9801...f707511a.
SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
MAC_KEY = bytes(range(32))
SESSION_ID = "00112233445566778899aabbccddeeff"
NODE = "server-1a2b3c4d5e6f"  # the receiving node's container id (protocol.md §13)
CREATED_MS = 1767225600000  # 2026-01-01T00:00:00Z

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
        "(actorctl-auth-v2). Written by docs/make_test_vectors.py; checked by "
        "tests/test_signing.py.",
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
    }


def main() -> None:
    path = Path(__file__).with_name("test-vectors.json")
    text = json.dumps(build(), indent=2, ensure_ascii=False) + "\n"
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
