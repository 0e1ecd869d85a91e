"""The receiver's reader of messages signed within a session (issue 30): the
signature is read where actorctl's encoder writes it, never decoded into the
application properties, and every message is accepted or refused exactly as
the general reader and :meth:`Verifier.verify` accept or refuse it.

Each case authenticates the same bytes twice, on two receivers in the same
state: once by :func:`authenticate` (which takes the session reader for
actorctl's layout) and once by the general path (``read_message``,
``canonical_of``, ``Verifier.verify``), and compares what each says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Message

from actorctl import Envelope, WireFormatError
from actorctl.mailbox import (
    IdentityKey,
    Keyring,
    SessionSigner,
    _session_read,
    authenticate,
    canonical_of,
    encode,
    read_message,
)
from actorctl.mailbox._session_read import read_in_session, session_tail
from actorctl.mailbox._signing import (
    BAD_SIGNATURE,
    REPLAY,
    REVOKED_KEY,
    STALE,
    UNKNOWN_SESSION,
    WRONG_NODE,
    AuthError,
    SessionOffer,
    SessionTable,
    Verified,
    Verifier,
)

NOW = 1_767_225_600.0
NODE = "server-0123456789ab"
ACTOR = "vault"
SIGNATURE = ("sig_alg", "sig_key", "sig", "sig_node")
# Text that UTF-8 can carry (no lone surrogates).
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=60)


class Receiver:
    """A receiver that trusts one sender and holds one session of it."""

    def __init__(self, sender: IdentityKey, offer: SessionOffer) -> None:
        self.clock = NOW
        self.keyring = Keyring(IdentityKey.generate("server"), [sender.public])
        self.verifier = Verifier(self.keyring, SessionTable(), node=NODE, clock=lambda: self.clock)
        self.verifier.sessions.add(offer.session(), NOW)


class Pair:
    """One sender's session, and two receivers that hold it: ``fast`` for
    :func:`authenticate`, ``general`` for the general path."""

    def __init__(self) -> None:
        self.sender = IdentityKey.generate("client")
        self.offer = SessionOffer.new(self.sender, now=NOW, lifetime=3600)
        self.signer = SessionSigner(self.offer.session())
        self.fast = Receiver(self.sender, self.offer)
        self.general = Receiver(self.sender, self.offer)

    def both(self, change: Callable[[Receiver], Any]) -> None:
        change(self.fast)
        change(self.general)

    def encode(self, envelope: Envelope, node: str = NODE) -> bytes:
        return encode(envelope, signer=self.signer, actor=ACTOR, node=node)

    def outcomes(self, data: bytes, actor: str = ACTOR) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """What each path says of ``data`` (``_outcome``)."""
        return (
            _outcome(lambda: authenticate(self.fast.verifier, actor, data, NODE)),
            _outcome(lambda: _general(self.general.verifier, actor, data)),
        )


def _general(verifier: Verifier, actor: str, data: bytes) -> tuple[object, Verified]:
    """The general path: the whole message read, the signature in its headers."""
    sections = read_message(data)
    if sections is None:  # what authenticate says of it
        raise WireFormatError(
            "a signed message must be one properties, one application-properties and "
            "one data section of the types docs/protocol.md lists"
        )
    properties, app, body = sections
    properties = properties + [None] * (10 - len(properties))
    message_id = str(properties[0])
    try:
        verified = verifier.verify(
            app,
            canonical_of(actor, properties, app, body, NODE),
            message_id=message_id,
            creation_ms=properties[9],
        )
    except AuthError as exc:
        key = app.get("sig_key")
        raise exc.about(message_id, None if key is None else str(key)) from None
    return _unsigned(properties, app, body), verified


def _unsigned(properties: list[Any], app: dict[Any, Any], body: bytes) -> object:
    return properties, {k: v for k, v in app.items() if k not in SIGNATURE}, body


def _read_whole(data: bytes) -> object:
    """What the general reader reads of ``data``, as the session reader gives
    it: the properties padded to ten, the signature properties left out."""
    general = read_message(data)
    assert general is not None
    properties, app, body = general
    return _unsigned(properties + [None] * (10 - len(properties)), app, body)


def _outcome(call: Callable[[], tuple[Any, Verified]]) -> tuple[Any, ...]:
    """``accepted`` with the sections (less the signature properties) and who
    vouched; ``refused`` with the condition, the text and the ids it names; or
    ``unreadable`` with the text."""
    try:
        sections, verified = call()
    except AuthError as exc:
        return ("refused", exc.condition, exc.description, exc.message_id, exc.key_id)
    except WireFormatError as exc:
        return ("unreadable", str(exc))
    return ("accepted", _unsigned(*sections), verified)


def _envelope(message_id: str = "m-1", **changes: Any) -> Envelope:
    fields: dict[str, Any] = {
        "message_id": message_id,
        "to": f"/{ACTOR}",
        "subject": "open",
        "body": [["eve"], {"pad": "x" * 40}],
        "reply_to": "$reply/abc",
        "correlation_id": "c-1",
        "creation_time": NOW,
        "headers": {"trace": "t-1", "retries": 2},
    }
    return Envelope(**{**fields, **changes})


def test_the_encoders_session_layout_is_read_with_its_signature_apart() -> None:
    # Given a message actorctl's encoder signs within a session
    pair = Pair()
    data = pair.encode(_envelope())
    # When the session reader reads it
    tail = session_tail(NODE)
    assert tail is not None
    found = read_in_session(data, tail)
    # Then it gives the general reader's sections without the signature, and
    # the session id and digest the general reader finds in the properties
    general = read_message(data)
    assert found is not None
    assert general is not None
    (properties, app, body), session_id, digest = found
    assert (properties, app, body) == _unsigned(*general)
    assert "sig" not in app
    assert session_id == general[1]["sig_key"] == pair.offer.id
    assert digest == general[1]["sig"]
    # And it is accepted, by the same key, on both paths
    fast, slow = pair.outcomes(data)
    assert fast == slow
    assert fast[2] == Verified(pair.sender.key_id, "hmac-sha256")


def test_each_refusal_is_the_general_paths_own() -> None:
    # Given two receivers in the same state, each change below applied to both
    pair = Pair()
    cases: list[tuple[str, str]] = []

    def case(name: str, data: bytes, actor: str = ACTOR) -> None:
        fast, slow = pair.outcomes(data, actor)
        assert fast == slow, name
        cases.append((name, fast[1] if fast[0] == "refused" else fast[0]))

    good = pair.encode(_envelope("m-good"))
    case("accepted", good)
    case("replayed", good)
    tampered = bytearray(pair.encode(_envelope("m-digest")))
    tampered[tampered.rindex(b"\xa1\x08sig_node") - 32] ^= 1  # the digest's first byte
    case("digest tampered", bytes(tampered))
    body = bytearray(pair.encode(_envelope("m-body")))
    body[-3] ^= 1
    case("body tampered", bytes(body))
    case("wrong actor", pair.encode(_envelope("m-actor")), actor="other")
    case("wrong node", pair.encode(_envelope("m-node"), node="elsewhere"))
    case("stale", pair.encode(_envelope("m-stale", creation_time=NOW - 3000)))
    expiring = pair.encode(_envelope("m-expired", creation_time=NOW + 3600))
    pair.both(lambda r: setattr(r, "clock", NOW + 3600))  # the session's expiry
    case("session expired", expiring)
    # And, with a new session, once the sender's key is revoked (its session is closed)
    pair = Pair()
    pair.both(lambda r: r.keyring.replace([], [pair.sender.public]))
    case("revoked", pair.encode(_envelope("m-revoked")))
    # Then each refusal is the general path's, condition, text and ids alike
    assert cases == [
        ("accepted", "accepted"),
        ("replayed", REPLAY),
        ("digest tampered", BAD_SIGNATURE),
        ("body tampered", BAD_SIGNATURE),
        ("wrong actor", BAD_SIGNATURE),
        ("wrong node", WRONG_NODE),
        ("stale", STALE),
        ("session expired", UNKNOWN_SESSION),
        ("revoked", REVOKED_KEY),
    ]


def test_the_properties_a_tell_repeats_are_read_alike_once_known() -> None:
    # Given tells alike but for their ids and times: the properties between the
    # message-id and the creation-time are the same bytes in each
    pair = Pair()
    tail = session_tail(NODE)
    assert tail is not None
    tells = [
        pair.encode(
            _envelope(
                f"m-{i}",
                subject="tell-known",
                reply_to=None,
                correlation_id=None,
                creation_time=NOW + i,
            )
        )
        for i in range(4)
    ]
    forged = bytearray(tells[3])
    forged[forged.index(b"m-3") + 2] ^= 1  # its message-id, those bytes alike
    verdicts = []
    # When each is read: the first two item by item, the others found by those bytes
    for data in [*tells, bytes(forged)]:
        found = read_in_session(data, tail)
        general = read_message(data)
        assert found is not None
        assert general is not None
        assert found[0] == _unsigned(*general)
        fast, slow = pair.outcomes(data)
        assert fast == slow
        verdicts.append(fast[1] if fast[0] == "refused" else fast[0])
    # Then they read as the general reader reads them, and the forged id is refused
    assert verdicts == ["accepted"] * 4 + [BAD_SIGNATURE]
    assert any(b"tell-known" in middle for middle in _session_read._middles)


@pytest.fixture
def fresh_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader's caches of an ask's properties, empty for this test (they
    are the process's) and given back after it."""
    monkeypatch.setattr(_session_read, "_asks", {})
    monkeypatch.setattr(_session_read, "_asks_once", {})
    monkeypatch.setattr(_session_read, "_last_ask", [None])
    monkeypatch.setattr(_session_read, "_repeats", {})
    monkeypatch.setattr(_session_read, "_repeats_once", {})


