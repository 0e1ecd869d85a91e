"""Message authentication building blocks, with real crypto: the canonical byte form,
Ed25519 keys and keyrings, HMAC sessions, the replay cache and the verifier.
(docs/test-vectors.json and the protocol page's examples: tests/docs/test_vectors.py.)"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
import trustme
from hypothesis import given, settings
from hypothesis import strategies as st

from actorctl import ConfigError, WireFormatError
from actorctl.mailbox import Role
from actorctl.mailbox._signing import (
    BAD_SESSION,
    BAD_SIGNATURE,
    ED25519,
    HMAC_SHA256,
    REPLAY,
    STALE,
    UNAUTHENTICATED,
    UNKNOWN_KEY,
    UNKNOWN_SESSION,
    AuthError,
    IdentityKey,
    Keyring,
    PublicKey,
    ReplayCache,
    Session,
    SessionOffer,
    SessionTable,
    Verified,
    Verifier,
    canonical_bytes,
    sign_ed25519,
    sign_hmac,
)

NOW = 1_767_225_600.0  # seconds since the epoch; every test's clock starts here
NOW_MS = int(NOW * 1000)

FIELDS: dict[str, Any] = {
    "node": "server-0123456789ab",
    "to": "calculator",
    "subject": "add",
    "message_id": "m-1",
    "correlation_id": "c-1",
    "reply_to": "$reply/abc",
    "creation_ms": NOW_MS,
    "expiry_ms": NOW_MS + 30_000,
    "kind": "command",
    "headers": {"kind": "command", "lang": "py", "retries": 2, "trace": "t-1", "urgent": True},
    "body": b"[[2,3],{}]",
}


class Clock:
    """A wall clock that tests move by hand."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Rig:
    """One sender identity and one receiver that trusts it, with an open session."""

    def __init__(self, window: float = 300.0) -> None:
        self.identity = IdentityKey.generate("sender")
        self.clock = Clock()
        self.sessions = SessionTable()
        self.verifier = Verifier(
            Keyring(IdentityKey.generate("receiver"), [self.identity.public]),
            self.sessions,
            clock=self.clock,
            window=window,
        )
        self.session = SessionOffer.new(self.identity, now=NOW).session()
        self.sessions.add(self.session, NOW)

    def sign(self, form: str, **fields: Any) -> tuple[dict[str, object], bytes]:
        """The application properties (signature included) and canonical bytes."""
        canonical = canonical_bytes(**fields)
        if form == ED25519:
            sig = sign_ed25519(self.identity, canonical)
        else:
            sig = sign_hmac(self.session, canonical)
        return {**fields["headers"], **sig}, canonical

    def verify(self, props: dict[str, object], **fields: Any) -> Verified:
        """Verify a message whose application properties are ``props``."""
        return self.verifier.verify(
            props,
            canonical_bytes(**{**fields, "headers": props}),
            message_id=fields["message_id"],
            creation_ms=fields["creation_ms"],
        )


def _condition(call: Any) -> str:
    with pytest.raises(AuthError) as caught:
        call()
    return caught.value.condition


# --- The canonical form --------------------------------------------------------------


def test_the_canonical_form_is_the_prefix_then_length_prefixed_fields_in_a_fixed_order() -> None:
    def field(raw: bytes) -> bytes:
        return struct.pack(">I", len(raw)) + raw

    canonical = canonical_bytes(
        node="n-1",
        to="calc",
        subject="add",
        message_id="m",
        correlation_id=None,
        reply_to="",
        creation_ms=1000,
        expiry_ms=0,
        kind="event",
        headers={"b": "é", "a": 1, "lang": "py", "kind": "event", "sig": b"x", "n": None},
        body=b"[]",
    )
    assert canonical == (
        b"actorctl-auth-v2\n"
        + field(b"n-1")
        + field(b"calc")
        + field(b"add")
        + field(b"m")
        + b"\xff\xff\xff\xff"  # correlation-id absent
        + b"\xff\xff\xff\xff"  # an empty reply-to is absent too
        + field(b"1000")
        + b"\xff\xff\xff\xff"  # a time of 0 is absent
        + field(b"event")
        + struct.pack(">I", 2)  # two covered headers, by key
        + field(b"a")
        + field(b"1")
        + field(b"b")
        + field('"é"'.encode())
        + field(b"[]")
    )


