"""docs/test-vectors.json and docs/protocol.md's examples against the node's code.

Every vector of the file (the messages, the signed documents, the reply proof
and the ``$identity`` message, docs/protocol.md §11.9) is made again from the
code that a node runs, and from §11.2 written again from its text; the script
that writes the file must write it as it is; and the examples the protocol page
shows (canonical forms, the ``$identity`` body, the JSON texts of §11.2's
table, the list and count of vectors) are the code's bytes. So the vectors,
the page and the code cannot drift apart.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import struct
from pathlib import Path
from typing import Any

from proton import Message, symbol, timestamp

from actorctl.cluster.link._identity import identity_document
from actorctl.cluster.link._reply_auth import ReplyCheck
from actorctl.cluster.link._reply_claims import (
    proof_canonical,
    proof_properties,
    reply_address_refusal,
)
from actorctl.mailbox import decode, encode, json_dumps
from actorctl.mailbox._signing import (
    IdentityKey,
    Keyring,
    Session,
    SessionOffer,
    SessionTable,
    Verifier,
    canonical_bytes,
    sign_ed25519,
    sign_hmac,
)

VECTORS = Path(__file__).parents[2] / "docs" / "test-vectors.json"
NOW = 1_767_225_600.0  # when the vectors' messages were made (2026-01-01T00:00:00Z)
#: Fields of one message, for reading a header value's JSON text off the code.
FIELDS: dict[str, Any] = {
    "node": "server-0123456789ab",
    "to": "calculator",
    "subject": "add",
    "message_id": "m-1",
    "correlation_id": None,
    "reply_to": None,
    "creation_ms": int(NOW * 1000),
    "expiry_ms": None,
    "kind": "command",
    "headers": {},
    "body": b"[[2,3],{}]",
}


def _reference_canonical(fields: dict[str, Any], body: bytes) -> bytes:
    """docs/protocol.md §11.2 written again from the text, as another language would."""

    def item(raw: bytes | None) -> bytes:
        return b"\xff\xff\xff\xff" if raw is None else len(raw).to_bytes(4, "big") + raw

    def optional(value: str | int | None) -> bytes | None:
        return str(value).encode() if value else None  # "" and 0 are absent too

    out = b"actorctl-auth-v2\n"
    names = ("node", "to", "subject", "message_id")
    out += b"".join(item(fields[name].encode()) for name in names)
    for name in ("correlation_id", "reply_to", "creation_ms", "expiry_ms"):
        out += item(optional(fields[name]))
    out += item(fields["kind"].encode())
    headers = sorted(
        (
            k.encode(),
            json.dumps(v, separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode(),
        )
        for k, v in fields["headers"].items()
        if v is not None and k not in ("kind", "lang", "sig_alg", "sig_key", "sig", "sig_node")
    )
    out += len(headers).to_bytes(4, "big")
    for key, value in headers:
        out += item(key) + item(value)
    return out + item(body)


def _vector_file() -> dict[str, Any]:
    vectors: dict[str, Any] = json.loads(VECTORS.read_text(encoding="utf-8"))
    return vectors


def _all_vectors() -> list[dict[str, Any]]:
    """Every vector of the file, in the order §11.9 lists them."""
    vectors = _vector_file()
    return [
        *vectors["messages"],
        *vectors["documents"],
        vectors["reply_proof"],
        vectors["identity_document"],
    ]


def test_the_published_test_vectors_match_the_code() -> None:
    vectors = _vector_file()
    identity = IdentityKey.from_seed(bytes.fromhex(vectors["identity"]["seed_hex"]))
    # RFC 8032 7.1 TEST 1 fixes this public key for that seed.
    assert (
        identity.public.raw.hex()
        == vectors["identity"]["public_key_hex"]
        == ("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
    )
    assert identity.key_id == vectors["identity"]["key_id"]
    spec = vectors["session"]
    session = Session(
        spec["id"], bytes.fromhex(spec["mac_key_hex"]), identity.key_id, spec["expires_ms"] / 1000
    )
    assert [v["name"] for v in vectors["documents"]] == [
        "reply",
        "result document SUCCESS",
        "result document FAILURE",
    ]
    for vector in [*vectors["messages"], *vectors["documents"], vectors["reply_proof"]]:
        body = bytes.fromhex(vector["body_hex"])
        canonical = canonical_bytes(**vector["fields"], body=body)
        assert canonical.hex() == vector["canonical_hex"], vector["name"]
        assert _reference_canonical(vector["fields"], body) == canonical, vector["name"]
        # a reply proof's signature is among its attach properties (§8)
        signed = vector["ed25519"] if "ed25519" in vector else vector["properties"]
        assert signed["sig_alg"] == "ed25519"
        assert sign_ed25519(identity, canonical)["sig"] == bytes.fromhex(signed["sig_hex"])
        assert signed["sig_node"] == vector["fields"]["node"]
        if "hmac-sha256" in vector:
            mac = bytes.fromhex(vector["hmac-sha256"]["sig_hex"])
            assert sign_hmac(session, canonical)["sig"] == mac
            assert vector["hmac-sha256"]["sig_node"] == vector["fields"]["node"]
    # The session message carries the vector's session, for its node
    offer = SessionOffer(session.id, session.mac_key, session.expires, identity.key_id)
    assert offer.body(spec["node"]).hex() == vectors["messages"][0]["body_hex"]


def test_a_reply_vector_names_no_node_as_the_empty_text() -> None:
    # §8.1: field 0 of a reply is 00 00 00 00 (length 0), not absent (ff ff ff ff).
    for vector in _vector_file()["documents"]:
        canonical = bytes.fromhex(vector["canonical_hex"])
        assert vector["fields"]["node"] == ""
        assert canonical.startswith(b"actorctl-auth-v2\n" + bytes(4) + b"\x00\x00\x00\x27$reply/")


def test_the_documents_as_written_verify_at_the_nodes_own_reply_check() -> None:
    """What a node signs is what it writes: each document's message, decoded and
    checked by a node's reply link (ReplyCheck, both forms), is accepted with
    its body, and refused once a covered byte is changed."""
    vectors = _vector_file()
    identity = IdentityKey.from_seed(bytes.fromhex(vectors["identity"]["seed_hex"]))
    spec = vectors["session"]
    offer = SessionOffer(
        spec["id"], bytes.fromhex(spec["mac_key_hex"]), spec["expires_ms"] / 1000, identity.key_id
    )

    def clock() -> float:
        return NOW + 1  # within the session, which ends an hour after NOW

    for vector in vectors["documents"]:
        fields = vector["fields"]
        body = bytes.fromhex(vector["body_hex"])
        check = ReplyCheck(Keyring(identity), fields["to"], "server", clock)
        other = ReplyCheck(Keyring(identity), "$reply/other", "server", clock)
        for caller in (check, other):
            caller.connected(None)
            caller.offered(offer)
        for form in ("ed25519", "hmac-sha256"):
            message = bytes.fromhex(vector[form]["message_hex"])
            reply = check.check(message)
            assert reply is not None, (vector["name"], form)
            assert json_dumps(reply.body) == body
            assert (reply.message_id, reply.correlation_id, reply.subject) == (
                fields["message_id"],
                fields["correlation_id"],
                fields["subject"],
            )
            for key, value in fields["headers"].items():
                if key != "lang":  # informative: a reader need not keep it (§6.2)
                    assert reply.headers[key] == value, (vector["name"], key)
            # Another body, or another reply address: refused.
            assert message.endswith(body)
            assert check.check(message[: -len(body)] + b"6" * len(body)) is None
            assert other.check(message) is None, (vector["name"], form)


def test_a_reply_check_holds_a_session_no_longer_than_it_lasts() -> None:
    """The caller finds the session of the last reply without a look-up
    (``ReplyCheck._last``): a reply signed in it is refused all the same once
    the session is over, or once the connection it was handed on is gone,
    until it is handed again."""
    vectors = _vector_file()
    identity = IdentityKey.from_seed(bytes.fromhex(vectors["identity"]["seed_hex"]))
    spec = vectors["session"]
    offer = SessionOffer(
        spec["id"], bytes.fromhex(spec["mac_key_hex"]), spec["expires_ms"] / 1000, identity.key_id
    )
    vector = vectors["documents"][0]
    message = bytes.fromhex(vector["hmac-sha256"]["message_hex"])
    now = [NOW + 1]
    check = ReplyCheck(Keyring(identity), vector["fields"]["to"], "server", lambda: now[0])
    check.connected(None)
    check.offered(offer)
    assert check.check(message) is not None  # and its session is the last one now
    now[0] = offer.expires
    assert check.check(message) is None, "accepted in a session that is over"
    now[0] = NOW + 1
    assert check.check(message) is not None
    check.connected(None)  # a new connection: what was handed on the last one is over
    assert check.check(message) is None, "accepted in a session of the last connection"
    check.offered(offer)
    assert check.check(message) is not None


def _make_test_vectors() -> Any:
    spec = importlib.util.spec_from_file_location(
        "make_test_vectors", VECTORS.with_name("make_test_vectors.py")
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_vector_file_is_what_make_test_vectors_writes_now() -> None:
    # A change to the node's signing, replies or documents changes the vectors:
    # run `python docs/make_test_vectors.py` and commit the file with the change.
    assert VECTORS.read_text(encoding="utf-8") == _make_test_vectors().text(), (
        "docs/test-vectors.json is stale: run docs/make_test_vectors.py"
    )


# --- docs/protocol.md's examples -----------------------------------------------------

PROTOCOL = VECTORS.with_name("protocol.md")
_HEX_BYTE = re.compile(r"[0-9a-f]{2}")


def _canonical_dumps(text: str) -> list[bytes]:
    """The hex dumps of canonical forms in ``text``: each fenced block that starts
    with the prefix's bytes, read as the leading hex bytes of each of its lines."""
    dumps = []
    for block in re.findall(r"```\n(.*?)```", text, flags=re.DOTALL):
        if not block.startswith("61 63 74 6f 72 63 74 6c"):
            continue
        raw = bytearray()
        for line in block.splitlines():
            for token in line.split():
                if not _HEX_BYTE.fullmatch(token):
                    break
                raw.append(int(token, 16))
        dumps.append(bytes(raw))
    return dumps


