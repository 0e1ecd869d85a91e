"""A node's status and control answers, read back as records.

What each record says on the wire is what the dict it replaced said (the
CLI's --json and other releases read it), and reading it back gives the same
record. An answer that is not such a record (a node of another release, or
one that lies) is an error that names where it came from, the path of each
wrong field and what was expected, never a traceback: asked of a real node
over a real connection.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from actorctl import Actor, handler
from actorctl._errors import WireFormatError
from actorctl.actors._answers import read_answer
from actorctl.cluster._agent_answers import DrainAnswer, FollowAnswer, NodeIdentity
from actorctl.cluster._deadletters import DEAD_LETTERS, DeadLetterFill
from actorctl.ops._foreman import NodeRun
from actorctl.ops._node_view import node_children
from actorctl.supervision import HEALTH_AGENT, BreakerState, Health
from actorctl.supervision._breaker import BreakerStatus
from actorctl.supervision._status import ABSENT, CheckStatus, HealthReport, MailboxFill, TreeRow
from actorctl.tasks.limits._report import LimitsReport, RouterReport, TaskLimits, WorkerLimits
from actorctl.tasks.worker._inspect_answers import HeldRow, NodeStats, WorkerStats, held_rows
from tests.support.harness import node_pair

WAIT = 20.0


class LyingHealth(Actor):
    """A ``_health`` agent of "another release": its report's check says a
    state no release has, and its breaker lacks its counts."""

    @handler
    async def report(self) -> dict[str, Any]:
        return {
            "checks": {"disk": {"state": "sick", "detail": "full", "at": 1.0, "breakers": []}},
            "breakers": {"db": [{"state": "open", "reason": None}]},
        }


async def test_a_malformed_health_report_is_named_with_each_wrong_field() -> None:
    # Given a node whose _health agent answers a report of another shape
    async with node_pair({HEALTH_AGENT: LyingHealth()}) as (server, client):
        with trio.fail_after(WAIT):
            # When cluster status builds that node's rows
            with pytest.raises(WireFormatError) as raised:
                await node_children(client.ref, server.url.rstrip("/"), [HEALTH_AGENT])
    # Then the error names the answer, each wrong field's path and what was expected
    said = str(raised.value)
    assert f"{HEALTH_AGENT} to 'report' is malformed" in said
    assert "expected one of 'healthy', 'degraded'" in said
    assert "got 'sick' @ $.checks['disk'].state" in said
    assert "missing @ $.breakers['db'][0].trips" in said


async def test_a_nodes_own_rows_read_back_as_records() -> None:
    # Given a plain node (its tree and dead letters answered by its own agents)
    async with node_pair({}) as (server, client):
        with trio.fail_after(WAIT):
            # When its rows are built from its answers
            rows = await node_children(client.ref, server.url.rstrip("/"), [])
    # Then they are records: its root supervisor, then its dead letters
    root, letters = rows
    assert (root.name, root.kind, root.state, root.restarts) == (
        "server/actors",
        "supervisor",
        "running",
        0,
    )
    assert letters == TreeRow(DEAD_LETTERS, "dead-letters", "ok", detail="0 kept (max 10000)")
    assert letters.wire() == {
        "name": DEAD_LETTERS,
        "kind": "dead-letters",
        "state": "ok",
        "detail": "0 kept (max 10000)",
    }


def _through_json(value: dict[str, Any] | list[Any]) -> Any:
    return json.loads(json.dumps(value))


def test_each_record_says_on_the_wire_what_its_dict_said_and_reads_back() -> None:
    breaker = BreakerStatus(BreakerState.OPEN, "boom", 1.5, 2, 3, {"disk": Health.DEGRADED})
    report = HealthReport(
        {"disk": CheckStatus(Health.DEGRADED, "slow", 12.5, ("db",))}, {"db": (breaker,)}
    )
    assert report.wire() == {
        "checks": {"disk": {"state": "degraded", "detail": "slow", "at": 12.5, "breakers": ["db"]}},
        "breakers": {
            "db": [
                {
                    "state": "open",
                    "reason": "boom",
                    "resets_in": 1.5,
                    "trips": 2,
                    "failures": 3,
                    "health": {"disk": "degraded"},
                }
            ]
        },
    }
    assert HealthReport.from_wire(_through_json(report.wire()), "r") == report
    fill = DeadLetterFill(8, 10, True)
    assert DeadLetterFill.from_wire(_through_json(fill.wire()), "f") == fill
    identity = NodeIdentity("n1", "boot", 42, "amqp://127.0.0.1:1/", ("_node", "a"), None)
    assert NodeIdentity.from_wire(_through_json(identity.wire()), "i") == identity
    assert FollowAnswer.from_wire({"changed": ["x"], "restart": []}, "w") == FollowAnswer(("x",))
    assert DrainAnswer(False, ("a: 1 unsettled",)).wire() == {
        "drained": False,
        "busy": ["a: 1 unsettled"],
    }
    limits = TaskLimits("10/s", None, None, False, 0)
    worker = WorkerLimits("p", 4, (1, 8), 1, 0, {"add": limits})
    router = RouterReport(2, {"add": limits}, {"add": "10/s"})
    whole = LimitsReport({"w": worker}, {"p": router}, {"add": {"rate_limit": "10/s"}})
    assert whole.wire()["workers"]["w"]["bounds"] == [1, 8]
    assert LimitsReport.from_wire(_through_json(whole.wire()), "l") == whole
    stats = NodeStats("n1", 42, 3.5, {"w": WorkerStats("p", 1, 0, 4)}, {"add": 7})
    assert NodeStats.from_wire(_through_json(stats.wire()), "s") == stats
    row = HeldRow("id1", "add", [1, 2], {}, "w", "p", 1.0)
    assert "eta" not in row.wire()
    assert held_rows(_through_json([row.wire()]), "h") == (row,)
    tree = TreeRow(
        "n1",
        "node",
        "running",
        restarts=None,
        pid=None,
        address="amqp://127.0.0.1:1/",
        children=(TreeRow("a", "actor", "running", restarts=0, mailbox=MailboxFill(0, 100)),),
    )
    assert tree.wire() == {
        "name": "n1",
        "kind": "node",
        "state": "running",
        "restarts": None,
        "pid": None,
        "address": "amqp://127.0.0.1:1/",
        "children": [
            {
                "name": "a",
                "kind": "actor",
                "state": "running",
                "restarts": 0,
                "mailbox": {"depth": 0, "capacity": 100},
            }
        ],
    }
    assert TreeRow.from_wire(_through_json(tree.wire()), "t") == tree
    running = TreeRow("n1", "node", NodeRun.RUNNING).wire()["state"]
    assert type(running) is str
    assert running == "running"
    assert TreeRow.from_wire({"name": "x", "kind": "host", "state": "-"}, "t").restarts is ABSENT


@pytest.mark.parametrize(
    ("answer", "record", "said"),
    [
        ({"held": True, "max": 5, "nearly_full": False}, DeadLetterFill, "got True @ $.held"),
        ({"held": 1, "max": 5}, DeadLetterFill, "missing @ $.nearly_full"),
        ([1, 2], DeadLetterFill, "expected an object, got [1, 2]"),
        ({"changed": "x", "restart": []}, FollowAnswer, "expected a list, got 'x' @ $.changed"),
        ({"drained": 1}, DrainAnswer, "expected true or false, got 1 @ $.drained"),
        ({"a": "4"}, dict[str, int], "expected a whole number, got '4' @ $['a']"),
    ],
)
def test_a_malformed_answer_names_the_field_and_what_was_expected(
    answer: object, record: Any, said: str
) -> None:
    with pytest.raises(WireFormatError) as raised:
        read_answer(answer, record, "node n1's answer")
    assert str(raised.value).startswith("node n1's answer is malformed: ")
    assert said in str(raised.value)


def test_a_malformed_tree_names_the_path_of_the_wrong_row() -> None:
    bad = {
        "name": "c",
        "kind": "supervisor",
        "state": "running",
        "children": [{"name": "n1", "kind": "node", "state": "running", "pid": "12"}],
    }
    with pytest.raises(WireFormatError, match=r"got '12' @ \$\.children\[0\]\.pid"):
        TreeRow.from_wire(bad, "the Controller's answer to 'tree'")
    with pytest.raises(WireFormatError, match=r"missing @ \$\.children\[0\]\.state"):
        TreeRow.from_wire({**bad, "children": [{"name": "n1", "kind": "node"}]}, "tree")