def test_header_order_and_uncovered_headers_do_not_change_the_canonical_form() -> None:
    # Given the same covered headers in another order, and different uncovered ones
    other = {"urgent": True, "trace": "t-1", "retries": 2, "lang": "js", "sig_alg": "x"}
    # Then the canonical bytes are the same
    assert canonical_bytes(**FIELDS) == canonical_bytes(**{**FIELDS, "headers": other})


def test_header_values_are_compact_sorted_json() -> None:
    headers = {"chain": [{"b": 1, "a": "ü"}], "eta": 1.5, "on": False}
    canonical = canonical_bytes(**{**FIELDS, "headers": headers})
    assert b'[{"a":"\xc3\xbc","b":1}]' in canonical
    assert b"\x00\x00\x00\x031.5" in canonical
    assert b"\x00\x00\x00\x05false" in canonical


def test_a_header_that_json_cannot_hold_is_a_wire_format_error_naming_it() -> None:
    with pytest.raises(WireFormatError, match="'blob'"):
        canonical_bytes(**{**FIELDS, "headers": {"blob": b"\x00"}})
    with pytest.raises(WireFormatError, match="a map key is not a string"):
        canonical_bytes(**{**FIELDS, "headers": {"chain": [{1: "x"}]}})
    with pytest.raises(WireFormatError, match="key 7 is not a string"):
        canonical_bytes(**{**FIELDS, "headers": {7: "x"}})
    with pytest.raises(WireFormatError, match="key 7 is not a string"):
        canonical_bytes(**{**FIELDS, "headers": {"a": 1, 7: "x"}})  # keys of two types


def test_a_null_header_is_left_out_whatever_its_key() -> None:
    # Given headers with null values, one of them under a key that is not a string
    headers = {"retries": 2, 7: None, "gone": None, (1,): None}
    # Then they are left out, as if they were not there (null means absent)
    assert canonical_bytes(**{**FIELDS, "headers": headers}) == canonical_bytes(
        **{**FIELDS, "headers": {"retries": 2}}
    )


# --- Signing and verifying -----------------------------------------------------------


@pytest.mark.parametrize("form", [ED25519, HMAC_SHA256])
def test_a_signed_message_verifies_and_says_who_vouched_for_it(form: str) -> None:
    rig = Rig()
    headers, _ = rig.sign(form, **FIELDS)
    assert rig.verify(headers, **FIELDS) == Verified(rig.identity.key_id, form)


def test_an_unsigned_message_is_unauthenticated() -> None:
    rig = Rig()
    assert _condition(lambda: rig.verify(FIELDS["headers"], **FIELDS)) == UNAUTHENTICATED


def test_an_unknown_algorithm_is_unauthenticated() -> None:
    rig = Rig()
    headers, _ = rig.sign(ED25519, **FIELDS)
    headers["sig_alg"] = "rsa"
    assert _condition(lambda: rig.verify(headers, **FIELDS)) == UNAUTHENTICATED


def test_a_key_the_receiver_does_not_trust_is_unknown() -> None:
    rig = Rig()
    stranger = IdentityKey.generate()
    canonical = canonical_bytes(**FIELDS)
    headers = {**FIELDS["headers"], **sign_ed25519(stranger, canonical)}
    assert _condition(lambda: rig.verify(headers, **FIELDS)) == UNKNOWN_KEY


def test_an_unknown_or_expired_session_is_unknown() -> None:
    rig = Rig()
    stranger = Session("ab" * 16, bytes(32), rig.identity.key_id, NOW + 60)
    canonical = canonical_bytes(**FIELDS)
    headers = {**FIELDS["headers"], **sign_hmac(stranger, canonical)}
    assert _condition(lambda: rig.verify(headers, **FIELDS)) == UNKNOWN_SESSION
    # Given a message in the rig's session, when the session has expired
    rig.clock.now = rig.session.expires
    fields = {**FIELDS, "creation_ms": int(rig.session.expires * 1000)}
    headers, _ = rig.sign(HMAC_SHA256, **fields)
    # Then its session is unknown, and the table no longer holds it
    assert _condition(lambda: rig.verify(headers, **fields)) == UNKNOWN_SESSION
    assert len(rig.sessions) == 0


