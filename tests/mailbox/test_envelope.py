"""The envelope codec: what actorctl writes, proton reads back the same."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st
from proton import Message

from actorctl import Envelope, WireFormatError
from actorctl.mailbox import decode, encode
from actorctl.mailbox._decoding import SIGNATURE_PROPERTIES

# Header names a message's writer sets itself (docs/protocol.md §6.2: a client
# MUST NOT use them for anything else): the reader takes them off.
RESERVED = ("kind", "lang", *SIGNATURE_PROPERTIES)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.text(st.characters(exclude_categories=("Cs",)), max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text(st.characters(exclude_categories=("Cs",)), max_size=8), inner, max_size=4
        )
    ),
    max_leaves=12,
)
# proton reads string properties as C strings: a NUL ends them (docs/protocol.md).
names = st.text(
    alphabet=st.characters(exclude_characters="\x00", exclude_categories=("Cs",)),
    min_size=1,
    max_size=300,
)
header_values = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text(st.characters(exclude_categories=("Cs",)), max_size=300)
)


@given(
    message_id=names,
    subject=names,
    reply_to=st.none() | names,
    body=json_values,
    created=st.none() | st.integers(1, 2**40).map(lambda ms: ms / 1000),
    headers=st.dictionaries(
        st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=12).filter(
            lambda k: k not in RESERVED
        ),
        header_values,
        max_size=5,
    ),
)
def test_every_envelope_reads_back_as_written_by_proton(
    message_id: str, subject: str, reply_to: str | None, body: object, created: float | None,
    headers: dict[str, object],
) -> None:  # fmt: skip
    envelope = Envelope(
        message_id=message_id,
        to="amqp://127.0.0.1:1/a",
        subject=subject,
        body=body,
        reply_to=reply_to,
        creation_time=created,
        headers=headers,
    )
    data = encode(envelope)
    # proton itself parses what we wrote
    msg = Message()
    msg.decode(data)
    assert msg.id == message_id
    assert msg.subject == subject
    assert msg.content_type == "application/json"
    back = decode(data)
    assert back.body == body
    assert back.reply_to == reply_to
    assert dict(back.headers) == {k: v for k, v in headers.items() if v is not None}
    assert back.creation_time == created


def test_a_header_that_is_not_a_simple_type_still_travels() -> None:
    envelope = Envelope(
        message_id="m", to="x", subject="s", body=[[], {}], headers={"chain": [{"task": "a"}]}
    )
    assert decode(encode(envelope)).headers["chain"] == [{"task": "a"}]


def test_a_message_without_an_id_is_refused() -> None:
    msg = Message(subject="s", body=b"[[],{}]", inferred=True)
    with pytest.raises(WireFormatError, match="no message-id"):
        decode(msg.encode())


def test_messages_proton_writes_with_other_id_types_read_the_same() -> None:
    import uuid

    for message_id, correlation_id in [(uuid.uuid4(), 7), (12345, uuid.uuid4()), ("s", "c")]:
        msg = Message(id=message_id, correlation_id=correlation_id, subject="add", inferred=True)
        msg.body = b"[[1, 2], {}]"
        msg.properties = {"kind": "command", "retries": 2}
        msg.creation_time = 1795316000.25
        envelope = decode(msg.encode())
        assert envelope.message_id == str(message_id)
        assert envelope.correlation_id == str(correlation_id)
        assert envelope.call() == ([1, 2], {})
        assert envelope.headers == {"retries": 2}
        assert envelope.creation_time == 1795316000.25


def test_text_that_is_not_unicode_cannot_be_sent() -> None:
    with pytest.raises(WireFormatError, match="UTF-8"):
        encode(Envelope(message_id="m", to="x", subject="\ud800", body=[[], {}]))


def test_application_properties_read_as_proton_reads_them() -> None:
    from proton import symbol, timestamp, ulong

    from actorctl.mailbox import read_message

    properties = {
        "s": "text",
        "sig": b"\x00" * 32,
        "n": None,
        "i": -5,
        "u": ulong(7),
        "f": 1.5,
        "b": True,
        "t": timestamp(1795316000250),
        "y": symbol("hmac-sha256"),
    }
    msg = Message(id="m", subject="s", body=b"[[],{}]", inferred=True)
    msg.properties = properties  # type: ignore[assignment]
    sections = read_message(msg.encode())
    assert sections is not None
    assert sections[1] == properties


def test_a_map_key_that_is_a_list_leaves_the_message_to_proton() -> None:
    from actorctl.mailbox import read_message

    properties = b"\x00\x53\x73\xc0\x04\x01\xa1\x01m"  # [message-id "m"]
    app = b"\x00\x53\x74\xc1\x03\x02\x45\x40"  # {[]: null}: a key no dict can hold
    data = b"\x00\x53\x75\xa0\x02[]"
    assert read_message(properties + app + data) is None
    assert read_message(properties + data) == (["m"], {}, b"[]")


def test_a_list_whose_count_its_bytes_cannot_hold_is_not_read() -> None:
    from actorctl.mailbox import read_message

    # Given a message whose properties list (a list32, as actorctl writes it)
    # claims four billion items in a few bytes: a forged or corrupted count
    data = bytearray(encode(Envelope(message_id="m", to="a", subject="s", body=[[], {}])))
    assert data[:4] == b"\x00\x53\x73\xd0"  # properties, list32: size, then count
    data[8:12] = b"\xff\xff\xff\xff"
    # Then the fast reader leaves it (to proton's decoder, which refuses it),
    # having allocated nothing for the count
    assert read_message(bytes(data)) is None


def test_a_session_signature_is_written_as_the_signers_own_properties_would_be() -> None:
    from actorctl.mailbox import SessionSigner, read_message
    from actorctl.mailbox._signing import Session

    # Given a session signer, and the same signer behind a plain function (which
    # the encoder writes through the general path: its dict of properties)
    signer = SessionSigner(Session("0123456789abcdef0123456789abcdef", b"k" * 32, "me", 2e9))

    def as_properties(canonical: bytes) -> Mapping[str, object]:
        return signer(canonical)

    envelope = Envelope(
        message_id="m-1",
        to="/celery",
        subject="t.add",
        body=[[1, 2], {}],
        reply_to="$replies/n/c",
        correlation_id="t-1",
        creation_time=1.7e9,
        headers={"task_id": "t-1", "n": 3},
    )
    # When both sign it
    fast = encode(envelope, signer=signer, actor="celery", node="n1")
    general = encode(envelope, signer=as_properties, actor="celery", node="n1")
    # Then the bytes are the same, and carry the session's three properties
    assert fast == general
    sections = read_message(fast)
    assert sections is not None
    app = sections[1]
    assert (app["sig_alg"], app["sig_key"], app["sig_node"]) == (
        "hmac-sha256",
        signer.session.id,
        "n1",
    )
    assert len(app["sig"]) == 32


@pytest.fixture
def fresh_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The codec's caches of recurring text, empty for this test and given back
    after it: they are the process's, and what other tests in the same
    process sent (a task id that recurs there, say) is in them."""
    from actorctl.mailbox import _amqp, _auth, _encoding

    for module, names in (
        (_encoding, ("_names", "_once", "_session_heads")),
        (_amqp, ("_keys", "_pairs", "_once")),
        (_auth, ("_heads", "_seen_heads", "_fields", "_seen_fields", "_keys",
                 "_seen_keys", "_pairs", "_seen_pairs", "_orders", "_seen_orders")),
    ):  # fmt: skip
        for name in names:
            monkeypatch.setattr(module, name, type(getattr(module, name))())


