"""``actorctl inspect`` and ``actorctl control revoke|shutdown`` against a real
cluster (tests/apps/inspect.toml: a services node and three worker nodes, a pool
each; mutual TLS, signed control messages), as table and as JSON.

One cluster runs for the whole module; the test that shuts it down is last.
Each command runs as its own ``actorctl`` process. A task that must be running
(``hold``) says so on a TCP port of the test and runs until the test answers.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from examples._cluster import running_cluster

from actorctl import TaskFailed, TaskRevoked, chain, open_node
from actorctl.cluster import load_cluster
from tests.apps.inspect_app import app, broken, hold, step_a, step_b, step_c
from tests.support.cli import run_cli_async
from tests.support.filewatch import FileWatch

APPS = Path(__file__).resolve().parents[1] / "apps"
WAIT = 20.0  # seconds any one answer may take on a loaded 2-core machine


@pytest.fixture(scope="module")
def cluster() -> Iterator[Path]:
    with running_cluster(APPS / "inspect.toml", echo=False) as path:
        yield path


async def actorctl(*args: str | Path) -> tuple[int, str, str]:
    """Run ``actorctl ARGS``: its exit code, stdout and stderr."""
    done = await run_cli_async(*args, timeout=60)
    out, err = done.stdout.decode(), done.stderr.decode()
    assert "Traceback" not in err, err
    return done.returncode, out, err


async def ask_controller(cluster: Path, handler: str, *args: Any) -> Any:
    """Ask the cluster's Controller directly (signed, over mutual TLS)."""
    config = load_cluster(cluster)
    host, port = config.controller
    async with open_node("probe", host=None, security=config.security("cli")) as node:
        ref = node.ref(f"{config.scheme}://{host}:{port}/controller").with_options(timeout=WAIT)
        return await ref.ask(handler, *args)


async def until(cluster: Path, op: str, holds: Callable[[dict[str, Any]], bool]) -> None:
    """Ask every ``_tasks`` actor ``op`` again until ``holds(answers)``.

    Nothing crosses the processes to say "a worker took this task": the
    answers are the only signal, so they are asked for again, with a short
    pause between asks, until they hold or WAIT runs out."""
    with trio.fail_after(WAIT):
        while not holds(await ask_controller(cluster, "broadcast", "_tasks", op, [], WAIT)):  # noqa: ASYNC110 (no event crosses the processes)
            await trio.sleep(0.05)


class Holds:
    """The test's end of the ``hold`` tasks: each connects, says its label,
    and runs until it is answered."""

    def __init__(self, listener: trio.SocketListener) -> None:
        self.listener = listener
        self.port = listener.socket.getsockname()[1]

    async def next(self) -> tuple[str, trio.SocketStream]:
        """The next ``hold`` task that started: its label, and its stream."""
        with trio.fail_after(WAIT):
            stream = await self.listener.accept()
            label = b""
            while not label.endswith(b"\n"):
                label += await stream.receive_some(100)
        return label.decode().strip(), stream


@asynccontextmanager
async def holds() -> AsyncIterator[Holds]:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    async with listeners[0]:
        yield Holds(listeners[0])


# -- inspect ----------------------------------------------------------------------------


