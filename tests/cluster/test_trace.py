"""The eliot trace a message carries across hops (``_log.trace_here`` and
``continue_trace``): one trace uuid however many hops, and a bounded depth;
an action written the short way (``Traced``, a task's run) writes eliot's
own lines; a new trace's uuid is never another's."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import eliot
import pytest
from eliot import MemoryLogger, start_action
from eliot.testing import swap_logger

from actorctl._log import (
    MAX_TRACE_DEPTH,
    Traced,
    continue_trace,
    log,
    new_trace_uuid,
    trace_here,
)
from tests.support.harness import Logs


def test_a_long_chain_of_hops_keeps_one_trace_and_a_bounded_depth() -> None:
    # Given a first hop sent inside an action
    with start_action(action_type="test:first"):
        trace = trace_here()
    assert trace is not None
    uuid = trace.partition("@")[0]
    depths = []
    # When 500 hops each continue the trace they got, and send on from an action in it
    for _ in range(500):
        with continue_trace(trace), start_action(action_type="test:hop"):
            trace = trace_here()
        assert trace is not None
        depths.append(trace.count("/"))
    # Then every hop is in the same trace, and none nests past the bound
    assert trace.partition("@")[0] == uuid
    assert max(depths) <= MAX_TRACE_DEPTH + 2
    assert min(depths[MAX_TRACE_DEPTH:]) < max(depths)  # it went back to the root


def test_outside_any_action_nothing_is_traced_and_a_malformed_trace_changes_nothing() -> None:
    assert trace_here() is None
    for bad in (None, 3, "no-at-sign", "uuid@level-without-slash", "@/1", "a@/x"):
        with continue_trace(bad):
            assert trace_here() is None


def _shape(messages: list[dict[str, Any]]) -> list[list[tuple[str, Any]]]:
    """Each line's fields in order, less the uuid and time (they differ by run)."""
    return [
        [(key, value) for key, value in line.items() if key not in ("task_uuid", "timestamp")]
        for line in messages
    ]


#: A declared message type: eliot serializes its fields (a set, as a list).
_TYPED = eliot.MessageType(
    "test:typed", [eliot.Field("n", lambda n: [n, n], "a number, twice")], "A typed line."
)


def _run_within(started: Callable[[], AbstractContextManager[Any]]) -> None:
    """Within a continued trace: an action that logs, sends, nests an action,
    hands its place to other code (eliot's ``preserve_context``), logs a
    line of a declared type (serialized by eliot), adds a result to its end
    line, ends."""
    with continue_trace("d2f4c6a8-0000-4000-8000-000000000001@/3"), started():
        log("test:inside", n=1)
        trace_here()
        with eliot.start_action(action_type="test:child"):
            eliot.log_message("test:in-child")
        eliot.preserve_context(lambda: log("test:elsewhere"))()
        _TYPED.log(n=2)
        current = eliot.current_action()
        assert current is not None
        current.add_success_fields(result=3)


def test_a_traced_action_writes_the_lines_eliots_own_action_writes(logs: Logs) -> None:
    # Given the same run, once in eliot's start_action and once in Traced
    _run_within(lambda: eliot.start_action(action_type="test:run", task="t", retries=0))
    theirs = list(logs.messages)
    logs.messages.clear()
    _run_within(lambda: Traced("test:run", {"task": "t", "retries": 0}))
    # Then the lines are the same, field for field and in order, in the same trace
    assert _shape(logs.messages) == _shape(theirs)
    assert {line["task_uuid"] for line in logs.messages + theirs} == {
        "d2f4c6a8-0000-4000-8000-000000000001"
    }
    # (the typed line was serialized, the result is on the end line)
    assert [line["n"] for line in logs.messages if line.get("message_type") == "test:typed"] == [
        [2, 2]
    ]
    assert logs.messages[-1]["result"] == 3


def test_a_traced_action_within_an_eliot_action_nests_as_eliots_own_does(logs: Logs) -> None:
    # Given the same run within an action of eliot's own, once in eliot's
    # start_action and once in Traced
    with start_action(action_type="test:outer"):
        with start_action(action_type="test:run", task="t"):
            log("test:inside")
        trace_here()
    theirs = list(logs.messages)
    logs.messages.clear()
    with start_action(action_type="test:outer"):
        with Traced("test:run", {"task": "t"}):
            log("test:inside")
        trace_here()
    # Then the lines are the same, field for field, each trace of one uuid
    assert _shape(logs.messages) == _shape(theirs)
    assert len({line["task_uuid"] for line in logs.messages}) == 1


def test_a_traced_action_ended_by_an_exception_says_so_as_eliot_does(logs: Logs) -> None:
    def run(started: AbstractContextManager[Any]) -> None:
        with started:
            log("test:before", n=1)  # (its end line comes after this one)
            trace_here()
            raise ValueError("boom")

    def failing(started: AbstractContextManager[Any]) -> None:
        with pytest.raises(ValueError, match="boom"):
            run(started)

    failing(eliot.start_action(action_type="test:run"))
    theirs = list(logs.messages)
    logs.messages.clear()
    failing(Traced("test:run", {}))
    assert _shape(logs.messages) == _shape(theirs)
    assert logs.messages[-1]["action_status"] == "failed"
    assert logs.messages[-1]["exception"] == "builtins.ValueError"
    assert logs.messages[-1]["task_level"] == [4]


def test_each_new_trace_has_a_uuid_of_its_own_in_a_uuid4s_shape(logs: Logs) -> None:
    # Given many traces begun outside any action, by Traced and by log
    made = [new_trace_uuid() for _ in range(1000)]
    for _ in range(10):
        with Traced("test:top", {}):
            pass
        log("test:alone")
    made += [line["task_uuid"] for line in logs.messages]
    # Then none repeats (a Traced action's two lines share one), each reads as a uuid4
    assert len(set(made)) == 1000 + 10 + 10
    for text in made:
        assert uuid.UUID(text).version == 4
        assert str(uuid.UUID(text)) == text


def test_a_forked_child_makes_trace_uuids_its_parent_never_makes() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next uuid, to the parent
        os.write(write, new_trace_uuid().encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        theirs = pipe.read().decode()
    assert os.waitpid(pid, 0)[1] == 0
    ours = new_trace_uuid()
    assert theirs[:24] != ours[:24]  # a prefix drawn anew in the child
    assert theirs != ours


def test_a_logger_swapped_in_by_eliots_testing_tools_gets_every_line() -> None:
    # Given eliot's own memory logger swapped in, as eliot.testing's tools do
    memory = MemoryLogger()
    previous = swap_logger(memory)
    try:
        # When a line, a traced action and a user's line within it are written
        log("actorctl:something", x=1)
        with Traced("actorctl:task", {}):
            eliot.log_message("user:inside")
    finally:
        swap_logger(previous)
    # Then that logger got all four, the action's start and end among them
    kinds = [m.get("message_type") or m.get("action_type") for m in memory.messages]
    assert kinds == ["actorctl:something", "actorctl:task", "user:inside", "actorctl:task"]
