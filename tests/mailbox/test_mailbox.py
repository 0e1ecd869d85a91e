"""The mailbox's credit accounting, driven directly (its links are the only fake)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from actorctl import Envelope
from actorctl.mailbox import ACCEPTED, RELEASED, Mailbox, Outcome


class Link:
    """A receiver link as the mailbox sees it; what a sender would do is scripted."""

    def __init__(self) -> None:
        self.credit = 0
        self.reclaimed = 0
        self.idle = False

    def flow(self, n: int) -> None:
        self.credit += n

    def reclaim(self) -> None:
        self.reclaimed += 1

    def use(self) -> None:
        self.credit -= 1


def _envelope(i: int) -> Envelope:
    return Envelope(message_id=str(i), to="a", subject="h", body=[[], {}])


def test_one_link_gets_the_whole_window_and_is_topped_up_in_batches() -> None:
    box = Mailbox(10)
    link = Link()
    box.attach(link)
    assert link.credit == 10
    taken = []
    for i in range(10):
        link.use()
        taken.append(box.put_nowait(_envelope(i), None))
    with pytest.raises(trio.WouldBlock):
        box.put_nowait(_envelope(99), None)  # a sender that ignores its credit
    taken[0].settle(ACCEPTED)
    assert link.credit == 1  # the sender was waiting: no batching then
    for inbound in taken[1:4]:
        inbound.settle(ACCEPTED)
    assert link.credit == 1  # now it has some: wait for a batch
    taken[4].settle(ACCEPTED)
    assert link.credit == 1
    taken[5].settle(ACCEPTED)  # half the window is free: one flow for five slots
    assert link.credit == 6
    assert box.statistics().max_depth == 10


def test_a_second_link_makes_the_first_give_back_what_is_over_its_share() -> None:
    box = Mailbox(10)
    a, b = Link(), Link()
    box.attach(a)
    assert a.credit == 10
    box.attach(b)
    assert a.reclaimed == 1
    assert b.credit == 0
    a.credit = 0  # the sender answered the drain
    box.credit_changed()
    assert (a.credit, b.credit) == (5, 5)


def test_links_that_wait_are_served_longest_waiting_first() -> None:
    box = Mailbox(2)
    a, b = Link(), Link()
    box.attach(a)
    box.attach(b)
    a.credit = 0
    box.credit_changed()
    assert (a.credit, b.credit) == (1, 1)
    held = []
    for link in (a, b):
        link.use()
        held.append(box.put_nowait(_envelope(len(held)), None))
    held[0].settle(ACCEPTED)
    held[1].settle(ACCEPTED)
    assert (a.credit, b.credit) == (1, 1)


def test_an_idle_link_gets_one_credit_and_the_active_ones_share_the_rest() -> None:
    box = Mailbox(10)
    a, b = Link(), Link()
    box.attach(a)
    box.attach(b)
    # a gave back the whole window it held unused (it answered the drain)
    a.credit = 0
    a.idle = 1
    box.credit_changed()
    assert (a.credit, b.credit) == (1, 9)
    # once a uses its one credit it is active again, and shares as b does
    a.use()
    a.idle = 0
    taken = box.put_nowait(_envelope(1), None)
    b.credit = 0  # b sent nine that were settled already
    taken.settle(ACCEPTED)
    assert (a.credit, b.credit) == (5, 5)


def test_links_never_served_go_before_idle_ones_that_ignored_a_drain() -> None:
    box = Mailbox(2)
    served, ignored, answered, older, newer = Link(), Link(), Link(), Link(), Link()
    for link in (served, ignored, answered, older, newer):
        box.attach(link)
    for link in (served, ignored, answered, older, newer):
        link.credit = 0
    ignored.idle = 2  # its credit was taken back
    answered.idle = 1  # it gave its credit back
    # the one served before goes first, then the idle one that answered
    box.credit_changed()
    assert (served.credit, answered.credit, newer.credit, older.credit) == (1, 1, 0, 0)
    # then those never served, the newest first; the one that ignored its drain last
    served.credit = answered.credit = 0
    served.idle = answered.idle = 2
    box.credit_changed()
    assert (newer.credit, older.credit, ignored.credit) == (1, 1, 0)


def test_modified_released_and_stopping_messages_leave_a_link_its_credit() -> None:
    # docs/protocol.md §4.1: a modified or released message frees its slot once
    # settled; one refused because the actor is stopping held none, and the
    # link is granted credit again when the actor runs again (issue 32).
    box = Mailbox(4)
    link = Link()
    box.attach(link)
    for i in range(4):
        link.use()
        box.put_nowait(_envelope(i), None)
    assert link.credit == 0  # the sender waits
    box.receive_nowait().settle(Outcome.modified("actorctl:circuit-open", "open"))
    assert link.credit == 1  # its slot is free, and the waiting sender gets it
    # The actor stops: what it had queued is released, and the slots come back
    released = box.close()
    assert len(released) == 3
    for inbound in released:
        inbound.settle(RELEASED)
    assert box.statistics().depth == 0
    # What the sender sends meanwhile is refused as the actor is stopping (the
    # node settles it modified, actorctl:actor-stopping): its credit is used up
    while link.credit > 0:
        link.use()
        with pytest.raises(trio.ClosedResourceError):
            box.put_nowait(_envelope(99), None)
    # When the actor runs again, the link gets the whole window back
    box.reopen()
    assert link.credit == 4
    box.put_nowait(_envelope(100), None)


async def test_wait_arrival_wakes_on_the_next_message_or_a_close_and_takes_none() -> None:
    box = Mailbox(10)
    woken: list[int] = []

    async def waiter() -> None:
        await box.wait_arrival()
        woken.append(box.pending)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            # Given a task waiting for an arrival
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            assert woken == []
            # When a message arrives, then it wakes and the message is still queued
            box.put_nowait(_envelope(1), None)
        assert woken == [1]
        assert box.receive_nowait().envelope.message_id == "1"
        async with trio.open_nursery() as nursery:
            # And a close wakes a waiter too, and one that comes after it at once
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            box.close()
        await box.wait_arrival()
    assert woken == [1, 0]


class Listener:
    """An idle actor's cell as its mailbox sees it: told of each arrival."""

    def __init__(self) -> None:
        self.told = 0

    def arrived(self) -> None:
        self.told += 1


def test_a_listener_hears_each_arrival_and_the_close_and_depth_counts_what_is_held() -> None:
    # Given a mailbox whose arrivals a listener hears (an idle actor's cell)
    box = Mailbox(10)
    listener = Listener()
    box.on_arrival(listener)
    # When two messages arrive and one is taken
    box.put_nowait(_envelope(1), None)
    box.put_nowait(_envelope(2), None)
    taken = box.receive_nowait()
    # Then it heard of each, and the depth counts the queued one and the taken one
    assert listener.told == 2
    assert box.depth == box.statistics().depth == 2
    # And once that one is settled and the mailbox closes, it hears of the
    # close, and the one released is no longer held
    taken.settle(ACCEPTED)
    assert box.depth == 1
    [left] = box.close()
    assert listener.told == 3
    left.settle(RELEASED)
    assert box.depth == box.statistics().depth == 0
    # And a mailbox nobody listens to any more tells no one
    box.on_arrival(None)
    box.close()
    assert listener.told == 3
