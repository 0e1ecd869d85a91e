"""A caller reads a reply signed within a session by its signature's bytes
(issue 30): ``ReplyCheck.check`` takes the session reader
(``_session_read.read_in_session``) for the layout actorctl's encoder writes, and
every reply is accepted or refused exactly as when it is read whole.

Each case checks the same reply, signed alike, in two layouts on two callers
in the same state: as actorctl writes it (its signature's four properties
last, read apart), and with its signature's properties in another order
(read whole, its signature found in its properties), and compares what each
says: the reply taken, or the reason and description of the refusal logged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from actorctl import Envelope
from actorctl.cluster.link._reply_auth import REPLY_NODE, ReplyCheck, encode_reply
from actorctl.mailbox import (
    KIND_DOCUMENT,
    IdentityKey,
    Keyring,
    SessionOffer,
    SessionSigner,
    _session_read,
    encode,
)
from actorctl.mailbox._session_read import read_in_session, session_tail
from tests.support.harness import Logs

NOW = 1_767_225_600.0
ADDRESS = "$reply/caller-0123456789ab"


class Caller:
    """A caller's reply check that handed ``offer`` to its peer, at a clock
    the test moves."""

    def __init__(self, replier: IdentityKey, offer: SessionOffer, address: str) -> None:
        self.clock = NOW
        keyring = Keyring(IdentityKey.generate("caller"), [replier.public])
        self.check = ReplyCheck(keyring, address, "peer", lambda: self.clock)
        self.check.connected(None)
        self.check.offered(offer)


class Pair:
    """A replier's session, and two callers that handed it over: ``fast``
    gets actorctl's layout, ``general`` the other one."""

    def __init__(self, address: str = ADDRESS) -> None:
        self.replier = IdentityKey.generate("worker")
        self.offer = SessionOffer.new(self.replier, now=NOW, lifetime=3600)
        self.signer = SessionSigner(self.offer.session())
        self.fast = Caller(self.replier, self.offer, address)
        self.general = Caller(self.replier, self.offer, address)

    def at(self, clock: float) -> None:
        self.fast.clock = self.general.clock = clock

    def layouts(
        self, envelope: Envelope, signer: SessionSigner | None = None
    ) -> tuple[bytes, bytes]:
        """``envelope`` signed in the session, as actorctl writes it and with
        its signature properties in another order (the same signature)."""
        signer = signer or self.signer

        def reordered(canonical: bytes) -> Mapping[str, object]:
            signed = signer(canonical)
            return {key: signed[key] for key in ("sig", "sig_key", "sig_alg")}

        written = encode_reply(envelope, signer)
        other = encode(envelope, signer=reordered, actor=envelope.to, node=REPLY_NODE)
        tail = session_tail(REPLY_NODE)
        assert tail is not None
        assert read_in_session(written, tail) is not None  # read apart
        assert read_in_session(other, tail) is None  # read whole
        return written, other

    def outcomes(self, logs: Logs, fast: bytes, general: bytes) -> tuple[Any, Any]:
        return _outcome(logs, self.fast.check, fast), _outcome(logs, self.general.check, general)


def _outcome(logs: Logs, check: ReplyCheck, data: bytes) -> tuple[Any, ...]:
    """``taken`` with the reply, or ``refused`` with the reason and description logged."""
    before = len(logs.of_type("actorctl:reply:rejected"))
    reply = check.check(data)
    rejected = logs.of_type("actorctl:reply:rejected")[before:]
    if reply is not None:
        assert not rejected
        return ("taken", reply)
    assert len(rejected) == 1
    line = rejected[0]
    ids = (line["message_id"], line["correlation_id"])
    return ("refused", line["reason"], line["description"], *ids)


def _result(message_id: str = "worker-1", **changes: Any) -> Envelope:
    fields: dict[str, Any] = {
        "message_id": message_id,
        "to": ADDRESS,
        "subject": "bench.add",
        "body": {"sum": 3, "note": "é"},
        "kind": KIND_DOCUMENT,
        "correlation_id": "task-1",
        "creation_time": NOW,
        "headers": {"state": "SUCCESS", "task_id": "task-1", "retries": 0},
    }
    return Envelope(**{**fields, **changes})


