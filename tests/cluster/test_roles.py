"""The role table (docs/security.md): every handler of the runtime's own actors,
called by a key of each role, over mutual TLS with signed messages on 127.0.0.1,
is run or refused exactly as the table says."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from actorctl import (
    Address,
    Envelope,
    Node,
    Rejected,
    RemoteError,
    SupervisorSpec,
    TlsFiles,
    open_node,
)
from actorctl.cluster import Router
from actorctl.mailbox import IdentityKey, Keyring, Role
from actorctl.mailbox._roles import write_role
from actorctl.ops._controller import Controller
from actorctl.supervision import HealthMonitor
from actorctl.testing import SERVICES, TestCluster, open_cluster
from tests.apps.task_app import app
from tests.support.cli import cli_output
from tests.support.harness import free_port
from tests.support.keys import APPLIES_WITHIN, make_keys
from tests.support.tls import make_tls

OPERATOR, MEMBER, CLIENT = Role.OPERATOR, Role.MEMBER, Role.CLIENT
ALL = frozenset(Role)
OP = frozenset({OPERATOR})
NODES = frozenset({MEMBER, OPERATOR})

# (node, actor, handler, args, the roles that may call it): the table of
# docs/security.md. A call that is admitted may still fail on its arguments
# (no child "nope"): that is the handler's answer, not a refusal.
TABLE: list[tuple[str, str, str, tuple[Any, ...], frozenset[Role]]] = [
    ("w1", "_node", "identity", (), ALL),
    ("w1", "_node", "statistics", (), ALL),
    ("w1", "_node", "tree", (), ALL),
    ("w1", "_node", "monitor", ("nope", "amqp://127.0.0.1:1/nobody"), ALL),
    ("w1", "_node", "demonitor", ("nope", "amqp://127.0.0.1:1/nobody"), ALL),
    ("w1", "_node", "follow", ("/nonexistent/cluster.toml",), OP),
    ("w1", "_node", "refresh_security", (), OP),
    ("w1", "_node", "drain", (0.5,), OP),
    ("w1", "_deadletters", "list", (), ALL),
    ("w1", "_deadletters", "fill", (), ALL),
    ("w1", "_deadletters", "show", ("nope",), ALL),
    ("w1", "_deadletters", "retry", ("nope",), OP),
    ("w1", "_deadletters", "purge", ("no-such-reason",), OP),
    ("w1", "_tasks", "revoke", (["no-such-task"],), OP),
    ("w1", "_tasks", "limit", ("nope", "rate_limit", None), OP),
    ("w1", "_tasks", "budget", ("nope", 1), OP),
    ("w1", "_tasks", "active", (), OP),
    ("w1", "_tasks", "reserved", (), OP),
    ("w1", "_tasks", "recent", (), OP),
    ("w1", "_tasks", "overview", (), OP),
    ("w1", "_tasks", "limits", (), ALL),
    ("w1", "_tasks", "stats", (), ALL),
    ("w1", "_tasks", "registered", (), ALL),
    ("w1", "_tasks", "result", ("no-such-task",), ALL),
    (SERVICES, "scheduler", "revoke", (["no-such-task"],), OP),
    (SERVICES, "scheduler", "scheduled", (), OP),
    (SERVICES, "scheduler", "pending", (), ALL),
    ("plain", "sup", "which_children", (), ALL),
    ("plain", "sup", "count_children", (), ALL),
    ("plain", "sup", "tree", (), ALL),
    ("plain", "sup", "start_child", ({"actor": "tests.apps.actors:Calculator", "name": "c"},), OP),
    ("plain", "sup", "terminate_child", ("nope",), OP),
    ("plain", "sup", "restart_child", ("nope",), OP),
    ("plain", "sup", "delete_child", ("nope",), OP),
    ("plain", "_health", "report", (), ALL),
    ("plain", "controller", "status", (), ALL),
    ("plain", "controller", "tree", (), ALL),
    ("plain", "controller", "holder", ("scheduler",), ALL),
    ("plain", "controller", "deadletters", ("list",), OP),
    ("plain", "controller", "broadcast", ("_tasks", "stats"), OP),
    ("plain", "controller", "lease", ("test-role", "amqp://127.0.0.1:1/x", 1.0), NODES),
    ("plain", "controller", "stop_node", ("nope",), OP),
    ("plain", "controller", "reload", (), OP),
    ("plain", "controller", "down", (), OP),
]  # fmt: skip

# The callers: the CLI's key (an operator in development mode), a member's key
# granted in the roles file, and a key nobody gave a role (a client).
CALLERS = {OPERATOR: "cli", MEMBER: "m1", CLIENT: "alice"}


@asynccontextmanager
async def role_cluster(tmp_path: Path) -> AsyncIterator[tuple[TestCluster, dict[str, Node]]]:
    """A secure task cluster (services, w1) in development mode, a plain node
    with a supervisor, a health monitor and a Controller, and a caller per role.
    Keys m1 (role member) and alice (no role) are made before the nodes start."""
    keys = tmp_path / "keys"
    for name in ("m1", "alice", "plain"):
        IdentityKey.generate(name).save(keys, name)
    write_role(keys, "m1", MEMBER)
    write_role(keys, "plain", MEMBER)
    async with (
        open_cluster(app, workers=1, secure=True, directory=tmp_path) as cluster,
        AsyncExitStack() as stack,
    ):
        config = cluster.config
        tls = TlsFiles.from_dir(config.certs, "cli")  # TLS says who may connect; keys, who acts
        actors = [
            SupervisorSpec("sup", []),
            HealthMonitor("plain", []),
            Controller(config, {}, trio.Event()),
        ]
        plain = await stack.enter_async_context(
            open_node("plain", actors, port=0, tls=tls, keyring=Keyring.load(keys, "plain"))
        )
        nodes = {**cluster.nodes, "plain": plain}
        callers = {}
        for role, name in CALLERS.items():
            callers[role] = await stack.enter_async_context(
                open_node(name, host=None, tls=tls, keyring=Keyring.load(keys, name))
            )
        yield cluster, {**{f"node:{k}": v for k, v in nodes.items()}, **callers_by_name(callers)}


def callers_by_name(callers: dict[Role, Node]) -> dict[str, Node]:
    return {f"caller:{role.value}": node for role, node in callers.items()}


async def outcome(caller: Node, target: Node, actor: str, op: str, args: tuple[Any, ...]) -> str:
    """``allowed`` (run: answered, or failed on its arguments) or ``refused``."""
    ref = caller.ref(target.address_of(actor)).with_options(timeout=20)
    try:
        await ref.ask(op, *args)
    except Rejected as exc:
        if "actorctl:not-permitted" in str(exc):
            return "refused"
        raise
    except RemoteError:
        pass  # it ran, and answered with an error about its arguments
    return "allowed"


async def test_every_control_handler_called_with_every_role_is_run_or_refused_per_the_table(
    tmp_path: Path,
) -> None:
    async with role_cluster(tmp_path) as (_cluster, nodes):
        found: dict[tuple[str, str, str], str] = {}
        expected: dict[tuple[str, str, str], str] = {}
        with trio.fail_after(120):
            for node, actor, op, args, admitted in TABLE:
                for role in Role:
                    key = (f"{actor}.{op}", role.value, node)
                    expected[key] = "allowed" if role in admitted else "refused"
                    found[key] = await outcome(
                        nodes[f"caller:{role.value}"], nodes[f"node:{node}"], actor, op, args
                    )
        wrong = {k: (found[k], expected[k]) for k in expected if found[k] != expected[k]}
        assert not wrong, f"(found, expected) per (handler, role, node): {wrong}"


async def test_a_refusal_names_the_handler_the_callers_role_and_the_role_needed(
    tmp_path: Path,
) -> None:
    async with role_cluster(tmp_path) as (_cluster, nodes):
        client, w1 = nodes["caller:client"], nodes["node:w1"]
        with trio.fail_after(30), pytest.raises(Rejected) as refused:
            await client.ref(w1.address_of("_tasks")).ask("revoke", ["t1"])
        text = str(refused.value)
        assert "actorctl:not-permitted" in text
        assert "handler 'revoke' of actor '_tasks' needs the operator role" in text
        assert "has the client role" in text


async def test_a_dead_letter_is_shown_to_its_own_sender_and_an_operator_only(
    tmp_path: Path,
) -> None:
    async with role_cluster(tmp_path) as (_cluster, nodes):
        w1 = nodes["node:w1"]
        alice_key = Keyring.load(tmp_path / "keys", "alice").identity.key_id
        letter = w1.dead_letters.add(
            reason="poison",
            target=str(w1.address_of("celery")),
            envelope=Envelope("m-1", "/celery", "secret_task", [["card-number"], {}]),
            sender=alice_key,
        )
        with trio.fail_after(60):
            for role, sees in ((OPERATOR, True), (CLIENT, True), (MEMBER, False)):
                ref = nodes[f"caller:{role.value}"].ref(w1.address_of("_deadletters"))
                listed = await ref.ask("list")
                assert [entry["id"] for entry in listed["letters"]] == ([letter] if sees else [])
                if sees:
                    shown = await ref.ask("show", letter)
                    assert shown["body"] == [["card-number"], {}]
                else:
                    with pytest.raises(Rejected, match="only its sender or the operator role"):
                        await ref.ask("show", letter)


async def test_a_role_granted_with_keys_add_applies_to_a_running_node_within_seconds(
    tmp_path: Path,
) -> None:
    # Given a node with a supervisor, and a client whose key has no role (a client)
    keys = make_keys(tmp_path / "keys", "server", "client")
    tls = make_tls(tmp_path / "certs", "server", "client")
    async with (
        open_node("server", [SupervisorSpec("sup", [])], tls=tls["server"], keyring=keys["server"])
        as server,
        open_node("client", host=None, tls=tls["client"], keyring=keys["client"]) as client,
    ):  # fmt: skip
        sup = client.ref(server.address_of("sup")).with_options(timeout=10)
        with trio.fail_after(30), pytest.raises(Rejected, match="has the client role"):
            await sup.ask("terminate_child", "nope")
        # When an operator grants its key the operator role with the CLI
        watch = server.key_watch
        assert watch is not None
        before = watch.keyring.generation
        pub = tmp_path / "keys" / "client.pub"
        granted = await cli_output("keys", "add", pub, "--role", "operator", "--dir", pub.parent)
        assert "role operator" in granted
        with trio.fail_after(APPLIES_WITHIN):
            await watch.wait_changed(before)
        # Then the running node runs what it refused (the child is unknown: its answer)
        with trio.fail_after(30), pytest.raises(RemoteError, match="nope"):
            await sup.ask("terminate_child", "nope")
        listed = await cli_output("keys", "list", "--dir", pub.parent)
        [row] = [line for line in listed.splitlines() if line.startswith("client ")]
        assert row.endswith("public, operator")


async def test_a_router_asks_with_its_callers_role_never_its_own(tmp_path: Path) -> None:
    # Given a supervisor (its child changes: an operator's), a router to it on
    # the same node and one on another member node, and a client's key
    keys = make_keys(tmp_path / "keys", "server", "gate", "client", roles={"gate": MEMBER})
    tls = make_tls(tmp_path / "certs", "server", "gate", "client")
    port = free_port()
    sup = f"amqps://127.0.0.1:{port}/sup"
    local = Router([Address.parse(sup)])
    async with (
        open_node(
            "server", {"sup": SupervisorSpec("sup", []), "via": local},
            port=port, tls=tls["server"], keyring=keys["server"],
        ) as server,
        open_node(
            "gate", {"via": Router([Address.parse(sup)])},
            tls=tls["gate"], keyring=keys["gate"],
        ) as gate,
        open_node("client", host=None, tls=tls["client"], keyring=keys["client"]) as client,
    ):  # fmt: skip
        with trio.fail_after(30):
            for node in (server, gate):
                via = client.ref(node.address_of("via")).with_options(timeout=10)
                # When the client asks through the router what only an operator may
                with pytest.raises(Rejected, match="has the client role"):
                    await via.ask("terminate_child", "nope")
                # Then it is refused as if asked directly; what it may ask, it gets
                assert await via.ask("count_children") is not None