def test_the_canonical_forms_in_the_protocol_are_the_codes() -> None:
    text = PROTOCOL.read_text(encoding="utf-8")
    by_name = {v["name"]: v for v in _all_vectors() if "canonical_hex" in v}
    dumps = _canonical_dumps(text)
    # §8 shows the reply proof, §8.1 the reply, §11.2 the minimal event; each is
    # the code's bytes, and as long as the page says.
    expected = [
        (by_name["reply proof"], 173),
        (by_name["reply"], 202),
        (by_name["minimal event"], 153),
    ]
    assert len(dumps) == len(expected)
    for dump, (vector, size) in zip(dumps, expected, strict=True):
        body = bytes.fromhex(vector["body_hex"])
        assert dump == canonical_bytes(**vector["fields"], body=body), vector["name"]
        assert dump.hex() == vector["canonical_hex"], vector["name"]
        said = rf'the "{vector["name"]}" (document )?vector of §11\.9 \({size} bytes\)'
        assert re.search(said, text.replace("\n", " ")), vector["name"]
        assert len(dump) == size, vector["name"]
    proof = by_name["reply proof"]
    assert proof_canonical(
        proof["fields"]["node"],
        proof["fields"]["to"],
        proof["properties"]["proof_id"],
        proof["properties"]["proof_time"],
    ) == bytes.fromhex(proof["canonical_hex"])


