"""The options of a task send as one checked record (issue 29, item 5):
``SendOptions`` is built where the options enter, names a bad option and the
nearest known one, and says how an at-most-once send meets ``confirm`` and
``durable`` (refused, or a documented precedence: never silent).
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from actorctl import App, ConfigError, MisuseError
from actorctl.tasks.protocol._protocol import signature_from_wire
from actorctl.tasks.protocol._send_options import Delivery, SendOptions


def test_options_in_wire_form_become_typed_fields() -> None:
    # Given options as apply_async hands them on (wire form)
    moment = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
    given = {
        "countdown": 5,
        "expires": moment,
        "priority": 3,
        "time_limit": 10,
        "link": {"t": "t.cb"},
        "sinks": "audit,archive",
        "map": "starmap",
        "acks_late": False,
        "retry_policy": '{"max_retries":2}',
        "chain": None,  # None is the default, as apply_async passes it
    }
    # When they are checked
    options = SendOptions.of(given, "task t.add")
    # Then each is a typed field, one signature a tuple of one, sinks split
    assert options.countdown == 5.0
    assert options.link == ({"t": "t.cb"},)
    assert options.sinks == ("audit", "archive")
    assert (options.map, options.acks_late, options.chain) == ("starmap", False, None)
    assert options.expiry_time(now=0.0) == moment.timestamp()
    assert options.due(now=100.0) == 105.0


def test_an_eta_as_a_datetime_is_seconds_since_the_epoch() -> None:
    moment = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
    options = SendOptions.of({"eta": moment}, "task t.add")
    assert options.eta == moment.timestamp()
    assert options.due(now=0.0) == moment.timestamp()
    assert SendOptions.of({"expires": 30}, "task t.add").expiry_time(now=100.0) == 130.0


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"countdwn": 5}, "task t.add: unknown send option countdwn=5 (did you mean countdown=?)"),
        ({"priorty": 1}, "(did you mean priority=?)"),
        ({"countdown": "soon"}, "task t.add: countdown='soon': give seconds from now"),
        ({"acks_late": "no"}, "task t.add: acks_late='no': give True or False"),
        ({"priority": 1.5}, "priority=1.5: give a whole number (0 to 9, highest first)"),
        ({"map": "zip"}, 'map=\'zip\': give "map" or "starmap"'),
        ({"link": ["t.cb"]}, "link=['t.cb']: give task signatures (task.s(...))"),
        ({"sinks": [1]}, "sinks=[1]: give sink names or addresses"),
    ],
)
def test_a_bad_send_option_is_named_with_its_fix(given: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError) as refused:
        SendOptions.of(given, "task t.add")
    assert says in str(refused.value)


def test_an_unknown_option_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as refused:
        SendOptions.of({"zzz": 1}, "task t.add")
    assert "did you mean" not in str(refused.value)
    assert "known: countdown, eta, expires, priority" in str(refused.value)


def test_an_at_least_once_send_is_delivered_as_its_caller_asks() -> None:
    options = SendOptions()
    assert options.delivery("t.add", confirm=None, durable=True) == Delivery(
        presettled=False, confirm=None, durable=True
    )
    assert options.delivery("t.add", confirm=True, durable=False) == Delivery(
        presettled=False, confirm=True, durable=False
    )


def test_at_most_once_takes_precedence_over_a_durable_send() -> None:
    # Given an at-most-once task's options (a worker's follow-up, an event's
    # fan-out and a periodic firing ask for durable sends of whatever task comes)
    options = SendOptions(acks_late=False)
    # When a durable send of it is asked for
    delivery = options.delivery("t.once", confirm=None, durable=True)
    # Then it goes out pre-settled, never held by the backlog (documented)
    assert delivery == Delivery(presettled=True, confirm=False, durable=False)


def test_a_confirmed_at_most_once_send_is_refused_saying_what_to_do() -> None:
    options = SendOptions(acks_late=False)
    with pytest.raises(MisuseError) as refused:
        options.delivery("t.once", confirm=True, durable=False)
    assert "task t.once: acks_late=False is sent pre-settled (at-most-once)" in str(refused.value)
    assert "send it with confirm=None, or with acks_late=True" in str(refused.value)


def test_options_read_from_the_wire_are_checked_where_they_are_sent() -> None:
    # Given a signature as a header carries it (§14.3)
    name, pool, _, _, _, wired = signature_from_wire(
        {"t": "t.add", "o": {"priority": 2, "acks_late": False}}, "p"
    )
    # When its options are checked for its send
    options = SendOptions.from_wire(wired, f"task {name}")
    # Then they are typed fields
    assert (pool, options.priority, options.acks_late) == ("p", 2, False)
    # And bad ones are a ValueError (bad data from the wire) naming the option
    with pytest.raises(ValueError, match=r"task t\.add: unknown send option prio=2 \(did"):
        SendOptions.from_wire({"prio": 2}, "task t.add")
    with pytest.raises(ValueError, match=r"send options must be an object, got \[1\]"):
        SendOptions.from_wire([1], "task t.add")


def test_apply_async_names_the_nearest_option_before_anything_is_sent() -> None:
    # Given an app in eager mode (the same checks as a connected send)
    mine = App("mine", eager=True)

    @mine.task
    def add(a: int, b: int) -> int:
        return a + b

    # When a call misspells an option, or gives a bad value
    with pytest.raises(ConfigError) as misspelt:
        add.apply_async((1, 2), countdwn=3)
    with pytest.raises(ConfigError) as bad:
        add.apply_async((1, 2), priority="high")
    # Then the error names it, the nearest known option, and the fix
    assert "unknown option(s) ['countdwn'] (did you mean countdown=?)" in str(misspelt.value)
    assert "priority='high': give a whole number (0 to 9, highest first)" in str(bad.value)
    # And a good call runs
    assert add.apply_async((1, 2), priority=3).get() == 3