def _read_alike(pair: Pair, data: bytes) -> str:
    """``data`` read by the session reader as the general reader reads it, and
    the verdict, the same on both paths: ``accepted`` or the condition."""
    tail = session_tail(NODE)
    assert tail is not None
    found = read_in_session(data, tail)
    if found is not None:
        assert found[0] == _read_whole(data)
    fast, slow = pair.outcomes(data)
    assert fast == slow
    return str(fast[1] if fast[0] == "refused" else fast[0])


@pytest.mark.usefixtures("fresh_asks")
def test_an_asks_properties_are_found_around_its_ids_once_known() -> None:
    # Given asks alike but for their ids, times and expiry (an actor's ask,
    # with an expiry, and a task's, without)
    pair = Pair()
    timed = [
        pair.encode(
            _envelope(
                f"a-{i}",
                subject="ask-kept",
                correlation_id=f"c-{i}",
                creation_time=NOW + i,
                expiry_time=NOW + 30 + i,
            )
        )
        for i in range(4)
    ]
    untimed = [
        pair.encode(_envelope(f"t-{i}", subject="task-kept", correlation_id=f"task-{i}"))
        for i in range(4)
    ]
    # And, once their heads are known: a correlation-id of another length, an
    # ask alike without its expiry, one with another content-type, a forged id
    longer = pair.encode(
        _envelope("a-long", subject="ask-kept", correlation_id="c-" + "9" * 200, expiry_time=NOW)
    )
    no_expiry = pair.encode(_envelope("a-none", subject="ask-kept", correlation_id="c-x"))
    other_type = bytearray(pair.encode(_envelope("a-type", subject="ask-kept", expiry_time=NOW)))
    at = other_type.index(b"application/json")
    other_type[at : at + 16] = b"application/jsox"
    forged = bytearray(timed[3])
    forged[forged.index(b"c-3") + 2] ^= 1  # its correlation-id, its bytes around alike
    others = [longer, no_expiry, bytes(other_type), bytes(forged)]
    # When each is read: the first two of each item by item, the others
    # around their ids, by their heads' bytes
    verdicts = [_read_alike(pair, data) for data in [*timed, *untimed, *others]]
    # Then each reads and is judged as on the general path (the content-type
    # is not signed: the other one is read as it is, and accepted)
    assert verdicts == ["accepted"] * 11 + [BAD_SIGNATURE]
    read = read_message(bytes(other_type))
    assert read is not None
    assert read[0][6] == "application/jsox"
    kept = [head for head in _session_read._asks if b"-kept" in head]
    assert len(kept) == 2
    assert _session_read._last_ask[0] is not None  # found around its ids
    # And an ask's properties are never kept whole (its ids are its own)
    assert not any(b"ask-kept" in middle for middle in _session_read._middles)