def _table_row(text: str, first_cell: str) -> str:
    [row] = [line for line in text.splitlines() if line.startswith(f"| {first_cell} ")]
    return row


def _json_text_of(value: object) -> str:
    """A header value's JSON text as the canonical form writes it."""
    canonical = canonical_bytes(**{**FIELDS, "headers": {"x": value}})
    start = canonical.index(b"\x00\x00\x00\x01x") + 5  # one header, key "x"
    length = struct.unpack(">I", canonical[start : start + 4])[0]
    return canonical[start + 4 : start + 4 + length].decode()


def test_the_json_texts_in_the_protocols_table_are_the_codes() -> None:
    text = PROTOCOL.read_text(encoding="utf-8")
    doubles = re.findall(r"`([^`]+)`", _table_row(text, "`double`, `float`").split("|")[2])
    examples = [d for d in doubles if d not in ("d.ddde±XX",)]
    assert "30.5" in examples
    assert "Infinity" in examples
    for example in examples:
        assert _json_text_of(float(example)) == example or (
            example == "NaN" and _json_text_of(math.nan) == "NaN"
        ), example
    integers = re.findall(r"`(-?[0-9]+)`", _table_row(text, "integer types").split("|")[2])
    assert integers == ["0", "-17", "18446744073709551615"]
    for example in integers:
        assert _json_text_of(int(example)) == example
    compound = re.findall(r"`([\[{][^`]*)`", _table_row(text, "`list`, `map`").split("|")[2])
    assert compound == ['[1,"a",true,null]', '{"a":1,"b":[]}']
    for example in compound:
        assert _json_text_of(json.loads(example)) == example
    assert _json_text_of(True) == "true"
    assert _json_text_of(False) == "false"
    # "Zürich" is the 9 bytes 22 5a c3 bc 72 69 63 68 22.
    row = _table_row(text, "`string`, `symbol`, `uuid` (its lowercase canonical text)")
    hex_text = re.search(r"the 9 bytes `([0-9a-f ]+)`", row)
    assert hex_text is not None
    assert _json_text_of("Zürich").encode() == bytes.fromhex(hex_text.group(1))


