"""A long-running process's log written in batches (``cli/output/_logfile.py``): the
same eliot lines in the same order, a quiet process's lines at once, a busy
one's within the delay, and nothing left behind at exit."""

from __future__ import annotations

import io
import itertools
import json
import re
import threading
import traceback
import uuid
from typing import Any

import eliot
import pytest
from eliot import FileDestination, MemoryLogger, start_action
from eliot.testing import swap_logger

from actorctl import _log
from actorctl._log import Traced, continue_trace, log, trace_here
from actorctl.cli.output._logfile import BEHIND, BatchedFile, raw_of

LONG = 3600.0  # a delay no test waits for: a line held for it is only written by the test


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Writes(io.StringIO):
    """A text file that keeps each write apart, and says when one came and
    from which thread."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []
        self.threads: list[str] = []
        self.came = threading.Event()

    def write(self, text: str) -> int:
        self.writes.append(text)
        self.threads.append(threading.current_thread().name)
        self.came.set()
        return len(text)


def test_a_line_after_a_quiet_spell_goes_at_once_and_those_right_after_it_wait() -> None:
    # Given a batched file that has written nothing yet
    clock, out = Clock(), Writes()
    batched = BatchedFile(out, delay=LONG, clock=clock)
    # When three lines are written at the same moment
    for n in range(3):
        batched.write(f"line {n}\n")
    # Then the first is written at once, the others wait for their batch
    assert out.writes == ["line 0\n"]
    # And close writes them, as one batch, in order
    batched.close()
    assert out.writes == ["line 0\n", "line 1\nline 2\n"]


def test_a_line_after_the_delay_has_passed_goes_at_once() -> None:
    # Given a batched file that wrote a line a while ago
    clock, out = Clock(), Writes()
    batched = BatchedFile(out, delay=0.1, clock=clock)
    batched.write("first\n")
    # When a line comes once the delay has passed
    clock.now += 0.2
    batched.write("second\n")
    # Then it is written at once too
    assert out.writes == ["first\n", "second\n"]
    batched.close()


def test_a_full_batch_is_written_by_the_writer_thread_at_once() -> None:
    # Given a batched file holding batches of 20 characters, long before its delay
    clock, out = Clock(), Writes()
    batched = BatchedFile(out, delay=LONG, most=20, clock=clock)
    batched.write("quiet\n")
    out.came.clear()
    # When lines come faster than the delay, three of them a batch
    for n in range(3):
        batched.write(f"busy {n}\n")  # 7 characters each
    # Then the writer thread writes them at once, not the writer's own call
    assert out.came.wait(timeout=10)
    assert out.writes == ["quiet\n", "busy 0\nbusy 1\nbusy 2\n"]
    assert out.threads == [threading.current_thread().name, "actorctl-log"]
    batched.write("busy 3\n")
    batched.close()
    assert out.writes[2:] == ["busy 3\n"]


class Blocked(Writes):
    """A file whose second write (the writer thread's) waits until released,
    as a pipe does whose reader is behind."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.entered = threading.Event()

    def write(self, text: str) -> int:
        if self.writes:
            self.entered.set()
            assert self.release.wait(timeout=10)
        return super().write(text)


def test_while_the_writer_thread_is_behind_lines_wait_up_to_a_bound() -> None:
    # Given a batched file whose writer thread is stuck writing a full batch
    clock, out = Clock(), Blocked()
    batched = BatchedFile(out, delay=LONG, most=20, clock=clock)
    batched.write("quiet\n")
    for n in range(3):
        batched.write(f"full {n}\n")
    assert out.entered.wait(timeout=10)
    # When lines come that fill batches behind it, up to the bound
    # (20 * BEHIND characters), they wait: this thread writes none of them
    lines = [f"late {n:02}\n" for n in range(20 * BEHIND // 8 - 1)]  # 8 characters each
    for line in lines:
        batched.write(line)
    assert out.writes == ["quiet\n"]
    assert out.threads == [threading.current_thread().name]
    # Then once the file is read again, every line is written, in order
    out.release.set()
    batched.close()
    assert "".join(out.writes) == "quiet\n" + "".join(f"full {n}\n" for n in range(3)) + "".join(
        lines
    )


def test_waiting_lines_are_written_by_the_writer_thread_once_the_delay_passes() -> None:
    # Given a batched file with a short delay, and a line just written
    clock, out = Clock(), Writes()
    batched = BatchedFile(out, delay=0.01, clock=clock)
    batched.write("first\n")
    out.came.clear()
    # When more lines come at the same moment, and no one writes or closes it
    batched.write("second\n")
    batched.write("third\n")
    assert out.writes == ["first\n"]
    # Then once the delay has passed, its writer thread writes them in one
    # batch (a process killed outright loses at most the last delay's lines)
    clock.now += 1.0
    assert out.came.wait(timeout=10)
    assert out.writes == ["first\n", "second\nthird\n"]
    assert out.threads == [threading.current_thread().name, "actorctl-log"]
    batched.close()


def test_after_close_lines_are_written_as_they_come() -> None:
    clock, out = Clock(), Writes()
    batched = BatchedFile(out, delay=LONG, clock=clock)
    batched.write("before\n")
    batched.close()
    # (a line logged at exit, after the close atexit made)
    batched.write("late 1\n")
    batched.write("late 2\n")
    assert out.writes == ["before\n", "late 1\n", "late 2\n"]


def test_it_takes_text_only() -> None:
    batched = BatchedFile(Writes())
    with pytest.raises(TypeError, match="takes text, not bytes"):
        batched.write(b"")  # type: ignore[arg-type]


def test_eliot_writes_the_same_json_lines_through_it() -> None:
    # Given eliot writing to a batched file, as a node's log does
    out = io.StringIO()
    batched = BatchedFile(out, delay=LONG)
    destination = FileDestination(file=batched)
    eliot.add_destinations(destination)
    try:
        # When an action runs, with a message inside
        with start_action(action_type="test:batched", task_id="t1"):
            eliot.log_message(message_type="test:inside", n=1)
    finally:
        eliot.remove_destination(destination)
    batched.close()
    # Then the log is eliot's JSON lines: its start, the message, its end
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(m.get("action_status"), m["task_level"]) for m in lines] == [
        ("started", [1]),
        (None, [2]),
        ("succeeded", [3]),
    ]
    assert lines[0]["task_id"] == "t1"
    assert len({m["task_uuid"] for m in lines}) == 1


def test_as_eliots_destination_it_writes_the_text_eliots_to_file_writes() -> None:
    # Given a batched file as eliot's destination (as a node's log is), and
    # eliot's own file destination beside it
    ours, theirs = io.StringIO(), io.StringIO()
    batched = BatchedFile(ours, delay=LONG)
    reference = FileDestination(file=theirs)
    eliot.add_destinations(batched.line, reference)
    try:
        # When an action logs values JSON has (and one it has not: a uuid)
        with start_action(action_type="test:line", task_id="t1", retries=0):
            eliot.log_message(message_type="test:inside", n=1.5, why="ünï", id=uuid.UUID(int=7))
    finally:
        eliot.remove_destination(batched.line)
        eliot.remove_destination(reference)
    batched.close()
    # Then both wrote the same text, line for line
    assert ours.getvalue() == theirs.getvalue()
    assert len(ours.getvalue().splitlines()) == 3


def test_a_tasks_trace_lines_many_batches_long_are_eliots_text_in_order() -> None:
    # Given a batched file of small batches as eliot's destination, and
    # eliot's own file destination beside it
    ours, theirs = io.StringIO(), io.StringIO()
    batched = BatchedFile(ours, delay=LONG, most=600)
    reference = FileDestination(file=theirs)
    eliot.add_destinations(batched.line, reference)
    try:
        # When task actions (actorctl's own) log past a batch, and past
        # BEHIND batches, while none is written by the delay
        for n in range(60):
            with Traced("actorctl:task", {"task": "add", "task_id": f"t{n}", "retries": 0}):
                log("test:inside", n=n, why="ünï")
    finally:
        eliot.remove_destination(batched.line)
        eliot.remove_destination(reference)
    batched.close()
    # Then both wrote the same text, line for line, in the order logged
    assert ours.getvalue() == theirs.getvalue()
    lines = [json.loads(line) for line in ours.getvalue().splitlines()]
    assert [line.get("n") for line in lines if "n" in line] == list(range(60))
    assert len(lines) == 180


class Failing(Writes):
    """A file whose second write fails, as a pipe whose reader went away does."""

    def __init__(self) -> None:
        super().__init__()
        self.failed = threading.Event()

    def write(self, text: str) -> int:
        if len(self.writes) == 1 and not self.failed.is_set():
            self.failed.set()
            raise BrokenPipeError("no reader")
        return super().write(text)


def test_a_batch_the_file_refuses_is_lost_and_the_writer_thread_goes_on() -> None:
    # Given a batched file that wrote a line, and a line waiting behind it
    clock, out = Clock(), Failing()
    batched = BatchedFile(out, delay=0.01, clock=clock)
    batched.write("first\n")
    batched.write("lost\n")
    # When the writer thread's write of it fails
    clock.now += 1.0
    assert out.failed.wait(timeout=10)
    # Then the next line that waits is written by the writer thread still
    out.came.clear()
    batched.write("kept\n")
    clock.now += 1.0
    assert out.came.wait(timeout=10)
    assert out.writes == ["first\n", "kept\n"]
    assert out.threads[-1] == "actorctl-log"
    batched.close()


# -- a node's lines, handed straight to its log file (_log.add_only_destination) -------------


class _Plain:
    """A value JSON has not, whose text is the same in every run."""

    def __repr__(self) -> str:
        return "<plain>"


def _mixed_run(seen: object) -> None:
    """The lines a worker writes, of every kind: a task that succeeds (with a
    line and a result), one that fails with a traceback, a retry, a revoke
    outside any task, a hop that continues a trace, an action of eliot's
    own nested in a task, and a value JSON has not (a uuid, a plain object:
    eliot writes their text) or cannot take at all (``seen``: a destination
    failure, said as eliot says it)."""
    with Traced("actorctl:task", {"task": "add", "task_id": "t1", "node": "n", "retries": 0}):
        log("test:inside", n=1.5, why="ünï", id=uuid.UUID(int=7), what=_Plain())
        current = eliot.current_action()
        assert current is not None
        current.add_success_fields(result=3)
    with pytest.raises(ZeroDivisionError):
        _failing_task()
    with Traced("actorctl:task", {"task": "flaky", "task_id": "t3", "retries": 1}):
        log("actorctl:task:retry", countdown=2.0, exc="Flaky: try again")
    log("actorctl:task:revoked", ids=["t4"], terminate=False)
    with (
        continue_trace("d2f4c6a8-0000-4000-8000-000000000001@/3"),
        Traced("actorctl:task", {"task": "step", "task_id": "t5", "retries": 0}),
    ):
        with start_action(action_type="user:inner", x=1):
            eliot.log_message("user:line", y=[1, 2])
        trace_here()
        log("test:unwritable", value=seen)


def _failing_task() -> None:
    """A task that fails, its traceback logged within its action."""
    with Traced("actorctl:task", {"task": "div", "task_id": "t2", "retries": 0}):
        try:
            1 / 0  # noqa: B018 (the task's failure)
        except ZeroDivisionError:
            log("test:failed", traceback=traceback.format_exc())
            raise


#: A line's time, and a line's time in the text of a line that failed (they differ by run).
_TIME = re.compile(rb'("timestamp":|\'timestamp\'\\": \')[0-9.e+-]+')


def _text_of(
    monkeypatch: pytest.MonkeyPatch, beside: list[dict[str, Any]] | None
) -> tuple[bytes, int]:
    """The mixed run's text in a node's log file (eliot's only destination,
    or with ``beside`` as a second one), its times left out, its trace
    uuids the same in every run; and how many lines went eliot's way."""
    monkeypatch.setattr(_log, "_prefix", "d2f4c6a8-1111-4222-8333-")
    monkeypatch.setattr(_log, "_count", itertools.count(1))
    monkeypatch.setattr(_log, "_only", [None])
    # (none of the test session's destinations: tests/conftest.py's, for one)
    monkeypatch.setattr(_log._DESTINATIONS, "_destinations", [])
    eliot_way: list[dict[str, Any]] = []
    their_send = _log._destinations_send

    def send(fields: dict[str, Any]) -> None:
        eliot_way.append(fields)
        their_send(fields)

    monkeypatch.setattr(_log, "_destinations_send", send)
    out = io.BytesIO()
    text = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    batched = BatchedFile(text, delay=LONG, raw=raw_of(text))
    _log.add_only_destination(batched.line)
    if beside is not None:
        eliot.add_destinations(beside.append)
    try:
        if beside is None:  # (nothing else in the way: the lines go straight)
            assert _log._DESTINATIONS._destinations == [batched.line]
        _mixed_run(_SEEN)
    finally:
        eliot.remove_destination(batched.line)
        if beside is not None:
            eliot.remove_destination(beside.append)
    batched.close()
    return _TIME.sub(rb"\g<1>0", out.getvalue()), len(eliot_way)


#: A value of the mixed run that JSON cannot take (a key not text), the
#: same one in every run: eliot's failure line shows its repr.
_SEEN = {(1, 2): "a tuple for a key"}


def test_lines_handed_straight_to_a_nodes_log_file_are_the_text_eliots_way_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a node's log file as eliot's only destination (log_to's), and
    # then as one of two (eliot's way: its send, to each destination)
    ours, none_eliots_way = _text_of(monkeypatch, None)
    beside: list[dict[str, Any]] = []
    theirs, eliots_way = _text_of(monkeypatch, beside)
    # Then the log file's text is the same, byte for byte, line for line
    assert ours == theirs
    lines = [json.loads(line) for line in ours.splitlines()]
    kinds = [line.get("message_type") or line.get("action_type") for line in lines]
    assert {"test:failed", "eliot:destination_failure", "user:line"} <= set(kinds)
    tasks = [line for line in lines if line.get("action_type") == "actorctl:task"]
    assert [line["action_status"] for line in tasks] == ["started", "succeeded"] + [
        "started",
        "failed",
    ] + ["started", "succeeded"] * 2
    # And alone, none of actorctl's lines went eliot's way; beside another, all did
    assert none_eliots_way == 0
    assert eliots_way >= 10
    assert len(beside) == len(lines) + 1  # (and the line the file could not take)


def test_with_global_fields_or_a_swapped_logger_lines_go_eliots_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a node's log file as eliot's only destination, and eliot asked
    # to add a field to every line
    monkeypatch.setattr(_log, "_only", [None])
    monkeypatch.setattr(_log._DESTINATIONS, "_destinations", [])
    monkeypatch.setattr(_log._DESTINATIONS, "_globalFields", {})
    out = io.StringIO()
    batched = BatchedFile(out, delay=LONG)
    _log.add_only_destination(batched.line)
    memory = MemoryLogger()
    try:
        eliot.add_global_fields(host="h1")
        with Traced("actorctl:task", {"task_id": "t1"}):
            log("test:inside")
        # When a test's logger is swapped in, it gets the lines instead
        previous = swap_logger(memory)
        try:
            log("test:swapped")
        finally:
            swap_logger(previous)
    finally:
        eliot.remove_destination(batched.line)
    batched.close()
    # Then every line in the file has the global field, and the swapped one is not there
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["host"] for line in lines] == ["h1", "h1", "h1"]
    assert [m["message_type"] for m in memory.messages] == ["test:swapped"]


def test_batches_go_to_a_utf8_files_binary_file_after_what_was_written_to_it_as_text() -> None:
    # Given a UTF-8 text file with text of its own not yet flushed, and a
    # batched file that writes to the binary file under it
    out = io.BytesIO()
    text = io.TextIOWrapper(out, encoding="utf-8")
    text.write("ready ✓\n")
    raw = raw_of(text)
    assert raw is out
    batched = BatchedFile(text, delay=LONG, raw=raw)
    # When lines come, one after a quiet spell and others right after it
    batched.line({"n": 1, "why": "ünï"})
    batched.write("plain ✓\n")
    batched.line({"n": 2})
    batched.close()
    # Then the file has its own text first, then the lines' UTF-8 bytes, in order
    assert out.getvalue().decode() == 'ready ✓\n{"n":1,"why":"ünï"}\nplain ✓\n{"n":2}\n'
    # And text the file could not encode is refused at once, not lost with a batch
    with pytest.raises(UnicodeEncodeError):
        batched.write("\udcff\n")


def test_only_a_utf8_text_file_is_written_to_through_its_binary_file() -> None:
    assert raw_of(io.TextIOWrapper(io.BytesIO(), encoding="latin-1")) is None
    assert raw_of(io.StringIO()) is None  # (no binary file under it)