@pytest.mark.usefixtures("fresh_asks")
def test_an_ask_around_a_known_head_in_another_layout_is_read_alike() -> None:
    # Given a known head (two asks alike), then asks whose bytes after that
    # head are not what the head's asks hold: a correlation-id as a sym8 (the
    # same text, so the same signature), and one a byte shorter than its size
    pair = Pair()
    for i in range(2):
        data = pair.encode(_envelope(f"k-{i}", creation_time=NOW + i))
        assert _read_alike(pair, data) == "accepted"
    assert _session_read._asks
    good = pair.encode(_envelope("k-9", creation_time=NOW + 9))
    at = good.index(b"\xa1\x03c-1")
    as_symbol = good[:at] + b"\xa3" + good[at + 1 :]
    short = good[:at] + b"\xa1\x02c-" + good[at + 5 :]
    # When each is read, then the same bytes as first written
    verdicts = [_read_alike(pair, data) for data in (as_symbol, short, good)]
    # Then each reads and is judged as on the general path: the sym8 one is
    # the message itself, so the one as written is its replay
    assert verdicts[0] == "accepted"
    assert verdicts[1] in ("unreadable", BAD_SIGNATURE)
    assert verdicts[2] == REPLAY


@pytest.mark.usefixtures("fresh_asks")
def test_a_header_that_repeats_the_correlation_id_is_read_alike_once_known(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given tasks alike but for their ids and times, each with a header that
    # repeats its correlation-id (its task id), between two others
    pair = Pair()

    def task(n: str, task_id: str, **headers: Any) -> bytes:
        return pair.encode(
            _envelope(
                f"t-{n}",
                subject="repeat",
                correlation_id=task_id,
                headers={"pool": "p", "task_id": task_id, "retries": 0, **headers},
            )
        )

    tasks = [task(str(i), f"task-{i}") for i in range(4)]
    # And, once their head is known: a task id of another length, one that
    # another header holds before it, one forged in the header alone, one
    # whose header is given again after it (its last value holds)
    longer = task("long", "task-" + "5" * 180)
    earlier = pair.encode(
        _envelope("t-early", subject="repeat", correlation_id="task-6",
                  headers={"note": "task-6", "pool": "p", "task_id": "task-6", "retries": 0})
    )  # fmt: skip
    forged = bytearray(task("forged", "task-7"))
    forged[forged.rindex(b"task-7") + 5] ^= 1  # the header's, not the correlation-id
    twice = task("twice", "task-8", tazk_id="v")
    twice = twice.replace(b"tazk_id", b"task_id")
    others = [longer, earlier, bytes(forged), twice]
    # When each is read, it reads and is judged as on the general path
    verdicts = [_read_alike(pair, data) for data in [*tasks, *others]]
    assert verdicts == ["accepted"] * 6 + [BAD_SIGNATURE] * 2
    # Then the tasks' map was found around the header, by its head's bytes
    assert any(head.endswith(b"\xa1\x07task_id") for head in _session_read._repeats)
    # (read with no map read pair by pair, its id of another length too)
    maps: list[int] = []
    general_map = _session_read._map

    def counted(*args: Any) -> Any:
        maps.append(1)
        return general_map(*args)

    monkeypatch.setattr(_session_read, "_map", counted)
    tail = session_tail(NODE)
    assert tail is not None
    assert read_in_session(task("9", "task-99999"), tail) is not None
    assert read_in_session(longer, tail) is not None
    assert maps == []
    read = read_message(twice)
    assert read is not None
    assert read[1]["task_id"] == "v"


@pytest.mark.usefixtures("fresh_asks")
def test_asks_cannot_grow_the_readers_cache_past_its_bounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a cache of four heads (the bound, made small), and asks that each
    # come twice with a new head (a peer's attempt to fill it: it is filled
    # before the signature is checked), some with a head too long to keep
    monkeypatch.setattr(_session_read, "_MAX_KEYS", 4)
    pair = Pair()
    news = [
        pair.encode(_envelope(f"b-{n}-{i}", subject=f"new-{n}", creation_time=NOW + i))
        for n in range(12)
        for i in range(2)
    ]
    # When they are read, each reads and is judged as on the general path
    assert {_read_alike(pair, data) for data in news} == {"accepted"}
    # Then the cache holds its bound, the newest heads: a full one was
    # replaced, so the first ones (a peer's junk) never keep them out
    assert len(_session_read._asks) == 4
    assert any(b"new-11" in head for head in _session_read._asks)
    asks = []
    longer = "long-" + "x" * _session_read._MOST_MIDDLE
    asks += [
        pair.encode(_envelope(f"l-{i}", subject=longer, creation_time=NOW + i)) for i in range(3)
    ]
    asks += [  # a header that repeats the correlation-id, after a long one, and new ones
        pair.encode(_envelope(f"r-{n}-{i}", correlation_id=f"c-{n}-{i}", creation_time=NOW + i,
                              headers={"pad": "x" * 600 if n < 2 else f"new-{n}",
                                       "id": f"c-{n}-{i}"}))
        for n in range(12)
        for i in range(2)
    ]  # fmt: skip
    # When each is read, it reads and is judged as on the general path
    assert {_read_alike(pair, data) for data in asks} == {"accepted"}
    # Then the cache and its notes hold no more than their bound, and no
    # head longer than a kept middle may be; a full cache was replaced, so
    # the newest heads are kept (the first ones never keep them out)
    assert len(_session_read._asks) <= 4
    assert any(b"new-11" in head for head in _session_read._repeats)
    assert len(_session_read._asks_once) <= 4
    assert not any(b"long-xxx" in head for head in _session_read._asks)
    assert not any(b"long-xxx" in head for head in _session_read._asks_once)
    assert all(len(head) + len(kept[3]) <= _session_read._MOST_MIDDLE
               for head, kept in _session_read._asks.items())  # fmt: skip
    assert len(_session_read._repeats) <= 4
    assert len(_session_read._repeats_once) <= 4
    assert all(len(head) + len(kept[2]) <= _session_read._MOST_MIDDLE
               for head, kept in _session_read._repeats.items())  # fmt: skip
    assert all(kept[3] == len(kept[2]) for kept in _session_read._repeats.values())


def test_a_tells_long_properties_are_read_alike_and_neither_noted_nor_kept() -> None:
    # Given tells alike but for their ids, with a subject far longer than a
    # tell's usual properties (what a peer could send to fill the cache, which
    # it fills before the signature is checked)
    pair = Pair()
    subject = "long-" + "x" * _session_read._MOST_MIDDLE
    tells = [
        pair.encode(
            _envelope(
                f"l-{i}", subject=subject, reply_to=None, correlation_id=None, creation_time=NOW + i
            )
        )
        for i in range(3)
    ]
    # When each is read, it reads as on the general path
    for data in tells:
        fast, slow = pair.outcomes(data)
        assert fast == slow
        assert fast[0] == "accepted"
    # Then its properties were neither noted nor kept: each entry's size is bounded
    assert not any(b"long-xxx" in middle for middle in _session_read._middles)
    assert not any(b"long-xxx" in middle for middle in _session_read._middles_once)


def test_signature_properties_given_twice_count_as_the_last_on_both_paths() -> None:
    # Given a message whose headers carry signature properties of their own,
    # written before the session's (a forger's attempt to confuse the reader)
    pair = Pair()
    forged = {"sig_alg": "ed25519", "sig_key": "0" * 32, "sig": b"x" * 32, "sig_node": "x"}
    data = pair.encode(_envelope(headers={"trace": "t-1", **forged}))
    # When both paths read it: the session's own, written last, hold on both
    tail = session_tail(NODE)
    assert tail is not None
    assert read_in_session(data, tail) is not None
    fast, slow = pair.outcomes(data)
    assert fast == slow
    assert fast[2] == Verified(pair.sender.key_id, "hmac-sha256")


def test_a_message_in_another_layout_goes_the_general_way_to_the_same_verdict() -> None:
    # Given the same signed message as proton writes it (other constructors)
    pair = Pair()
    message = Message()
    message.decode(pair.encode(_envelope()))
    message.inferred = True  # the body stays a data section
    data = message.encode()
    # When it is authenticated: not read by the session reader, yet accepted
    tail = session_tail(NODE)
    assert tail is not None
    assert read_in_session(data, tail) is None
    verdict = _outcome(lambda: authenticate(pair.fast.verifier, ACTOR, data, NODE))
    assert verdict[2] == Verified(pair.sender.key_id, "hmac-sha256")


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda d: d[:-1], id="truncated"),
        pytest.param(lambda d: d + b"\x00", id="trailing byte"),
        pytest.param(lambda d: d[:40] + b"\xff" + d[41:], id="bad byte in the properties"),
        pytest.param(lambda d: d.replace(b"hmac-sha256", b"hmac-sha257"), id="another algorithm"),
    ],
)
def test_a_damaged_message_is_refused_as_the_general_path_refuses_it(
    damage: Callable[[bytes], bytes],
) -> None:
    pair = Pair()
    data = damage(pair.encode(_envelope()))
    fast, slow = pair.outcomes(data)
    assert fast == slow
    assert fast[0] in ("refused", "unreadable")