@pytest.mark.parametrize("form", [ED25519, HMAC_SHA256])
def test_a_wrong_or_malformed_signature_is_a_bad_signature(form: str) -> None:
    rig = Rig()
    headers, _ = rig.sign(form, **FIELDS)
    sig = headers["sig"]
    assert isinstance(sig, bytes)
    headers["sig"] = bytes([sig[0] ^ 1]) + sig[1:]
    assert _condition(lambda: rig.verify(headers, **FIELDS)) == BAD_SIGNATURE
    headers["sig"] = sig.hex()  # text, not binary
    assert _condition(lambda: rig.verify(headers, **FIELDS)) == BAD_SIGNATURE


@pytest.mark.parametrize("offset_ms", [None, -300_001, 300_001])
def test_a_message_without_a_creation_time_or_outside_the_window_is_stale(
    offset_ms: int | None,
) -> None:
    rig = Rig()
    created = None if offset_ms is None else NOW_MS + offset_ms
    fields = {**FIELDS, "creation_ms": created}
    headers, _ = rig.sign(HMAC_SHA256, **fields)
    assert _condition(lambda: rig.verify(headers, **fields)) == STALE


@pytest.mark.parametrize("offset_ms", [-300_000, 300_000])
def test_a_message_at_the_edge_of_the_window_is_accepted(offset_ms: int) -> None:
    rig = Rig()
    fields = {**FIELDS, "creation_ms": NOW_MS + offset_ms}
    headers, _ = rig.sign(HMAC_SHA256, **fields)
    assert rig.verify(headers, **fields).form == HMAC_SHA256


def test_the_same_message_id_from_the_same_key_is_a_replay_in_either_form() -> None:
    rig = Rig()
    # Given a message accepted once
    headers, _ = rig.sign(ED25519, **FIELDS)
    rig.verify(headers, **FIELDS)
    # When it comes again, or with its id under the session of the same issuer
    again, _ = rig.sign(HMAC_SHA256, **FIELDS)
    # Then both are replays
    assert _condition(lambda: rig.verify(headers, **FIELDS)) == REPLAY
    assert _condition(lambda: rig.verify(again, **FIELDS)) == REPLAY


def test_a_message_forgotten_after_it_was_not_executed_is_accepted_again() -> None:
    rig = Rig()
    headers, _ = rig.sign(HMAC_SHA256, **FIELDS)
    verified = rig.verify(headers, **FIELDS)
    # When the receiver released it without executing it
    rig.verifier.forget(verified, FIELDS["message_id"], FIELDS["creation_ms"])
    # Then the sender may send the same bytes again
    assert rig.verify(headers, **FIELDS) == verified


def test_a_bad_signature_is_not_remembered_as_seen() -> None:
    rig = Rig()
    headers, _ = rig.sign(HMAC_SHA256, **FIELDS)
    forged = {**headers, "sig": bytes(32)}
    assert _condition(lambda: rig.verify(forged, **FIELDS)) == BAD_SIGNATURE
    assert rig.verify(headers, **FIELDS).form == HMAC_SHA256


# --- Property: every covered field is covered ----------------------------------------

_JSON_SCALARS = st.one_of(
    st.booleans(), st.integers(), st.text(), st.floats(allow_nan=False, allow_infinity=False)
)
_COVERED_FIELDS = ("node", "to", "subject", "message_id", "kind")


@st.composite
def _one_change(draw: st.DrawFn) -> dict[str, Any]:
    """FIELDS with exactly one covered thing changed."""
    fields = dict(FIELDS)
    what = draw(st.sampled_from([*_COVERED_FIELDS, "optional", "time", "header", "body"]))
    if what in _COVERED_FIELDS:
        fields[what] = draw(st.text().filter(lambda v: v != FIELDS[what]))
    elif what == "optional":
        name = draw(st.sampled_from(["correlation_id", "reply_to"]))
        new = draw(st.none() | st.text())
        if (new or None) == FIELDS[name]:
            new = FIELDS[name] + "x"
        fields[name] = new
    elif what == "time":
        name = draw(st.sampled_from(["creation_ms", "expiry_ms"]))
        new = draw(st.none() | st.integers(min_value=0, max_value=2**62))
        fields[name] = FIELDS[name] + 1 if (new or None) == FIELDS[name] else new
    elif what == "header":
        fields["headers"] = _changed_headers(draw, FIELDS["headers"])
    else:
        body = bytearray(FIELDS["body"])
        body[draw(st.integers(0, len(body) - 1))] ^= draw(st.integers(1, 255))
        fields["body"] = bytes(body)
    return fields