def test_the_reply_proof_vector_is_the_nodes_and_the_node_takes_it() -> None:
    """§8: the reply proof of the vectors is what the node's own code makes for
    that proof id and time, and the node's attach check takes it, for that node
    only, once, and not with a byte of its signature changed."""
    vectors = _vector_file()
    identity = IdentityKey.from_seed(bytes.fromhex(vectors["identity"]["seed_hex"]))
    vector = vectors["reply_proof"]
    fields, props = vector["fields"], vector["properties"]
    node, address = fields["node"], fields["to"]
    canonical = canonical_bytes(**fields, body=b"")
    assert vector["body_hex"] == ""
    assert canonical.hex() == vector["canonical_hex"]
    assert _reference_canonical(fields, b"") == canonical
    assert fields["message_id"] == props["proof_id"]
    assert fields["creation_ms"] == props["proof_time"]
    made = proof_properties(identity, node, address, props["proof_id"], props["proof_time"])
    assert {str(k) for k in made} == {
        "sig_alg",
        "sig_key",
        "sig",
        "sig_node",
        "proof_id",
        "proof_time",
    }
    assert made[symbol("sig")] == bytes.fromhex(props["sig_hex"])
    for key in ("sig_alg", "sig_key", "sig_node", "proof_id", "proof_time"):
        assert made[symbol(key)] == props[key], key
    assert isinstance(made[symbol("proof_time")], timestamp)  # an AMQP timestamp, §8
    assert props["sig_key"] == identity.key_id
    assert address == f"$reply/{identity.key_id}/client-7c9e"

    # The attach properties as they arrive (symbol keys, a binary, a timestamp)
    arriving = {
        symbol("sig_alg"): props["sig_alg"],
        symbol("sig_key"): props["sig_key"],
        symbol("sig"): bytes.fromhex(props["sig_hex"]),
        symbol("sig_node"): props["sig_node"],
        symbol("proof_id"): props["proof_id"],
        symbol("proof_time"): timestamp(props["proof_time"]),
    }

    def refusal(properties: dict[Any, Any], at_node: str, verifier: Verifier) -> str | None:
        return reply_address_refusal(
            address,
            "client-7c9e",
            None,
            dynamic=False,
            node=at_node,
            verifier=verifier,
            properties=properties,
            claim=lambda _address, _subject: True,
        )

    def node_verifier(container_id: str) -> Verifier:
        keyring = Keyring(IdentityKey.generate("server"), [identity.public])
        clock = (props["proof_time"] + 1000) / 1000
        return Verifier(keyring, SessionTable(), node=container_id, clock=lambda: clock)

    server = node_verifier(node)
    assert refusal(arriving, node, server) is None
    # A copy of the proof is a replay; another node refuses it as not its own.
    replayed = refusal(arriving, node, server)
    assert replayed is not None
    assert "actorctl:replay" in replayed
    other = "server-ffffffffffff"
    elsewhere = refusal(arriving, other, node_verifier(other))
    assert elsewhere is not None
    assert "actorctl:wrong-node" in elsewhere
    changed = bytearray(arriving[symbol("sig")])
    changed[0] ^= 1
    forged = refusal({**arriving, symbol("sig"): bytes(changed)}, node, node_verifier(node))
    assert forged is not None
    assert "actorctl:bad-signature" in forged


