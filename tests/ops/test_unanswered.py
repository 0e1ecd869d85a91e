"""A node that did not answer a question asked of every node is an
``Unanswered`` record where it is made and read, and the marker
``{"unanswered": why}`` (``"refused": true`` beside it when the node answered
with an error) only on the wire (issue 29, item 5)."""

from __future__ import annotations

import json

from actorctl.ops._unanswered import Unanswered, answered, unanswered


def test_the_marker_is_the_wire_form_of_the_record_and_reads_back() -> None:
    late = Unanswered("TimeoutError: no answer within 1.6 s")
    refused = Unanswered("no task named 't.nope'", refused=True)
    # The wire form is what the Controller has always answered
    assert late.wire() == {"unanswered": "TimeoutError: no answer within 1.6 s"}
    assert refused.wire() == {"unanswered": "no task named 't.nope'", "refused": True}
    # and it reads back, through JSON, into the same record
    for record in (late, refused):
        assert Unanswered.of(json.loads(json.dumps(record.wire()))) == record


def test_a_nodes_own_answer_is_not_a_marker_whatever_its_form() -> None:
    for answer in (None, 3, "ok", [], {"ok": True}, {"unanswered_count": 1}):
        assert Unanswered.of(answer) is None


def test_the_answers_split_into_those_given_and_why_the_others_are_missing() -> None:
    by_node = {
        "a": {"ok": True},
        "b": Unanswered("gone").wire(),
        "c": None,
        "d": Unanswered("bad pool", refused=True).wire(),
    }
    assert answered(by_node) == {"a": {"ok": True}, "c": None}
    assert unanswered(by_node) == {
        "b": Unanswered("gone"),
        "d": Unanswered("bad pool", refused=True),
    }