def _changed_headers(draw: st.DrawFn, headers: dict[str, object]) -> dict[str, object]:
    changed = dict(headers)
    covered = sorted(k for k in headers if k not in ("kind", "lang"))
    action = draw(st.sampled_from(["change", "add", "remove"]))
    if action == "add":
        key = draw(st.text().filter(lambda k: k not in headers and not k.startswith("sig")))
        changed[key] = draw(_JSON_SCALARS)
    elif action == "remove":
        del changed[draw(st.sampled_from(covered))]
    else:
        key = draw(st.sampled_from(covered))
        old = json.dumps(headers[key])
        changed[key] = draw(_JSON_SCALARS.filter(lambda v: json.dumps(v) != old))
    return changed


# One rig per form for every example (hypothesis runs a test body many times).
_RIGS = {form: Rig() for form in (ED25519, HMAC_SHA256)}
_SIGNATURES = {
    form: {k: v for k, v in rig.sign(form, **FIELDS)[0].items() if k.startswith("sig")}
    for form, rig in _RIGS.items()
}


@pytest.mark.parametrize("form", [ED25519, HMAC_SHA256])
@settings(max_examples=150, deadline=None)
@given(changed=_one_change())
def test_changing_any_covered_field_makes_the_signature_bad(
    form: str, changed: dict[str, Any]
) -> None:
    # Given a message signed as it was sent
    rig = _RIGS[form]
    signature = _SIGNATURES[form]
    # When one covered field is different on arrival
    headers = {**changed["headers"], **signature}
    canonical = canonical_bytes(**{**changed, "headers": headers})
    # Then the signature does not match
    with pytest.raises(AuthError) as caught:
        rig.verifier.verify(
            headers, canonical, message_id=changed["message_id"], creation_ms=NOW_MS
        )
    assert caught.value.condition == BAD_SIGNATURE


# --- Sessions ------------------------------------------------------------------------


def _session_message(
    rig: Rig,
    offer: SessionOffer,
    node: str = "server",
    form: str = ED25519,
    message_id: str = "s-1",
) -> dict[str, Any]:
    fields = {
        **FIELDS,
        "to": "$session",
        "subject": "$session",
        "message_id": message_id,
        "correlation_id": None,
        "reply_to": None,
        "expiry_ms": None,
        "headers": {},
        "body": offer.body(node),
    }
    headers, canonical = rig.sign(form, **fields)
    return {
        "headers": headers,
        "canonical": canonical,
        "message_id": message_id,
        "creation_ms": fields["creation_ms"],
        "body": fields["body"],
    }


def test_a_session_message_opens_a_session_whose_messages_verify() -> None:
    rig = Rig()
    offer = SessionOffer.new(rig.identity, now=NOW, lifetime=600)
    session = rig.verifier.accept_session(**_session_message(rig, offer), node="server")
    assert session == offer.session()
    assert rig.sessions.get(offer.id, NOW) == session
    canonical = canonical_bytes(**FIELDS)
    headers = {**FIELDS["headers"], **sign_hmac(offer.session(), canonical)}
    verified = rig.verifier.verify(
        headers, canonical, message_id=FIELDS["message_id"], creation_ms=NOW_MS
    )
    assert verified == Verified(rig.identity.key_id, HMAC_SHA256)


