"""The idempotent receiver: a duplicate is answered as the first time, not run again."""

from __future__ import annotations

import trio

from actorctl import Actor, Envelope, handler
from actorctl.actors._dedup import Handled, SeenWindow
from actorctl.mailbox import ACCEPTED
from tests.support.harness import Logs, node_pair


class Counter(Actor):
    dedup_count = 100

    def __init__(self) -> None:
        self.runs = 0

    @handler
    async def bump(self) -> int:
        self.runs += 1
        return self.runs


async def test_a_duplicate_ask_gets_the_first_reply_and_the_handler_runs_once(logs: Logs) -> None:
    counter = Counter()
    async with node_pair([counter]) as (server, client):
        address = server.address_of("counter")
        # Given a request the receiver handled
        request = Envelope(
            message_id="once-1",
            to=str(address),
            subject="bump",
            body=[[], {}],
            creation_time=client.now(),
            reply_to=client.outbox.reply_address(address),
            correlation_id="once-1",
        )
        with trio.fail_after(10):
            first = await client.outbox.request(address, request, 5.0)
            # When the sender sends it again (it never saw it settled, say)
            second = await client.outbox.request(address, request, 5.0)
            # Then the handler did not run again, and the answer is the same
            assert await client.ref(address).ask("bump") == 2
    assert first.body == second.body == 1
    assert counter.runs == 2  # the duplicate did not count
    [warning] = logs.of_type("actorctl:delivery:duplicate")
    assert warning["message_id"] == "once-1"


def test_the_window_is_bounded_in_count_and_in_time() -> None:
    now = [0.0]
    window = SeenWindow(count=3, seconds=10.0, clock=lambda: now[0])
    for i in range(5):
        window.start(str(i))
        window.finish(str(i), Handled(ACCEPTED, None))
    assert len(window) == 3
    assert window.get("0") is None
    assert window.get("4") is not None
    now[0] = 11.0
    assert window.get("4") is None  # too old to count as a duplicate
    window.start("5")
    window.finish("5", Handled(ACCEPTED, None))
    assert len(window) == 1  # old entries went on insert


async def test_a_redriven_copy_keeps_its_id_and_runs_once_per_redrive(logs: Logs) -> None:
    counter = Counter()
    async with node_pair([counter]) as (server, client):
        address = server.address_of("counter")

        def copy(redrive: int | None) -> Envelope:
            return Envelope(
                message_id="kept-1",
                to=str(address),
                subject="bump",
                body=[[], {}],
                creation_time=client.now(),
                reply_to=client.outbox.reply_address(address),
                correlation_id="kept-1",
                headers={} if redrive is None else {"redrive": redrive},
            )

        with trio.fail_after(10):
            # Given a message the receiver handled
            first = await client.outbox.request(address, copy(None), 5.0)
            # When it is re-driven (the same id, a redrive header), then it runs
            again = await client.outbox.request(address, copy(1), 5.0)
            # And the same re-drive sent twice is a duplicate; a second one runs
            twice = await client.outbox.request(address, copy(1), 5.0)
            second = await client.outbox.request(address, copy(2), 5.0)
    assert [first.body, again.body, twice.body, second.body] == [1, 2, 2, 3]
    assert counter.runs == 3
    [warning] = logs.of_type("actorctl:delivery:duplicate")
    assert warning["message_id"] == "kept-1"


async def test_a_duplicate_mid_run_waits_for_the_first_and_one_after_it_does_not() -> None:
    window = SeenWindow(10, 60.0, clock=lambda: 0.0)
    done = Handled(ACCEPTED, None)
    # Given a message being handled, that no duplicate waited on yet
    window.start("k")
    # When two duplicates arrive while it runs
    first, second = window.running("k"), window.running("k")
    # Then they wait on one event, unset until the first copy finishes
    assert first is not None
    assert first is second
    assert not first.is_set()
    window.finish("k", done)
    with trio.fail_after(1):
        await first.wait()
    # And a duplicate arriving after it finished does not wait: it has the answer
    assert window.running("k") is None
    assert window.get("k") == done
    # Given another being handled, with a waiter, then abandoned (cancelled)
    window.start("j")
    waiting = window.running("j")
    assert waiting is not None
    window.abandon("j")
    # Then its waiter is woken, and finds no answer (the resend must run it)
    assert waiting.is_set()
    assert window.running("j") is None
    assert window.get("j") is None