def test_a_reply_in_actorctls_layout_is_taken_as_when_read_whole(logs: Logs) -> None:
    # Given a result document signed in the session the caller handed over
    pair = Pair()
    fast, general = pair.layouts(_result())
    # When each caller checks it
    taken_fast, taken_general = pair.outcomes(logs, fast, general)
    # Then both take the same reply, its signature properties left out
    assert taken_fast[0] == taken_general[0] == "taken"
    assert taken_fast[1] == taken_general[1]
    assert taken_fast[1].headers == {"state": "SUCCESS", "task_id": "task-1", "retries": 0}
    assert taken_fast[1].body == {"sum": 3, "note": "é"}


def test_each_refusal_of_a_reply_is_the_whole_reads_own(logs: Logs) -> None:
    # Given two callers in the same state, each case applied to both
    pair = Pair()
    cases: list[tuple[str, str]] = []

    def case(name: str, fast: bytes, general: bytes) -> None:
        said_fast, said_general = pair.outcomes(logs, fast, general)
        assert said_fast == said_general, name
        cases.append((name, said_fast[1] if said_fast[0] == "refused" else said_fast[0]))

    case("taken", *pair.layouts(_result("w-good")))
    fast, general = pair.layouts(_result("w-body"))
    case("body tampered", fast[:-3] + b"4" + fast[-2:], general[:-3] + b"4" + general[-2:])
    case("other result", *pair.layouts(_result("w-other", correlation_id="task-2")))
    stranger = SessionSigner(SessionOffer.new(pair.replier, now=NOW, lifetime=3600).session())
    case("session not handed over", *pair.layouts(_result("w-stranger"), stranger))
    late = pair.layouts(_result("w-late"))
    pair.at(NOW + 3600)  # the session's expiry
    case("session over", *late)
    # And a reply for another reply address
    pair = Pair(address="$reply/someone-else")
    case("another caller's", *pair.layouts(_result("w-elsewhere")))
    # Then each is taken or refused alike, for the same reason
    assert cases == [
        ("taken", "taken"),
        ("body tampered", "bad signature"),
        ("other result", "taken"),
        ("session not handed over", "unknown key"),
        ("session over", "unknown key"),
        ("another caller's", "bad signature"),
    ]


def test_replies_alike_are_read_around_their_ids_as_when_read_whole(
    logs: Logs, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given replies alike but for their ids and times (the results of one
    # caller's tasks): the first two read item by item, the others around
    # their correlation-ids, by the bytes before them
    pair = Pair()
    monkeypatch.setattr(_session_read, "_last_ask", [None])
    monkeypatch.setattr(_session_read, "_repeats", {})
    monkeypatch.setattr(_session_read, "_repeats_once", {})
    said = []
    for i in range(4):
        fast, general = pair.layouts(_result(f"w-{i}", correlation_id=f"task-{i}"))
        said.append(pair.outcomes(logs, fast, general))
    assert _session_read._last_ask[0] is not None  # found around its ids
    assert _session_read._repeats  # and its headers around its task_id
    # And, their head known: a correlation-id of another length, one forged
    # (its bytes around it alike), one forged in its task_id header alone, one
    # with an expiry its head's had not
    longer = pair.layouts(_result("w-long", correlation_id="task-" + "7" * 150))
    said.append(pair.outcomes(logs, *longer))
    fast, general = pair.layouts(_result("w-forged", correlation_id="task-8"))
    at, other = fast.index(b"task-8") + 5, general.index(b"task-8") + 5
    forged = fast[:at] + b"9" + fast[at + 1 :], general[:other] + b"9" + general[other + 1 :]
    said.append(pair.outcomes(logs, *forged))
    fast, general = pair.layouts(_result("w-header", correlation_id="task-9"))
    at, other = fast.rindex(b"task-9") + 5, general.rindex(b"task-9") + 5  # its task_id header
    forged = fast[:at] + b"8" + fast[at + 1 :], general[:other] + b"8" + general[other + 1 :]
    said.append(pair.outcomes(logs, *forged))
    said.append(pair.outcomes(logs, *pair.layouts(_result("w-exp", expiry_time=NOW + 60))))
    # Then each is taken or refused alike, for the same reason
    for taken_fast, taken_general in said:
        assert taken_fast == taken_general
    verdicts = [taken_fast[1] if taken_fast[0] == "refused" else "taken" for taken_fast, _ in said]
    assert verdicts == ["taken"] * 5 + ["bad signature", "bad signature", "taken"]
    assert said[4][0][1].correlation_id == "task-" + "7" * 150
