"""How plain code hands its sends to the client (issue 30): the arguments'
wire form and JSON check made once in the caller's thread, task ids drawn in
batches, and the submit window that holds a caller back while its sends wait.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest
import trio
import trio.testing

from actorctl import Actor, App, Envelope, WireFormatError, open_node
from actorctl.mailbox import ACCEPTED
from actorctl.tasks.client._client import Directory, TaskClient, using_client
from actorctl.tasks.client._validate import wire_body
from actorctl.tasks.protocol._protocol import ID_BATCH, TaskIds


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((1, 2), {}),
        ((-(2**62), 2.5, "text", True, None), {"x": 0.0, "y": "z"}),
        ((), {}),
    ],
)
def test_plain_arguments_are_their_own_wire_form(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    # Given arguments that are all plain JSON scalars
    # When the body of their message is made (and checked)
    body = wire_body(args, kwargs, check=True)
    # Then it is them, as a list and a dict of their own
    assert body == [list(args), kwargs]
    assert body[1] is not kwargs


@pytest.mark.parametrize(
    ("args", "kwargs", "why"),
    [
        ((math.nan,), {}, "Out of range float"),
        ((1,), {"x": math.inf}, "Out of range float"),
        (("\ud800",), {}, "surrogate"),
        ((10**5000,), {}, "digits"),
        ((object(),), {}, "not JSON serializable"),
        (({1, 2},), {}, "set"),
    ],
)
def test_arguments_that_are_not_json_are_refused_in_the_callers_thread(
    args: tuple[Any, ...], kwargs: dict[str, Any], why: str
) -> None:
    # Given an argument that cannot be sent as JSON (a value outside the
    # scalars that always encode, or one that looks like them and is not)
    # When the body of its message is made for plain code (checked)
    # Then it is refused, saying what was wrong
    with pytest.raises(WireFormatError, match=why):
        wire_body(args, kwargs, check=True)


def test_arguments_of_other_kinds_are_converted_to_their_wire_form() -> None:
    # Given arguments with a tuple, a non-ASCII string and a number key
    body = wire_body(((1, 2), "é"), {"k": {3: "v"}}, check=True)
    # Then they are in wire form, as the trio sender always made them
    assert body == [[[1, 2], "é"], {"k": {3: "v"}}]


def test_a_tasks_kept_send_options_follow_app_conf() -> None:
    # Given a task whose options a first delay() made and kept
    app = App("conf-follow")

    @app.task(pool="p")
    def add(x: int, y: int) -> int:
        return x + y

    first = add._send_options({})
    assert (first.acks_late, first.track_started) == (True, False)
    assert add._send_options({}) is first  # kept: not made again per call
    # When app.conf changes the settings the task follows
    app.conf.task_acks_late = False
    app.conf.task_track_started = True
    # Then the next call without options sends them, not the kept ones
    after = add._send_options({})
    assert (after.acks_late, after.track_started) == (False, True)


def test_task_ids_drawn_in_batches_are_all_different_and_well_formed() -> None:
    # Given one source of ids, taken from by two threads at once
    ids = TaskIds()
    taken: list[list[str]] = [[], []]

    def take(into: list[str]) -> None:
        into.extend(ids.new() for _ in range(3 * ID_BATCH))

    threads = [threading.Thread(target=take, args=(into,)) for into in taken]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    # Then every id is 32 hex digits, and no two are the same
    every = taken[0] + taken[1]
    assert len(every) == 6 * ID_BATCH
    assert len(set(every)) == len(every)
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in every)


async def test_plain_code_waits_while_its_window_of_sends_is_unsent() -> None:
    window, count = 8, 200
    async with open_node("w", host=None, insecure=True) as node:
        client = TaskClient(node.outbox, Directory(), window=window)
        handed = 0  # how many sends the plain thread had handed over
        seen: list[tuple[int, int]] = []  # (send, handed over when it ran)
        opened = trio.Event()

        def send_of(index: int) -> Any:
            async def send() -> None:
                if index == 0:
                    await opened.wait()  # the first waits until the thread got going
                seen.append((index, handed))
                await trio.lowlevel.checkpoint()

            return send

        def plain_code() -> None:
            nonlocal handed
            for index in range(count):
                handed += 1
                client.submit(send_of(index), failed.append)
                if index == window - 2:  # just short of a full window: it did not wait
                    trio.from_thread.run_sync(opened.set)

        failed: list[Exception] = []
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client.pump)
                await trio.testing.wait_all_tasks_blocked()  # the pump waits for sends
                # Given plain code that hands over many sends, faster than
                # they go (the first waits, each yields)
                await trio.to_thread.run_sync(plain_code)
                # When the pump has sent them all
                await client.wait_drained()
                nursery.cancel_scope.cancel()
    # Then each was sent once, in order, and none failed
    assert [index for index, _ in seen] == list(range(count))
    assert failed == []
    # And the thread never had more than the window handed over and unsent
    # (when send k ran, k had gone: at most k + window were handed over, one
    # more counted just before its submit)
    assert all(ahead <= index + window + 1 for index, ahead in seen), seen


class _Recorder(Actor):
    """Takes every message it gets, and remembers it."""

    def __init__(self) -> None:
        self.got: list[Envelope] = []
        self.arrived = trio.Event()

    async def handle_unmatched(self, envelope: Envelope) -> Any:
        self.got.append(envelope)
        self.arrived.set()
        return ACCEPTED, None


async def test_a_task_sent_by_a_client_that_keeps_no_results_names_no_reply_address() -> None:
    recorder = _Recorder()
    async with open_node("rec", {"rec": recorder}, host="127.0.0.1", port=0, insecure=True) as node:
        # Given a client as a worker makes one for its tasks' code: no results kept
        address = str(node.address_of("rec"))
        client = TaskClient(node.outbox, Directory(addresses={"p": address}))
        app = App("subtasks")

        @app.task(pool="p")
        def add(x: int, y: int) -> int:
            return x + y

        # When a task's code sends a subtask through it
        with using_client(client):
            result = await add.adelay(1, 2)
        with trio.fail_after(20):
            await recorder.arrived.wait()
    # Then nobody waits for its result, and so its message asks for none: its
    # worker neither keeps nor sends a result that nobody would take
    assert not result._tracked
    assert recorder.got[0].reply_to is None
