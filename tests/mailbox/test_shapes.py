"""The encoder's shapes (``mailbox/_shapes.py``): a message whose shape recurs
is written from its shape's parts, and its bytes, on the wire and signed, are
the general encoder's, byte for byte; bad input fails as it does there."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Message

from actorctl import Envelope, WireFormatError
from actorctl.mailbox import SessionSigner, _shapes, encode, read_message
from actorctl.mailbox._signing import Session

SIGNER = SessionSigner(Session("0123456789abcdef0123456789abcdef", b"k" * 32, "me", 2e9))
OTHER = SessionSigner(Session("fedcba9876543210fedcba9876543210", b"o" * 32, "me", 2e9))


@pytest.fixture(autouse=True)
def fresh_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    """No shape known at the start (the process's shapes are given back after)."""
    for name in ("_shapes", "_older", "_seen", "_seen_older"):
        monkeypatch.setattr(_shapes, name, {})


def general(envelope: Envelope, signer: SessionSigner | None, actor: str, node: str) -> bytes:
    """What the general encoder writes for ``envelope``: the session's signature
    through a plain function (the general path, as its properties), or unsigned
    with no shape known."""
    if signer is None:
        names = ("_shapes", "_older", "_seen", "_seen_older")
        kept = [getattr(_shapes, name) for name in names]
        for name in names:
            setattr(_shapes, name, {})
        try:
            return encode(envelope, actor=actor, node=node)
        finally:
            for name, value in zip(names, kept, strict=True):
                setattr(_shapes, name, value)
    session = signer

    def as_properties(canonical: bytes) -> Mapping[str, object]:
        return session(canonical)

    return encode(envelope, signer=as_properties, actor=actor, node=node)


def shaped(envelope: Envelope, signer: SessionSigner | None, actor: str, node: str) -> bool:
    """Whether ``envelope`` is written from a shape now."""
    found = _shapes.shape_of(envelope, signer, actor, node, _times(envelope))
    return isinstance(found, _shapes.Shape)


def _times(envelope: Envelope) -> tuple[int | None, int | None]:
    creation, expiry = envelope.creation_time, envelope.expiry_time
    return (
        round(creation * 1000) if creation else None,
        round(expiry * 1000) if expiry else None,
    )


def ids(lengths: tuple[int, ...], text: str = "i") -> Iterator[str]:
    """Ids of these lengths (in characters), in turn, each one unique."""
    for n, size in enumerate(itertools.cycle(lengths)):
        stem = f"{text}{n}-"
        yield (stem * (size // len(stem) + 1))[:size] if size >= len(stem) else stem


LONG = "x" * 300
BODIES: list[Any] = [
    7,
    0,
    -(2**70),
    None,
    [[1, 2], {}],
    [["ünïcødé ✓ 📦"], {"k": '"quoted" \\ back\nline'}],
    "",
    {"big": "y" * 100_000},
    {"n": 1.5, "t": True, "f": False, "l": [None]},
]

# Each shape: the envelope's fixed fields, the header values (None: the
# correlation id), which times it has; the signer, actor and node.
SHAPES: list[dict[str, Any]] = [
    # a task's result to its caller, and a task's request to its pool
    dict(to="$reply/2110f7216075ca90/cli-1", subject="bench.add", kind="document",
         headers={"state": "SUCCESS", "task_id": None}, times="c", signer=SIGNER,
         actor="$reply/2110f7216075ca90/cli-1", node=""),
    dict(to="amqps://127.0.0.1:36393/celery", subject="bench.add", kind="command",
         reply_to="$reply/2110f7216075ca90/cli-1", headers={"task_id": None, "pool": "celery"},
         times="c", signer=SIGNER, actor="celery", node="worker-ab2ab74dce6a"),
    # every kind, with and without times, signed or not
    dict(to="/a", subject="s", kind="event", headers={}, times="", signer=None, actor="a",
         node="n"),
    dict(to="/a", subject="s", kind="event", headers={}, times="e", signer=SIGNER, actor="a",
         node="n"),
    dict(to="", subject="", kind="command", reply_to="", headers={}, times="ce",
         signer=SIGNER, actor="", node=""),
    dict(to="/ä/akteur", subject="📦.täsk", kind="command", reply_to="$reply/ü/ß",
         headers={"ключ": "значение", "n": -5, "big": 2**63 - 1, "small": -(2**63)},
         times="ce", signer=SIGNER, actor="akteur-ü", node="knoten-ö"),
    dict(to="/" + LONG, subject=LONG, kind="document", reply_to=LONG,
         headers={"long": "L" * 300, "task_id": None, "again": None, "esc": "a\"b\\c\nd\x01"},
         times="c", signer=SIGNER, actor=LONG, node=LONG),
    dict(to="/a", subject="s", kind="document", headers={"task_id": None}, times="c",
         signer=None, actor="", node=""),
    dict(to="/a", subject="s", kind="odd-kind", headers={"retries": 3}, times="e",
         signer=OTHER, actor="a", node="n"),
]  # fmt: skip

# Correlation ids: None, empty, and of lengths about a str8's bound, in turn.
CORRELATIONS = [None, "", "c", "7" * 32, "ü" * 127, "ü" * 128, "c" * 255, "c" * 256, LONG]
# Times in seconds: 13 digits of ms, fewer, more, negative, one that is 0 ms.
TIMES = [1795947285.4359975, 1.7e9, 12.5, 123456789012.345, -1.5, 0.0001, 2**40]


def messages(shape: dict[str, Any], count: int) -> Iterator[Envelope]:
    """``count`` messages of ``shape``, their ids, bodies and times all different."""
    message_ids = ids((1, 40, 255, 256, 300, 7), "m-ü" if shape["signer"] else "m-")
    correlations = itertools.cycle(CORRELATIONS)
    bodies = itertools.cycle(BODIES)
    times = itertools.cycle(TIMES)
    with_correlation = any(value is None for value in shape["headers"].values())
    for _ in range(count):
        correlation = next(correlations)
        if with_correlation:  # a header carries it: a correlation id it has
            correlation = correlation or "t-1"
        headers = {
            name: correlation if value is None else value
            for name, value in shape["headers"].items()
        }
        yield Envelope(
            message_id=next(message_ids),
            to=shape["to"],
            subject=shape["subject"],
            body=next(bodies),
            kind=shape["kind"],
            reply_to=shape.get("reply_to"),
            correlation_id=correlation,
            creation_time=next(times) if "c" in shape["times"] else None,
            expiry_time=next(times) + 60 if "e" in shape["times"] else None,
            headers=headers,
        )


@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: f"{shape['kind']}-{shape['to'][:20]}")
def test_a_shaped_message_is_the_general_encoders_byte_for_byte(shape: dict[str, Any]) -> None:
    signer, actor, node = shape["signer"], shape["actor"], shape["node"]
    # Given the messages of one shape, of every length of id and body
    sent = list(messages(shape, 3 * len(CORRELATIONS) * len(BODIES)))
    # When they are encoded one after another
    written = []
    for n, envelope in enumerate(sent):
        assert shaped(envelope, signer, actor, node) == (n >= 2 and _same_flags(sent, n))
        written.append(encode(envelope, signer=signer, actor=actor, node=node))
    # Then each (from its shape, from the third on) is what the general encoder writes
    for envelope, data in zip(sent, written, strict=True):
        assert data == general(envelope, signer, actor, node)
        read = Message()  # (and proton reads it)
        read.decode(data)
        assert read.id == envelope.message_id


def _same_flags(sent: list[Envelope], n: int) -> bool:
    """Whether an earlier message had the same shape twice: its correlation id
    present or not (the times' presence is the shape's in every case here)."""
    mine = bool(sent[n].correlation_id)
    return sum(bool(envelope.correlation_id) == mine for envelope in sent[:n]) >= 2


def test_a_reply_of_a_known_shape_is_signed_as_its_caller_checks_it() -> None:
    from actorctl.mailbox._auth import canonical_bytes

    shape = SHAPES[0]
    # Given a task's results to one caller, its shape known
    sent = list(messages(shape, 5))
    for envelope in sent:
        data = encode(envelope, signer=SIGNER, actor=shape["actor"], node="")
    assert shaped(sent[-1], SIGNER, shape["actor"], "")
    # Then the last one's signature is the HMAC of its canonical bytes
    envelope = sent[-1]
    sections = read_message(data)
    assert sections is not None
    creation = round(envelope.creation_time * 1000) if envelope.creation_time else None
    expected = SIGNER(
        canonical_bytes(
            node="",
            to=shape["actor"],
            subject=envelope.subject,
            message_id=envelope.message_id,
            correlation_id=envelope.correlation_id,
            reply_to=None,
            creation_ms=creation,
            expiry_ms=None,
            kind=envelope.kind,
            headers=envelope.headers,
            body=sections[2],
        )
    )
    assert sections[1]["sig"] == expected["sig"]


# Bad input of each kind, in a message whose shape is known by then.
BAD: list[tuple[str, dict[str, Any]]] = [
    ("a message id that is not UTF-8", {"message_id": "m-\ud800"}),
    ("a correlation id that is not UTF-8", {"correlation_id": "\udfff"}),
    ("a subject that is not UTF-8", {"subject": "s\ud800"}),
    ("a header value that is not UTF-8", {"headers": {"task_id": "t", "pool": "\ud800"}}),
    ("a header key that is not text", {"headers": {"task_id": "t", 7: "x"}}),
    ("a header value JSON cannot hold", {"headers": {"task_id": "t", "raw": b"\x00"}}),
    ("a header named as the encoder's own", {"headers": {"task_id": "t", "kind": "x"}}),
    ("an integer header past 64 bits", {"headers": {"task_id": "t", "n": 2**64}}),
    ("a time past 64 bits of ms", {"creation_time": 1e17}),
    ("a time past 255 digits", {"creation_time": 1e300}),
    ("a body that is not JSON", {"body": object()}),
    ("a subject that is not text", {"subject": ["s"]}),
]


@pytest.mark.parametrize(("what", "change"), BAD, ids=[what for what, _ in BAD])
@pytest.mark.parametrize("signer", [SIGNER, None], ids=["signed", "unsigned"])
def test_bad_input_fails_as_in_the_general_encoder(
    what: str, change: dict[str, Any], signer: SessionSigner | None
) -> None:
    good = dict(
        to="/celery",
        subject="t.add",
        body=[[1, 2], {}],
        reply_to="$reply/n/c",
        creation_time=1.7e9,
        headers={"task_id": "t", "pool": "celery"},
    )
    # Given a shape that is known (two messages of it sent)
    for n in range(2):
        encode(
            Envelope(message_id=f"m-{n}", correlation_id="t", **good),
            signer=signer, actor="celery", node="n",
        )  # fmt: skip
    # When bad input comes in a message of that shape, or of its own, three times
    bad = Envelope(**{"message_id": "m-x", "correlation_id": "t", **good, **change})
    said = [_outcome(lambda: encode(bad, signer=signer, actor="celery", node="n"))
            for _ in range(3)]  # fmt: skip
    # Then it fails (or is written) as the general encoder does it, every time
    expected = _outcome(lambda: general(bad, signer, "celery", "n"))
    assert said == [expected] * 3, what


def _outcome(call: Any) -> tuple[str, str]:
    try:
        data = call()
    except Exception as exc:  # the error as raised: its type and its words
        return type(exc).__name__, str(exc)
    return "written", data.hex()


def test_a_failure_says_what_is_wrong() -> None:
    # (the general encoder's words, which the shaped path keeps)
    envelope = Envelope(message_id="m", to="/a", subject="s", body=[[], {}],
                        headers={"task_id": "t", "v": b"\x00"})  # fmt: skip
    for _ in range(3):
        with pytest.raises(WireFormatError, match="cannot be authenticated"):
            encode(envelope, signer=SIGNER, actor="a", node="n")


def test_shapes_are_bounded_and_unique_values_make_none() -> None:
    # Given more shapes than are kept, each met twice (callers that come and go)
    shapes = _shapes.MAX_SHAPES + 10
    for n in range(shapes):
        for m in range(2):
            envelope = Envelope(message_id=f"m-{n}-{m}", to=f"/a{n}", subject="s",
                                body=[[], {}], headers={"x": n})  # fmt: skip
            assert encode(envelope) == general(envelope, None, "", "")
    # And messages whose header values are all unique
    for n in range(3 * _shapes.MAX_SHAPES):
        encode(Envelope(message_id=f"u-{n}", to="/u", subject="s", body=[[], {}],
                        headers={"trace": f"unique-{n}"}))  # fmt: skip
    # Then at most MAX_SHAPES are kept, and so are the keys met once; the
    # newest shapes are kept, and none for the unique values
    assert len(_shapes._shapes) <= _shapes.MAX_SHAPES
    assert len(_shapes._older) <= _shapes.MAX_SHAPES
    assert len(_shapes._seen) <= _shapes.MAX_SHAPES
    assert len(_shapes._seen_older) <= _shapes.MAX_SHAPES
    newest = Envelope(message_id="m-new", to=f"/a{shapes - 1}", subject="s", body=[[], {}],
                      headers={"x": shapes - 1})  # fmt: skip
    assert shaped(newest, None, "", "")
    assert not any("/u" in key for key in (*_shapes._shapes, *_shapes._older))


def test_more_shapes_in_use_than_fit_are_kept_across_generations() -> None:
    # Given more shapes than a generation holds, sent in turn (callers that stay)
    count = _shapes.MAX_SHAPES + 76
    messages = [
        Envelope(message_id=f"m-{n}", to=f"/a{n}", subject="s", body=[[], {}], headers={"x": n})
        for n in range(count)
    ]
    # When each is sent three times, in turn
    for _ in range(3):
        for envelope in messages:
            assert encode(envelope) == general(envelope, None, "", "")
    # Then, sent once more in turn, all but those beyond a generation's room
    # are written from their shapes (none made anew)
    found = sum(shaped(envelope, None, "", "") for envelope in messages)
    assert found >= _shapes.MAX_SHAPES, found


def test_a_message_of_many_headers_is_shaped_alike() -> None:
    # Given messages with 300 headers (more than a one-byte count holds)
    headers: dict[str, Any] = {f"h{n}": n for n in range(300)}
    for signer in (None, SIGNER):
        for n in range(3):
            envelope = Envelope(message_id=f"m{n}", to="/a", subject="s", body=[[], {}],
                                headers=headers)  # fmt: skip
            # When each is encoded, Then it is what the general encoder writes
            assert encode(envelope, signer=signer, actor="a", node="n") == general(
                envelope, signer, "a", "n"
            )
        assert shaped(envelope, signer, "a", "n")


def test_a_shape_of_long_text_is_not_kept() -> None:
    # Given messages whose reply address is longer than a kept shape may hold
    reply_to = "/r" + "x" * _shapes.MOST_TEXT
    for n in range(3):
        envelope = Envelope(message_id=f"m{n}", to="/a", subject="s", body=[[], {}],
                            reply_to=reply_to)  # fmt: skip
        # When each is encoded, Then it is what the general encoder writes
        assert encode(envelope, signer=SIGNER, actor="a", node="n") == general(
            envelope, SIGNER, "a", "n"
        )
    # And its shape was neither noted nor kept
    assert not shaped(envelope, SIGNER, "a", "n")
    assert not _shapes._seen
    assert not _shapes._shapes


header_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=300)


@settings(max_examples=200, deadline=None)
@given(
    to=header_text,
    subject=header_text,
    reply_to=st.none() | header_text,
    kind=st.sampled_from(["command", "event", "document"]),
    headers=st.dictionaries(
        st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=12).filter(
            lambda k: k not in ("kind", "lang", "sig_alg", "sig_key", "sig", "sig_node")
        ),
        st.none() | st.integers(-(2**63), 2**63 - 1) | header_text,
        max_size=4,
    ),
    correlations=st.lists(st.none() | header_text, min_size=4, max_size=4),
    message_ids=st.lists(header_text.filter(bool), min_size=4, max_size=4),
    bodies=st.lists(st.integers() | header_text | st.none(), min_size=4, max_size=4),
    times=st.lists(st.integers(1, 2**45), min_size=4, max_size=4),
    signed=st.booleans(),
)
def test_any_shape_writes_what_the_general_encoder_writes(
    to: str, subject: str, reply_to: str | None, kind: str, headers: dict[str, Any],
    correlations: list[str | None], message_ids: list[str], bodies: list[Any],
    times: list[int], signed: bool,
) -> None:  # fmt: skip
    for known in (_shapes._shapes, _shapes._older, _shapes._seen, _shapes._seen_older):
        known.clear()
    signer = SIGNER if signed else None
    # Given four messages of one shape (a None header value: the correlation id)
    correlation = next((c for c in correlations if c), None)
    for n in range(4):
        values = {k: correlation if v is None else v for k, v in headers.items()}
        envelope = Envelope(message_id=message_ids[n], to=to, subject=subject,
                            body=bodies[n], kind=kind, reply_to=reply_to,
                            correlation_id=correlation, creation_time=times[n] / 1000,
                            headers=values)  # fmt: skip
        # When each is encoded, Then it is what the general encoder writes
        assert encode(envelope, signer=signer, actor=to, node=subject) == general(
            envelope, signer, to, subject
        )
    assert shaped(envelope, signer, to, subject) or (None in headers.values() and not correlation)