@settings(max_examples=60, deadline=None)
@given(
    headers=st.dictionaries(
        TEXT.filter(lambda k: 0 < len(k) <= 10 and k not in ("kind", "lang")),
        st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | TEXT,
        max_size=5,
    ),
    reply_to=st.none() | TEXT.filter(bool),
)
def test_any_headers_read_and_verify_alike_on_both_paths(
    headers: dict[str, object], reply_to: str | None
) -> None:
    pair = Pair()
    fast, slow = pair.outcomes(pair.encode(_envelope(headers=headers, reply_to=reply_to)))
    assert fast == slow
    assert fast[2] == Verified(pair.sender.key_id, "hmac-sha256")


_KNOWN = Pair()
_KNOWN_ASKS = [
    _KNOWN.encode(
        _envelope(f"f-{i}", correlation_id=f"task-{i}", creation_time=NOW + i,
                  expiry_time=NOW + 60 if i % 2 else None,
                  headers={"pool": "p", "task_id": f"task-{i}", "retries": 0})
    )
    for i in range(6)
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    which=st.integers(0, len(_KNOWN_ASKS) - 1),
    changes=st.lists(
        st.tuples(st.floats(0, 1, exclude_max=True),
                  st.sampled_from([0x00, 0x40, 0xA1, 0xA3, 0x83, 0xFF]) | st.integers(0, 255)),
        min_size=1, max_size=3,
    ),
)  # fmt: skip
def test_any_bytes_changed_in_a_known_ask_read_alike_on_both_readers(
    which: int, changes: list[tuple[float, int]]
) -> None:
    # Given asks whose heads and headers are known (each read twice), and
    # one of them with bytes changed anywhere (a forger's or a broken peer's)
    tail = session_tail(NODE)
    assert tail is not None
    for data in _KNOWN_ASKS:
        read_in_session(data, tail)
        read_in_session(data, tail)
    known = _KNOWN_ASKS[which]
    # (their heads are kept: the reader's fast path is what is compared)
    assert any(known.find(head) > 0 for head in _session_read._asks)
    changed = bytearray(known)
    for where, byte in changes:
        changed[int(where * len(changed))] = byte
    # When the session reader reads it, twice (so that it may be kept)
    for _ in range(2):
        found = read_in_session(bytes(changed), tail)
        # Then what it reads is what the general reader reads
        if found is not None:
            assert found[0] == _read_whole(bytes(changed))


@pytest.mark.usefixtures("fresh_asks")
def test_an_ask_that_leaves_its_last_properties_out_is_read_alike() -> None:
    # Given an ask of a known head whose properties end before its
    # creation-time (a list of nine: another client may leave the trailing
    # nulls out, and a creation-time with them)
    pair = Pair()
    for i in range(2):
        assert _read_alike(pair, pair.encode(_envelope(f"n-{i}", creation_time=NOW + i))) == (
            "accepted"
        )
    data = pair.encode(_envelope("n-9"))
    size, count = int.from_bytes(data[4:8], "big"), int.from_bytes(data[8:12], "big")
    assert (count, data[8 + size - 9]) == (10, 0x83)
    head = data[:4] + (size - 9).to_bytes(4, "big") + (9).to_bytes(4, "big")
    nine = head + data[12 : 8 + size - 9] + data[8 + size :]
    # When it is read: by the session reader still, padded to ten
    tail = session_tail(NODE)
    assert tail is not None
    found = read_in_session(nine, tail)
    assert found is not None
    assert found[0][0][9] is None
    # Then it reads and is judged as on the general path (its creation-time
    # was signed: without it, the signature does not hold)
    assert _read_alike(pair, nine) == BAD_SIGNATURE