async def test_inspect_active_and_reserved_show_the_running_and_the_waiting_task_and_revoke_terminates(  # noqa: E501
    cluster: Path,
) -> None:
    async with app.aconnect(cluster), holds() as port:
        # Given a task running on pool a (one run at a time) and one waiting behind it
        first = await hold.adelay(port.port, "first")
        label, running = await port.next()
        assert label == "first"
        second = await hold.adelay(port.port, "second")
        await until(cluster, "reserved", lambda a: [t["id"] for t in a["node-a"]] == [second.id])

        # When active and reserved are inspected, as JSON and as tables
        code, out, _ = await actorctl("inspect", "active", cluster, "--json")
        assert code == 0
        active = json.loads(out)
        assert set(active) == {"services", "node-a", "node-b", "node-c"}
        [task] = active["node-a"]
        assert (task["id"], task["name"], task["args"], task["worker"]) == (
            first.id,
            "inspect.hold",
            [port.port, "first"],
            "a",
        )
        assert task["started"] <= time.time()
        assert active["node-b"] == active["node-c"] == active["services"] == []
        code, out, _ = await actorctl("inspect", "active", cluster)
        header, row = out.splitlines()
        assert header.split() == ["NODE", "WORKER", "ID", "NAME", "ARGS", "STARTED"]
        assert row.split()[:4] == ["node-a", "a", first.id, "inspect.hold"]
        assert f'{port.port}, "first"' in row

        code, out, _ = await actorctl("inspect", "reserved", cluster, "--json")
        assert code == 0
        [waiting] = json.loads(out)["node-a"]
        assert (waiting["id"], waiting["started"]) == (second.id, None)
        code, out, _ = await actorctl("inspect", "reserved", cluster)
        assert out.splitlines()[1].split()[:4] == ["node-a", "a", second.id, "inspect.hold"]

        # Then revoking the running one with --terminate cancels it, and the
        # waiting one runs in its place
        code, out, _ = await actorctl("control", "revoke", cluster, first.id, "--terminate")
        assert code == 0, out
        assert out.startswith(f"{first.id}: revoked and terminated on 5 node(s)")
        with pytest.raises(TaskRevoked):
            await first.aget(timeout=WAIT)
        await running.aclose()
        label, running = await port.next()
        assert label == "second"
        await running.send_all(b"x")
        assert await second.aget(timeout=WAIT) == "second"
        await running.aclose()
        code, out, _ = await actorctl("inspect", "active", cluster)
        assert out.strip() == "no active tasks"


async def test_inspect_scheduled_shows_a_delayed_task_until_it_is_revoked(cluster: Path) -> None:
    async with app.aconnect(cluster):
        # Given a task delayed by ten minutes (the scheduler holds it once it is sent)
        result = await step_a.aapply_async((1,), countdown=600)

        # When the scheduled tasks are inspected
        code, out, _ = await actorctl("inspect", "scheduled", cluster, "--json")
        assert code == 0
        [task] = json.loads(out)["services"]
        assert (task["id"], task["name"], task["pool"], task["args"]) == (
            result.id,
            "inspect.step_a",
            "a",
            [1],
        )
        assert 500 < task["eta"] - time.time() <= 600
        code, out, _ = await actorctl("inspect", "scheduled", cluster)
        assert out.splitlines()[1].split()[:4] == ["services", result.id, "inspect.step_a", "a"]

        # Then a revoke ends it (REVOKED) and it is no longer scheduled
        code, out, _ = await actorctl("control", "revoke", cluster, result.id, "--json")
        assert code == 0
        assert json.loads(out)["services (scheduler)"] == 1
        with pytest.raises(TaskRevoked):
            await result.aget(timeout=WAIT)
        code, out, _ = await actorctl("inspect", "scheduled", cluster)
        assert out.strip() == "no scheduled tasks"