@pytest.mark.usefixtures("fresh_caches")
def test_unique_strings_never_keep_a_recurring_one_from_the_encoders_cache() -> None:
    from actorctl.mailbox import _encoding

    # Given more unique header values (task ids) than the cache holds
    for n in range(2 * _encoding._MAX_NAMES + 1):
        encode(Envelope(message_id=f"m-{n}", to="a", subject="s", body=[[], {}],
                        headers={"task_id": f"task-{n}"}))  # fmt: skip
    # When a new string starts to recur (a caller's reply address, a new session's id)
    for n in range(2):
        encode(Envelope(message_id=f"r-{n}", to="a", subject="s", body=[[], {}],
                        reply_to="$replies/a-new-caller/1"))  # fmt: skip
    # Then it is cached from its second message on, and none of the unique ones is
    assert "$replies/a-new-caller/1" in _encoding._names
    assert len(_encoding._names) < _encoding._MAX_NAMES
    assert not any(name.startswith("task-") for name in _encoding._names)


def test_a_circular_or_non_finite_body_is_refused_naming_what_is_wrong() -> None:
    circular: list[object] = []
    circular.append(circular)
    for body, said in ((circular, "Circular reference"), ({"x": float("nan")}, "Out of range")):
        with pytest.raises(WireFormatError, match=said):
            encode(Envelope(message_id="m", to="a", subject="s", body=body))


def test_a_circular_body_is_refused_in_a_process_that_raised_its_recursion_limit() -> None:
    # Given a process that raised its recursion limit far past the default
    # (there the shared C encoder could overflow the C stack before Python's
    # limit stopped it: a crash), in a process of its own
    script = (
        "import sys\n"
        "from actorctl import Envelope, WireFormatError\n"
        "from actorctl.mailbox import encode\n"
        "sys.setrecursionlimit(100_000)\n"
        "x = []\n"
        "x.append(x)\n"
        "try:\n"
        "    encode(Envelope(message_id='m', to='a', subject='s', body={'a': x}))\n"
        "except WireFormatError as exc:\n"
        "    print(exc)\n"
    )
    # When it encodes a circular body
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    # Then it is refused, saying why, and the process goes on
    assert done.returncode == 0, done.stderr
    assert "Circular reference" in done.stdout


