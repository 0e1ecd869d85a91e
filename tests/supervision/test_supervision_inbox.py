"""Supervisors and monitors on real nodes: mutual TLS, signed messages, and a
node in a subprocess killed with SIGKILL."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from actorctl import (
    Actor,
    ActorSpec,
    Modified,
    RemoteError,
    Restart,
    SupervisorSpec,
    Terminated,
    handler,
    open_node,
)
from actorctl.mailbox import Role
from tests.apps.actors import Calculator
from tests.support.cli import drain, node_ready, start_cli
from tests.support.harness import free_port
from tests.support.keys import make_keys
from tests.support.tls import make_tls


class Watcher(Actor):
    """Watches what it is told to, and keeps every Terminated it hears."""

    def __init__(self) -> None:
        self.heard: list[Terminated] = []
        self.changed = trio.Event()

    @handler
    async def watch_address(self, address: str) -> None:
        await self.watch(self.ref(address))

    @handler
    async def unwatch_address(self, address: str) -> None:
        await self.unwatch(self.ref(address))

    async def on_terminated(self, terminated: Terminated) -> None:
        self.heard.append(terminated)
        self.changed.set()
        self.changed = trio.Event()

    async def wait_heard(self, count: int) -> list[Terminated]:
        with trio.fail_after(30):
            while len(self.heard) < count:
                await self.changed.wait()
        return self.heard


class Quitter(Actor):
    """Stops when asked (a normal exit)."""

    @handler
    async def quit(self) -> None:
        self.stop()


@pytest.fixture
def secrets(tmp_path: Path) -> dict[str, dict[str, Any]]:
    names = ("server", "client", "watcher", "victim")
    tls = make_tls(tmp_path / "certs", *names)
    # the client and the watcher run supervisors through their inboxes: an
    # operator's work (docs/security.md)
    operators = {"client": Role.OPERATOR, "watcher": Role.OPERATOR}
    keys = make_keys(tmp_path / "keys", *names, roles=operators)
    return {name: {"tls": tls[name], "keyring": keys[name]} for name in names}


async def test_start_child_and_terminate_child_through_the_supervisors_signed_inbox(
    secrets: dict[str, dict[str, Any]],
) -> None:
    # Given a node with a supervisor of one calculator, and a client with keys
    tree = SupervisorSpec("maths", [ActorSpec(Calculator, name="calc")], remote_start=True)
    async with (
        open_node("server", [tree], **secrets["server"]) as server,
        open_node("client", host=None, **secrets["client"]) as client,
    ):
        sup = client.ref(server.address_of("maths")).with_options(timeout=10)
        with trio.fail_after(30):
            [calc] = await sup.ask("which_children")
            assert calc == {
                "name": "calc",
                "kind": "actor",
                "state": "running",
                "restarts": 0,
                "mailbox": {"depth": 0, "capacity": 100},
            }
            # When the client starts a second child through the supervisor's inbox
            name = await sup.ask(
                "start_child", {"actor": "tests.apps.actors:Calculator", "name": "calc2"}
            )
            # Then it is reachable on the node, and counted
            calc2 = client.ref(server.address_of(name))
            assert await calc2.ask("add", 1, 2) == 3
            assert await sup.ask("count_children") == {
                "specs": 2,
                "active": 2,
                "supervisors": 0,
                "workers": 2,
            }
            # When the client terminates it
            await sup.ask("terminate_child", "calc2")
            # Then it takes no messages, and the supervisor says it is terminated
            with pytest.raises(Modified, match="stopping"):
                await calc2.deliver("add", 1, 1)
            states = {c["name"]: c["state"] for c in await sup.ask("which_children")}
            assert states == {"calc": "running", "calc2": "terminated"}
            # And restart_child brings it back, a fresh instance
            await sup.ask("restart_child", "calc2")
            assert await calc2.ask("add", 2, 2) == 4
            # And a bad request is an error naming what was wrong
            with pytest.raises(RemoteError, match="no child 'nope'"):
                await sup.ask("terminate_child", "nope")
            with pytest.raises(RemoteError, match=r"child\.actr.*did you mean 'actor'\?"):
                await sup.ask("start_child", {"actr": "tests.apps.actors:Calculator"})


async def test_a_monitor_on_another_node_hears_when_the_watched_actor_stops(
    secrets: dict[str, dict[str, Any]],
) -> None:
    # Given a watcher on one node, and on another a supervisor of two actors
    watcher = Watcher()
    tree = SupervisorSpec(
        "sup",
        [
            ActorSpec(Calculator, name="calc", restart=Restart.TEMPORARY),
            ActorSpec(Quitter, restart=Restart.TRANSIENT),
        ],
    )
    async with (
        open_node("server", [tree], **secrets["server"]) as server,
        open_node("watcher", [watcher], **secrets["watcher"]) as node,
    ):
        calc, quitter = str(server.address_of("calc")), str(server.address_of("quitter"))
        me = node.ref(node.address_of("watcher")).with_options(timeout=10)
        with trio.fail_after(30):
            await me.ask("watch_address", calc)
            await me.ask("watch_address", quitter)
            await me.ask("watch_address", str(server.address_of("nobody")))
            # When the supervisor terminates one, and the other stops by itself
            await node.ref(server.address_of("sup")).ask("terminate_child", "calc")
            await node.ref(quitter).ask("quit")
            heard = await watcher.wait_heard(3)
    # Then the watcher hears of each once, with the reason
    reasons = {t.address: t.reason for t in heard}
    assert reasons == {
        str(server.address_of("nobody")): "no such actor",
        calc: "terminated by supervisor 'sup'",
        quitter: "exited normally",
    }


async def test_a_monitor_hears_when_the_watched_actors_node_is_killed(
    tmp_path: Path, secrets: dict[str, dict[str, Any]], nursery: trio.Nursery
) -> None:
    # Given a node in a subprocess (signed, mutual TLS), and a watcher here
    process = await start_cli(
        nursery, "node", "run", "tests.apps.actors:Calculator", "--listen", "127.0.0.1:0",
        "--name", "victim", "--certs", tmp_path / "certs", "--keys", tmp_path / "keys",
    )  # fmt: skip
    ready, _ = await node_ready(process)
    address = str(ready["address"])
    assert process.stdout is not None
    nursery.start_soon(drain, process.stdout)
    calc = f"{address}/calculator"
    watcher = Watcher()
    async with open_node("watcher", [watcher], node_lost_after=1.0, **secrets["watcher"]) as node:
        me = node.ref(node.address_of("watcher")).with_options(timeout=10)
        with trio.fail_after(30):
            await me.ask("watch_address", calc)
            assert await node.ref(calc).ask("add", 1, 1) == 2
            # When the node is killed with SIGKILL (by its PID)
            os.kill(process.pid, signal.SIGKILL)
            # Then the watcher hears that the actor terminated: its node is lost
            [terminated] = await watcher.wait_heard(1)
    assert terminated.address == calc
    assert terminated.reason.startswith("node lost: no connection to 127.0.0.1:")
    with trio.fail_after(10):
        assert await process.wait() == -signal.SIGKILL


async def test_an_unwatched_actor_sends_no_terminated(
    secrets: dict[str, dict[str, Any]],
) -> None:
    watcher = Watcher()
    tree = SupervisorSpec(
        "sup",
        [
            ActorSpec(Quitter, restart=Restart.TRANSIENT),
            ActorSpec(Quitter, name="q2", restart=Restart.TRANSIENT),
        ],
    )
    async with (
        open_node("server", [tree], **secrets["server"]) as server,
        open_node("watcher", [watcher], **secrets["watcher"]) as node,
    ):
        me = node.ref(node.address_of("watcher")).with_options(timeout=10)
        first, second = str(server.address_of("quitter")), str(server.address_of("q2"))
        with trio.fail_after(30):
            await me.ask("watch_address", first)
            await me.ask("watch_address", second)
            await me.ask("unwatch_address", first)
            await node.ref(first).ask("quit")
            await node.ref(second).ask("quit")
            [only] = await watcher.wait_heard(1)
    assert only.address == second


async def _host_victim(
    port: int, secrets: dict[str, Any], *, task_status: trio.TaskStatus[trio.CancelScope]
) -> None:
    """A node on ``port`` until its scope is cancelled (an abrupt end)."""
    with trio.CancelScope() as scope:
        async with open_node("victim", [Calculator], port=port, **secrets):
            task_status.started(scope)
            await trio.sleep_forever()


async def test_a_monitor_hears_when_the_watched_actors_node_comes_back_as_a_new_process(
    secrets: dict[str, dict[str, Any]], nursery: trio.Nursery
) -> None:
    # Given a watcher of an actor on a node that will be restarted quickly
    port = free_port()
    first = await nursery.start(_host_victim, port, secrets["victim"])
    watcher = Watcher()
    async with open_node("watcher", [watcher], node_lost_after=60.0, **secrets["watcher"]) as node:
        calc = f"amqps://127.0.0.1:{port}/calculator"
        me = node.ref(node.address_of("watcher")).with_options(timeout=10)
        with trio.fail_after(30):
            await me.ask("watch_address", calc)
            assert await node.ref(calc).ask("add", 1, 1) == 2
            # When its node ends and a new one starts on the same port well
            # within node_lost_after (the new one knows nothing of the watch)
            first.cancel()
            await nursery.start(_host_victim, port, secrets["victim"])
            assert await node.ref(calc).ask("add", 2, 2) == 4
            # Then the watcher hears that the actor it watched is gone
            [terminated] = await watcher.wait_heard(1)
    assert terminated.address == calc
    assert terminated.reason.startswith(f"node restarted: 127.0.0.1:{port} is a new process")


async def test_a_supervisor_starts_no_child_named_in_a_message_unless_its_spec_allows_it(
    secrets: dict[str, dict[str, Any]],
) -> None:
    # Given a supervisor declared without remote_start (the default)
    tree = SupervisorSpec("maths", [ActorSpec(Calculator, name="calc")])
    async with (
        open_node("server", [tree], **secrets["server"]) as server,
        open_node("client", host=None, **secrets["client"]) as client,
    ):
        sup = client.ref(server.address_of("maths")).with_options(timeout=10)
        with trio.fail_after(30):
            # When a trusted client asks it to run a command
            with pytest.raises(RemoteError, match="set remote_start = true"):
                await sup.ask("start_child", {"process": ["true"], "name": "intruder"})
            # Then nothing was started
            assert [c["name"] for c in await sup.ask("which_children")] == ["calc"]
            assert "intruder" not in server.cells