async def test_inspect_stats_and_registered_give_each_worker_node_its_counts_and_tasks(
    cluster: Path,
) -> None:
    async with app.aconnect(cluster):
        assert await (await step_a.adelay(1)).aget(timeout=WAIT) == 2

    code, out, _ = await actorctl("inspect", "stats", cluster, "--json")
    assert code == 0
    stats = json.loads(out)
    a = stats["node-a"]
    assert a["workers"] == {"a": {"pool": "a", "active": 0, "reserved": 0, "budget": 1}}
    assert a["total"]["inspect.step_a"] >= 1
    assert a["pid"] > 0
    assert a["uptime"] >= 0
    assert stats["services"]["workers"] == {}
    code, out, _ = await actorctl("inspect", "stats", cluster)
    lines = out.splitlines()
    assert lines[0].split()[:8] == [
        "NODE", "PID", "UPTIME", "WORKER", "POOL", "BUDGET", "ACTIVE", "RESERVED"
    ]  # fmt: skip
    assert [line.split()[0] for line in lines[1:]] == ["node-a", "node-b", "node-c"]
    assert "inspect.step_a=" in lines[1]

    code, out, _ = await actorctl("inspect", "registered", cluster, "--json")
    assert code == 0
    assert json.loads(out) == {
        "services": {},
        "node-a": {"inspect.hold": "a", "inspect.step_a": "a"},
        "node-b": {"inspect.step_b": "b"},
        "node-c": {"inspect.broken": "c", "inspect.step_c": "c"},
    }
    code, out, _ = await actorctl("inspect", "registered", cluster)
    assert [line.split() for line in out.splitlines()] == [
        ["NODE", "TASK", "POOL"],
        ["node-a", "inspect.hold", "a"],
        ["node-a", "inspect.step_a", "a"],
        ["node-b", "inspect.step_b", "b"],
        ["node-c", "inspect.broken", "c"],
        ["node-c", "inspect.step_c", "c"],
    ]


async def test_a_node_that_does_not_answer_is_named_and_the_others_are_shown(
    cluster: Path,
) -> None:
    # Given node-b stopped (SIGSTOP): it cannot answer
    rows = await ask_controller(cluster, "status")
    pid = next(row["pid"] for row in rows if row["node"] == "node-b")
    os.kill(pid, signal.SIGSTOP)
    try:
        code, out, err = await actorctl("inspect", "registered", cluster, "--timeout", "3")
    finally:
        os.kill(pid, signal.SIGCONT)
    # Then the others are shown, node-b is named, and the command fails
    assert code == 1
    assert "node-a" in out
    assert "node-c" in out
    assert "node-b" not in out
    assert "error: node 'node-b' did not answer: AskTimeout" in err


async def test_bad_input_gets_a_clear_error_and_no_traceback(cluster: Path) -> None:
    code, _, err = await actorctl("inspect", "everything", cluster)
    assert code == 2
    assert "No such command 'everything'" in err
    code, _, err = await actorctl("control", "revoke", cluster, "not an id")
    assert code == 2
    assert "'not an id' is not a task id" in err
    code, _, err = await actorctl("control", "shutdown", cluster, "node-z")
    assert code == 1
    assert "no node 'node-z' in cluster 'inspect': its nodes are services, node-a" in err
    code, _, err = await actorctl("inspect", "active", cluster, "--timeout", "0")
    assert code == 2
    assert "--timeout 0" in err
    code, _, err = await actorctl("inspect", "active", cluster.parent / "nowhere.toml")
    assert code == 2
    assert "nowhere.toml" in err


# -- one trace across nodes ---------------------------------------------------------------


def trace_lines(cluster: Path) -> list[dict[str, Any]]:
    """The eliot lines of every node's log that are part of a task's run."""
    found = []
    for path in sorted((cluster.parent / "logs").glob("*.log")):
        for raw in path.read_text().splitlines():
            if raw.startswith("{") and '"actorctl:task"' in raw:
                found.append({**json.loads(raw), "node": path.stem})
    return found