@pytest.mark.parametrize(
    ("raw", "read"),
    [(b" [[1], {}] ", [[1], {}]), (b"[[1],{}]\n", [[1], {}]), (b"3", 3), (b"[[1],{}] x", None),
     (b"", None), (b"[1", None), (b"NaN", None)],
)  # fmt: skip
def test_a_body_with_whitespace_around_it_reads_and_one_with_more_is_refused(
    raw: bytes, read: object
) -> None:
    from actorctl.mailbox import read_message
    from actorctl.mailbox._decoding import from_sections

    # Given a message as actorctl writes it, whose body (a data section) is ``raw``
    data = encode(Envelope(message_id="m", to="a", subject="s", body=None))
    assert data.endswith(b"\x00\x53\x75\xb0\x00\x00\x00\x04null")
    sections = read_message(data[:-8] + len(raw).to_bytes(4, "big") + raw)
    assert sections is not None
    # Then JSON with whitespace around it reads as JSON; anything else is refused
    if read is None:
        with pytest.raises(WireFormatError, match="body is not valid UTF-8 JSON"):
            from_sections(sections)
    else:
        assert from_sections(sections).body == read


@pytest.mark.usefixtures("fresh_caches")
def test_the_reader_caches_the_text_pairs_that_recur_and_no_unique_one() -> None:
    from actorctl.mailbox import _amqp, read_message

    # Given more messages with a unique header value (a task id) than the cache holds
    for n in range(2 * _amqp._MAX_KEYS + 1):
        data = encode(Envelope(message_id=f"m-{n}", to="a", subject="s", body=[[], {}],
                               headers={"task_id": f"task-{n}", "pool": "a-new-pool"}))  # fmt: skip
        sections = read_message(data)
        # Then each reads as written
        assert sections is not None
        assert sections[1] == {"kind": "command", "lang": "py", "task_id": f"task-{n}",
                               "pool": "a-new-pool"}  # fmt: skip
    # And the pair that recurs is cached, none of the unique ones
    cached = {pair for pair, _ in _amqp._pairs.values()}
    assert "pool" in cached
    assert "task_id" not in cached


@pytest.mark.usefixtures("fresh_caches")
def test_the_canonical_form_caches_what_recurs_even_after_many_unique_values() -> None:
    from actorctl.mailbox import _auth, canonical_bytes

    def canonical(reply_to: str, task_id: str) -> bytes:
        return canonical_bytes(node="n", to="a", subject="s", message_id=task_id,
                               correlation_id=None, reply_to=reply_to, creation_ms=1,
                               expiry_ms=None, kind="command", body=b"[]",
                               headers={"task_id": task_id, "pool": "a-pool", "n": 3})  # fmt: skip

    # Given more messages with a unique reply address and task id than a cache holds
    for n in range(2 * _auth._MAX_HEADS + 1):
        canonical(f"$reply/k/once-{n}", f"task-{n}")
    # When a reply address starts to recur only after them
    first = canonical("$reply/k/late", "task-late")
    again = [canonical("$reply/k/late", "task-late") for _ in range(2)]
    # Then its bytes stay the same, cached or not
    assert again == [first, first]
    # And it is cached, as are the headers that recur, and no unique value
    assert "$reply/k/late" in _auth._fields
    assert not [text for text in _auth._fields if text.startswith("$reply/k/once-")]
    assert {("pool", "a-pool"), ("n", 3), ("task_id", "task-late")} <= _auth._pairs.keys()
    assert not [pair for pair in _auth._pairs if str(pair[1])[5:].isdigit()]  # task-{n}


def test_an_envelope_made_by_its_slots_is_the_record_its_constructor_makes() -> None:
    import attrs

    from actorctl.mailbox import Role
    from actorctl.mailbox._envelope import _made

    # Given every field given a value of its own
    values = {
        "message_id": "m-1", "to": "/a", "subject": "s", "body": [[1], {}], "kind": "event",
        "reply_to": "$reply/x", "correlation_id": "c-1", "creation_time": 1.5,
        "expiry_time": 2.5, "headers": {"h": 1}, "sender": "key-1", "role": Role.MEMBER,
    }  # fmt: skip
    # When the decoder's maker and the constructor each make one
    made = _made(*values.values())
    built = Envelope(**values)
    # Then they are one record: equal, every field alike (sender and role too,
    # which equality leaves out), and still frozen
    assert made == built
    assert [getattr(made, f.name) for f in attrs.fields(Envelope)] == list(values.values())
    assert list(values) == [f.name for f in attrs.fields(Envelope)]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        made.to = "/b"  # type: ignore[misc]


@pytest.mark.parametrize(
    "change",
    [
        {"creation_time": 1e17},  # 1e20 ms: past a signed 64-bit count
        {"expiry_time": float("inf")},
        {"creation_time": float("nan")},
        {"headers": {"n": 2**64}},
        {"headers": {"n": -(2**63) - 1}},
    ],
    ids=["time-past-64-bits", "infinite-expiry", "nan-time", "int-past-64", "int-below-64"],
)
def test_a_number_amqp_cannot_carry_is_a_clear_error_naming_the_message(
    change: dict[str, object],
) -> None:
    # Given a message with a time or a header integer no AMQP type here holds
    envelope = Envelope(message_id="m-big", to="/a", subject="s", body=[[], {}], **change)
    # When it is encoded, Then the error names the message and what to fix
    with pytest.raises(WireFormatError, match="'m-big': a number past what AMQP can carry"):
        encode(envelope)