def test_a_renewed_session_leaves_the_old_one_valid_until_it_expires() -> None:
    rig = Rig()
    old = SessionOffer.new(rig.identity, now=NOW, lifetime=100)
    new = SessionOffer.new(rig.identity, now=NOW + 80, lifetime=100)
    rig.verifier.accept_session(**_session_message(rig, old, message_id="s-1"), node="server")
    rig.clock.now = NOW + 80
    rig.verifier.accept_session(**_session_message(rig, new, message_id="s-2"), node="server")
    assert rig.sessions.get(old.id, NOW + 99) is not None
    assert rig.sessions.get(new.id, NOW + 99) is not None
    assert rig.sessions.get(old.id, NOW + 100) is None
    assert rig.sessions.get(new.id, NOW + 100) is not None


@pytest.mark.parametrize(
    ("node", "form", "lifetime", "match"),
    [
        ("elsewhere", ED25519, 600, "for node 'elsewhere'"),
        ("server", HMAC_SHA256, 600, "signed ed25519"),
        ("server", ED25519, -1, "expires_ms"),
        ("server", ED25519, 86_401, "expires_ms"),
    ],
)
def test_a_session_for_another_node_not_ed25519_or_with_a_bad_expiry_is_refused(
    node: str, form: str, lifetime: float, match: str
) -> None:
    rig = Rig()
    offer = SessionOffer.new(rig.identity, now=NOW, lifetime=lifetime)
    with pytest.raises(AuthError, match=match) as caught:
        rig.verifier.accept_session(**_session_message(rig, offer, node, form), node="server")
    assert caught.value.condition == BAD_SESSION
    assert rig.sessions.get(offer.id, NOW) is None


def test_a_session_body_that_is_not_json_is_refused() -> None:
    rig = Rig()
    fields = {**FIELDS, "to": "$session", "subject": "$session", "headers": {}, "body": b"nope"}
    headers, canonical = rig.sign(ED25519, **fields)
    with pytest.raises(AuthError, match="not JSON") as caught:
        rig.verifier.accept_session(
            headers, canonical, message_id="m-1", creation_ms=NOW_MS, body=b"nope", node="server"
        )
    assert caught.value.condition == BAD_SESSION


def test_the_session_table_is_bounded_per_issuer_and_in_all() -> None:
    table = SessionTable(max_sessions=3, per_issuer=2)
    a = [Session(f"{i:032x}", bytes(32), "a", NOW + 10) for i in range(3)]
    b = [Session(f"{i + 10:032x}", bytes(32), "b", NOW + 10) for i in range(2)]
    for session in a:
        table.add(session, NOW)
    assert [table.get(s.id, NOW) is not None for s in a] == [False, True, True]
    for session in b:
        table.add(session, NOW)
    assert len(table) == 3
    assert table.get(b[1].id, NOW) is not None


# --- The replay cache ----------------------------------------------------------------


def test_the_replay_cache_forgets_the_oldest_entries_beyond_its_count() -> None:
    cache = ReplayCache(max_entries=3)
    for i in range(4):
        assert not cache.check_and_add(("k", str(i)), until_ms=10_000, now_ms=0)
    assert len(cache) == 3
    assert not cache.check_and_add(("k", "0"), until_ms=10_000, now_ms=0)  # forgotten
    assert cache.check_and_add(("k", "3"), until_ms=10_000, now_ms=0)


def test_the_replay_cache_drops_entries_once_their_window_has_passed() -> None:
    cache = ReplayCache()
    assert not cache.check_and_add(("k", "1"), until_ms=1_000, now_ms=0)
    assert cache.check_and_add(("k", "1"), until_ms=1_000, now_ms=1_000)
    assert not cache.check_and_add(("k", "2"), until_ms=5_000, now_ms=1_001)
    assert len(cache) == 1  # "1" went when "2" came in


def test_the_verifier_forgets_message_ids_after_the_time_window() -> None:
    rig = Rig(window=10)
    headers, _ = rig.sign(HMAC_SHA256, **FIELDS)
    rig.verify(headers, **FIELDS)
    # When the window has passed, the id is no longer held (and a copy would be stale)
    rig.clock.now = NOW + 10.001
    later = {**FIELDS, "message_id": "m-2", "creation_ms": NOW_MS + 10_001}
    headers, _ = rig.sign(HMAC_SHA256, **later)
    rig.verify(headers, **later)
    assert len(rig.verifier.replay) == 1


# --- Keys and keyrings ---------------------------------------------------------------