async def test_logs_task_shows_a_chain_that_crossed_three_nodes_as_one_tree(
    cluster: Path,
) -> None:
    # Given a chain of three steps, one per pool: node-a, then node-b, then node-c
    async with app.aconnect(cluster):
        result = await chain(step_a.s(1), step_b.s(), step_c.s()).aapply_async()
        assert await result.aget(timeout=WAIT) == 1  # ((1 + 1) * 2) - 3
    first = result.id  # the chain's handle: its first step

    # (the last step's end is logged as its result leaves: its node's log has
    # it a moment after the result came; no event crosses the processes)
    def ended() -> int:
        lines = trace_lines(cluster)
        trace = {line["task_uuid"] for line in lines if line.get("task_id") == first}
        return sum(
            line["task_uuid"] in trace and line.get("action_status") == "succeeded"
            for line in lines
        )

    with FileWatch(cluster.parent / "logs") as logs, trio.fail_after(WAIT):
        while ended() < 3:
            await logs.changed()

    # When the trace of the chain is asked for (by its first step's task id)
    code, out, _ = await actorctl("logs", cluster, "--task", first)
    assert code == 0, out

    # Then it is one tree: each step nested under the step that sent it, each
    # on its own node, each ended
    uuid, *rows = out.splitlines()
    steps = [row for row in rows if "actorctl:task [" in row]
    assert [row.split("actorctl:task [")[1].split("]")[0] for row in steps] == [
        "node-a",
        "node-b",
        "node-c",
    ]
    names = [row.split("task=")[1].split()[0] for row in steps]
    assert names == ["inspect.step_a", "inspect.step_b", "inspect.step_c"]
    depths = [row.index("actorctl:task") for row in steps]
    assert depths[0] < depths[1] < depths[2]
    assert all(" succeeded in " in row for row in steps)
    assert f"task_id={first}" in steps[0]

    # And the same tree comes for its last step's task id, for the trace's
    # eliot uuid, and as JSON lines
    last = steps[2].split("task_id=")[1].split()[0]
    for other in (last, uuid):
        code, again, _ = await actorctl("logs", cluster, "--task", other)
        assert again == out
    code, lines, _ = await actorctl("logs", cluster, "--task", first, "--json")
    nodes = {json.loads(line)["_node"] for line in lines.splitlines()}
    assert {"node-a", "node-b", "node-c"} <= nodes
    assert {json.loads(line)["task_uuid"] for line in lines.splitlines()} == {uuid}


async def test_logs_task_says_a_failed_task_failed(cluster: Path) -> None:
    # Given a task that failed (its run, an eliot action, ended normally)
    async with app.aconnect(cluster):
        result = await broken.s(7).aapply_async()
        with pytest.raises(TaskFailed, match="broken on purpose"):
            await result.aget(timeout=WAIT)

    def logged() -> bool:  # its run's end is in its node's log
        lines = trace_lines(cluster)
        uuids = {line["task_uuid"] for line in lines if line.get("task_id") == result.id}
        return any(
            line.get("action_status") == "succeeded" and line["task_uuid"] in uuids
            for line in lines
        )

    with FileWatch(cluster.parent / "logs") as logs, trio.fail_after(WAIT):
        while not logged():
            await logs.changed()
    # When its trace is shown, then its run says failed, not succeeded
    code, out, _ = await actorctl("logs", cluster, "--task", result.id)
    assert code == 0, out
    [row] = [row for row in out.splitlines() if "actorctl:task [" in row]
    assert "  failed in " in row
    assert "succeeded" not in row


async def test_logs_task_names_what_it_looked_for_when_nothing_matches(cluster: Path) -> None:
    code, out, err = await actorctl("logs", cluster, "--task", "no-such-task")
    assert code == 1
    assert out == ""
    assert "names task 'no-such-task'" in err


# -- shutdown: last, it ends the module's cluster ------------------------------------------


async def test_control_shutdown_stops_one_node_for_good_then_the_whole_cluster(
    cluster: Path,
) -> None:
    code, out, _ = await actorctl("control", "shutdown", cluster, "node-c")
    assert (code, out.strip()) == (0, "node 'node-c' stopped")
    rows = {row["node"]: row for row in await ask_controller(cluster, "status")}
    assert rows["node-c"]["state"] == "stopped"
    code, out, _ = await actorctl("inspect", "registered", cluster, "--json")
    assert code == 0
    assert set(json.loads(out)) == {"services", "node-a", "node-b"}

    code, out, _ = await actorctl("control", "shutdown", cluster, "--json")
    assert code == 0
    assert json.loads(out) == {"node": None, "answer": "cluster 'inspect' stopping"}
