"""The row a node keeps for a task's final state (``_state.keep_result``).

The row's JSON text is written without the JSON encoder for the usual values
(issue 30): these tests keep rows of every kind of body in a real SQLite
store, open it again, and check each row is the text ``compact`` writes for
the same object, and that ``stored_result`` reads it back as it was kept.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import trio

from actorctl.mailbox import Envelope
from actorctl.store import Store
from actorctl.tasks.protocol._protocol import (
    FAILURE,
    H_RETRIES,
    H_TASK_ID,
    REVOKED,
    SUCCESS,
    compact,
)
from actorctl.tasks.protocol._state import RESULTS, keep_result, stored_result
from tests.support.harness import Logs

BODIES: list[Any] = [
    3,
    -7,
    2**80,
    0,
    None,
    "",
    'text with "quotes", a \\ backslash, a line\nfeed, \u2028, \x00 and é',
    True,
    False,
    1.5,
    [1, "two", None, {"three": [3.0]}],
    {"error": "ValueError", "message": "bad", "nested": {"é": [True]}},
]
#: A command's ``retries`` header, as a sender may give it (None: none).
RETRIES: list[Any] = [None, 0, 4, True, "3"]


def _row(state: str, body: Any, task: str, retries: Any) -> str:
    """The row as the JSON encoder writes it (the text kept before issue 30)."""
    row: dict[str, Any] = {"state": state, "body": body, "task": task}
    if isinstance(retries, int):
        row["retries"] = retries
    return compact(row)


async def test_a_kept_row_is_the_json_text_of_its_state_body_task_and_retries(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.sqlite"
    expected: dict[str, tuple[str, Any, str]] = {}
    store = Store(path, name="n")
    with trio.fail_after(60):
        await _keep_each(store, expected)
    # The node starts again: each row is there, as the encoder writes it
    store = Store(path, name="n")
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            for task_id, (text, body, state) in expected.items():
                assert store.get(RESULTS, task_id) == text.encode(), task_id
                kept = stored_result(store, task_id)
                assert kept is not None
                assert kept[:2] == [state, json.loads(json.dumps(body))]
            nursery.cancel_scope.cancel()


async def _keep_each(store: Store, expected: dict[str, tuple[str, Any, str]]) -> None:
    """Keep a result for each body, retries, state and task name, noting its row."""
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        count = 0
        for body in BODIES:
            for retries in RETRIES:
                for state, task in ((SUCCESS, "add"), (FAILURE, 'tâche."q"'), (REVOKED, "t")):
                    count += 1
                    task_id = f"task-{count}"
                    headers: dict[str, Any] = {H_TASK_ID: task_id}
                    if retries is not None:
                        headers[H_RETRIES] = retries
                    request = Envelope(
                        message_id=f"m-{count}",
                        to="/pool",
                        subject=task,
                        body=[[], {}],
                        correlation_id=task_id,
                        headers=headers,
                    )
                    assert keep_result(store, time.time(), request, state, body, expires=3600.0)
                    expected[task_id] = (_row(state, body, task, retries), body, state)
        await store.sync()
        nursery.cancel_scope.cancel()


def test_a_body_that_is_not_json_is_not_kept_and_says_why(logs: Logs) -> None:
    store = Store(None, name="n")
    request = Envelope(
        message_id="m",
        to="/pool",
        subject="add",
        body=[[], {}],
        correlation_id="t",
        headers={H_TASK_ID: "t"},
    )
    for body in (float("nan"), object(), {1j: 2}):
        assert not keep_result(store, 1000.0, request, SUCCESS, body)
        assert store.get(RESULTS, "t") is None
    refused = logs.of_type("actorctl:result:unstorable")
    assert [line["message_id"] for line in refused] == ["m", "m", "m"]
    assert "not JSON compliant" in refused[0]["error"]
    assert "not JSON serializable" in refused[1]["error"]
