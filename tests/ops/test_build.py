"""The one composition root (ops/_build.py): every path that runs a node builds
it the same way, and a name two things claim is refused by each of them."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from actorctl import ConfigError
from actorctl.cluster import load_cluster
from actorctl.ops import build_node, node_actors
from actorctl.ops._foreman import LocalForeman, NodeState
from tests.support.cli import run_cli
from tests.support.harness import free_port


def _write(tmp_path: Path, tree_name: str) -> Path:
    # A node hosting tests.apps.actors:Calculator (reachable as "calculator") and a
    # [[supervisor]] tree on the same node.
    path = tmp_path / "cluster.toml"
    path.write_text(
        '[cluster]\nname = "build"\ninsecure = true\n'
        f'controller = "127.0.0.1:{free_port()}"\n'
        f'[[node]]\nname = "n1"\nlisten = "127.0.0.1:{free_port()}"\n'
        'actors = "tests.apps.actors:Calculator"\ndurable = false\n'
        f'[[supervisor]]\nname = "{tree_name}"\nnode = "n1"\n'
        '  [[supervisor.child]]\n  actor = "tests.apps.actors:Tally"\n  name = "tally"\n'
    )
    return path


def test_what_a_node_hosts_is_its_actors_and_its_trees(tmp_path: Path) -> None:
    config = load_cluster(_write(tmp_path, "pipeline"))
    node = config.node("n1")
    hosted = node_actors(node, config, routes=[("calc", ["amqp://127.0.0.1:1/calculator"])])
    assert sorted(hosted) == ["calc", "calculator", "pipeline"]
    built = build_node(node, config, hosted, security=config.security("n1"))
    assert (built.name, built.port) == ("n1", node.port)


def test_a_tree_named_like_an_actor_is_refused_by_the_builder(tmp_path: Path) -> None:
    config = load_cluster(_write(tmp_path, "calculator"))
    with pytest.raises(ConfigError, match="supervisor 'calculator': node 'n1' has an actor"):
        node_actors(config.node("n1"), config)


def test_a_router_named_like_an_actor_is_refused_by_the_builder(tmp_path: Path) -> None:
    config = load_cluster(_write(tmp_path, "pipeline"))
    with pytest.raises(ConfigError, match="supervisor 'pipeline': node 'n1' has a router"):
        node_actors(config.node("n1"), config, routes=[("pipeline", ["amqp://h:1/x"])])


async def test_the_in_process_foreman_refuses_it_too(tmp_path: Path) -> None:
    # Given the same file run in-process (cluster up --in-process's Foreman)
    config = load_cluster(_write(tmp_path, "calculator"))
    foreman = LocalForeman(config, config.node("n1"), NodeState("n1"))
    # Then it is refused before anything starts, with the same words
    with trio.fail_after(30), pytest.raises(ConfigError, match="has an actor of that name"):
        await foreman.run()


def test_node_run_refuses_it_too(tmp_path: Path) -> None:
    # Given the same file run by `actorctl node run` (what cluster up starts)
    path = _write(tmp_path, "calculator")
    config = load_cluster(path)
    node = config.node("n1")
    run = run_cli(
        *("node", "run", "tests.apps.actors:Calculator"),
        *("--cluster", path, "--name", "n1", "--listen", node.listen, "--insecure"),
        timeout=60,
    )
    # Then it exits with the input error and the same words, no traceback
    assert run.returncode == 2, run.stderr
    assert "supervisor 'calculator': node 'n1' has an actor of that name" in run.stderr
    assert "Traceback" not in run.stderr


def test_flat_keywords_are_sorted_into_the_records_a_node_takes() -> None:
    from actorctl import Limits, NodeSecurity, NodeSupervision
    from actorctl.cluster import node_records

    given = NodeSecurity(insecure=True, sessions=False)
    records = node_records(
        {"security": given, "auth_window": 9.0, "max_message_size": 4096, "port": 7}
    )
    assert records == {
        "security": NodeSecurity(insecure=True, sessions=False, auth_window=9.0),
        "limits": Limits(max_message_size=4096),
        "port": 7,
    }
    assert node_records({"connect_timeout": 2.0}) == {
        "supervision": NodeSupervision(connect_timeout=2.0)
    }
    with pytest.raises(TypeError, match="expected a NodeSecurity record"):
        node_records({"security": {"insecure": True}, "sessions": False})
    with pytest.raises(ConfigError, match="max_handshakes"):
        node_records({"max_handshakes": 0})


def test_in_a_cluster_with_etcd_a_peer_silent_for_the_lease_ttl_is_dead(tmp_path: Path) -> None:
    from actorctl import NodeSupervision

    # Given a cluster whose nodes register in etcd with a 7 s lease
    path = _write(tmp_path, "pipeline")
    path.write_text(path.read_text() + '[etcd]\nendpoints = ["http://127.0.0.1:1"]\nttl = 7\n')
    config = load_cluster(path)
    node = config.node("n1")
    hosted = node_actors(node, config)
    # Then a node built for it takes a peer silent that long for dead
    built = build_node(node, config, hosted, security=config.security("n1"))
    assert built.supervision.idle_timeout == 7.0
    # unless its builder gives it a supervision of its own
    own = NodeSupervision(idle_timeout=3.0)
    built = build_node(node, config, hosted, security=config.security("n1"), supervision=own)
    assert built.supervision.idle_timeout == 3.0
    # and without etcd it keeps the default
    plain = load_cluster(_write(tmp_path, "pipeline"))
    built = build_node(plain.node("n1"), plain, hosted, security=plain.security("n1"))
    assert built.supervision.idle_timeout == NodeSupervision().idle_timeout