def test_the_identity_document_vector_is_what_a_node_sends_on_identity() -> None:
    """§11.2: the message of an ``$identity`` link, as the node's own code
    writes it, decodes to the vector's fields, unsigned; the page's example body
    is its body."""
    vector = _vector_file()["identity_document"]
    fields = vector["fields"]
    document = identity_document(
        fields["node"], fields["name"], fields["message_id"], fields["creation_ms"] / 1000
    )
    message = encode(document)
    assert message.hex() == vector["message_hex"]
    assert json_dumps(document.body).hex() == vector["body_hex"]
    assert message.endswith(bytes.fromhex(vector["body_hex"]))
    read = decode(message)
    assert read.body == {"node": fields["node"], "name": fields["name"]}
    assert (read.message_id, read.subject, read.kind) == (
        fields["message_id"],
        "$identity",
        "document",
    )
    assert read.creation_time is not None
    assert round(read.creation_time * 1000) == fields["creation_ms"]
    # As any AMQP library reads it: the properties §11.2 lists, and no signature
    wire = Message()
    wire.decode(message)
    assert (wire.address, wire.subject, wire.content_type) == (
        "$identity",
        "$identity",
        "application/json",
    )
    properties: dict[str, Any] = dict(wire.properties or {})
    assert not {"sig", "sig_alg", "sig_key", "sig_node"} & set(properties)
    assert properties["kind"] == "document"
    body = bytes.fromhex(vector["body_hex"]).decode()
    assert f"For the node of §13 it is\n  `{body}`" in PROTOCOL.read_text(encoding="utf-8")


def test_the_protocol_lists_every_vector_and_counts_them() -> None:
    """§11.9 names each vector of the file, and says how many there are."""
    text = PROTOCOL.read_text(encoding="utf-8")
    section = text[text.index("### 11.9 Test vectors") : text.index("### 11.10")]
    vectors = _all_vectors()
    names = [v["name"] for v in vectors]
    assert len(names) == len(set(names)) == 10
    for name in names:
        assert f"`{name}`" in section, name
    assert f"That is {len(vectors)} vectors in all" in section
    counts = (len(_vector_file()["messages"]), len(_vector_file()["documents"]))
    assert f"{counts[0]} messages, {counts[1]} documents" in section.replace("\n", " ")