def test_a_saved_identity_key_loads_back_and_its_private_file_is_0600(tmp_path: Path) -> None:
    key = IdentityKey.generate()
    private, public = key.save(tmp_path, "node-a")
    assert (private.name, public.name) == ("node-a.key", "node-a.pub")
    assert private.stat().st_mode & 0o777 == 0o600
    loaded = IdentityKey.load(private)
    assert loaded.key_id == key.key_id == PublicKey.load(public).key_id
    assert loaded.sign(b"x") == key.sign(b"x")
    with pytest.raises(ConfigError, match="never overwritten"):
        key.save(tmp_path, "node-a")


def test_a_keyring_trusts_every_public_key_and_holds_the_single_private_key(
    tmp_path: Path,
) -> None:
    own, peer = IdentityKey.generate(), IdentityKey.generate()
    own.save(tmp_path, "node-a")
    (tmp_path / "node-b.pub").write_bytes(peer.public.pem())
    ring = Keyring.load(tmp_path)
    assert ring.identity.key_id == own.key_id
    peer_key = ring.trusted(peer.key_id)
    assert peer_key is not None
    assert peer_key.name == "node-b"
    assert ring.trusted("0" * 16) is None


def test_a_key_id_is_the_start_of_the_sha256_of_the_raw_public_key() -> None:
    import hashlib

    key = IdentityKey.generate()
    assert key.key_id == hashlib.sha256(key.public.raw).hexdigest()[:16]


def _keyring_error(tmp_path: Path, name: str | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        Keyring.load(tmp_path, name)
    return str(caught.value)


def test_keyring_errors_name_the_file_and_what_is_wrong(tmp_path: Path) -> None:
    assert "not a directory" in _keyring_error(tmp_path / "nowhere")
    assert "no private key" in _keyring_error(tmp_path)
    IdentityKey.generate().save(tmp_path, "a")
    IdentityKey.generate().save(tmp_path, "b")
    assert "2 private keys (a.key, b.key)" in _keyring_error(tmp_path)
    assert "no private key c.key" in _keyring_error(tmp_path, "c")
    (tmp_path / "junk.pub").write_text("not a key")
    assert f"{tmp_path / 'junk.pub'} is not a PEM public key" in _keyring_error(tmp_path, "a")
    (tmp_path / "junk.pub").unlink()
    (tmp_path / "dir.pub").mkdir()  # unreadable as a file, even for root
    assert f"key file {tmp_path / 'dir.pub'} cannot be read" in _keyring_error(tmp_path, "a")


def test_a_tls_key_in_the_keyring_is_named_as_not_an_identity_key(tmp_path: Path) -> None:
    tls_key = trustme.CA().issue_cert("localhost").private_key_pem.bytes()
    (tmp_path / "node.key").write_bytes(tls_key)
    assert "not an Ed25519 identity key" in _keyring_error(tmp_path)
    assert str(tmp_path / "node.key") in _keyring_error(tmp_path)


def test_only_the_nodes_own_signature_goes_unchecked_never_another_members_claim_of_it() -> None:
    # Given a node's keyring: its own key (a member), another member's, an operator's
    own, other, operator = (IdentityKey.generate(n) for n in ("worker-c", "worker-b", "cli"))
    roles = {own.key_id: Role.MEMBER, other.key_id: Role.MEMBER, operator.key_id: Role.OPERATOR}
    keyring = Keyring(own, [own.public, other.public, operator.public], roles=roles)
    verifier = Verifier(keyring, SessionTable(), node="worker-c")
    # When the node's own key signs for itself (a host relaying its part of a reload)
    # Then nothing is checked against it: it may ask its own node anything
    assert verifier.role(Verified(own.key_id, ED25519), own.key_id) is None
    # When another member signs, for itself or asserting the node's own key as
    # the origin it forwards for, or the node's key asserts an operator's
    # Then each acts as a member at most: a host's key never reaches past its nodes
    assert verifier.role(Verified(other.key_id, ED25519), other.key_id) is Role.MEMBER
    assert verifier.role(Verified(other.key_id, ED25519), own.key_id) is Role.MEMBER
    assert verifier.role(Verified(own.key_id, ED25519), operator.key_id) is Role.MEMBER
