"""`actorctl cluster up`: a supervised cluster of node processes from one file."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from actorctl import ConfigError, Modified, Node, TlsFiles, open_node
from actorctl.cluster import SHUTDOWN_GRACE, NodeConfig, hosted_actors, load_cluster
from actorctl.mailbox import Keyring
from actorctl.tasks import cluster_app
from tests.support.cli import cli_env, run_cli_async, start_cli
from tests.support.harness import free_port, node_pair
from tests.support.output import Output

#: Seconds a wait on what `cluster up` says may take.
SAYS = 60.0


def _cluster_file(directory: Path, ports: list[int], controller: int) -> Path:
    nodes = "".join(
        f'\n[[node]]\nname = "n{i}"\nlisten = "127.0.0.1:{port}"\n'
        'actors = "tests.apps.actors:Calculator"\n'
        for i, port in enumerate(ports, 1)
    )
    path = directory / "cluster.toml"
    path.write_text(
        f'[cluster]\nname = "test"\ndev = true\ncontroller = "127.0.0.1:{controller}"\n{nodes}'
    )
    return path


@asynccontextmanager
async def _cli_client(directory: Path) -> AsyncIterator[Node]:
    """A client node with the development secrets `cluster up` made for "cli" in ``directory``."""
    tls = TlsFiles.from_dir(directory / "certs", "cli")
    keys = Keyring.load(directory / "keys", "cli")
    async with open_node("client", host=None, tls=tls, keyring=keys) as client:
        yield client


async def _actorctl(*args: str) -> subprocess.CompletedProcess[bytes]:
    return await run_cli_async(*args)


async def test_cluster_status_without_a_cluster_says_so(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(
        f'[cluster]\ninsecure = true\ncontroller = "127.0.0.1:{free_port()}"\n'
        f'[[node]]\nname = "a"\nlisten = "127.0.0.1:{free_port()}"\nactors = "m:o"\n'
    )
    result = await _actorctl("cluster", "status", str(path), "--timeout", "1")
    assert result.returncode == 1
    assert b"is the cluster up?" in result.stderr


async def test_a_broken_cluster_file_is_a_clear_error_with_exit_code_2(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text('[[node]]\nname = "a"\nlisten = "nowhere"\nactors = "m:o"\n')
    result = await run_cli_async("cluster", "up", path)
    assert result.returncode == 2
    assert str(path).encode() in result.stderr
    assert b"node[0].listen" in result.stderr
    assert b"HOST:PORT" in result.stderr


def test_cluster_file_errors_name_the_key(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text('[cluster]\nname = "x"\n')
    with pytest.raises(ConfigError, match=r"key 'node': expected at least one \[\[node\]\]"):
        load_cluster(path)
    path.write_text('[[node]]\nname = "a"\nlisten = "127.0.0.1:1"\nactors = "nope"\n')
    with pytest.raises(ConfigError, match=r"node\[0\]\.actors.*MODULE:OBJECT"):
        load_cluster(path)


def test_shutdown_grace_is_seconds_and_a_wrong_one_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    node = '[[node]]\nname = "n"\nlisten = "127.0.0.1:5999"\nactors = "tests.apps.task_app:app"\n'
    # Given no shutdown_grace, the default; given one, its seconds
    path.write_text(node)
    assert load_cluster(path).nodes[0].shutdown_grace == SHUTDOWN_GRACE == 20.0
    for given, seconds in (("0", 0.0), ("45", 45.0), ("2.5", 2.5)):
        path.write_text(f"{node}shutdown_grace = {given}\n")
        assert load_cluster(path).nodes[0].shutdown_grace == seconds
    # When it is not seconds from 0 to a day, the error names the key and the fix
    for wrong in ('"20"', "-1", "true", "1e9", "nan"):
        path.write_text(f"{node}shutdown_grace = {wrong}\n")
        with pytest.raises(
            ConfigError,
            match=r"key 'node\[0\]\.shutdown_grace': expected seconds from 0 to 86400 that "
            r"node 'n' gives its running handlers to finish when it stops \(e\.g\. "
            r"shutdown_grace = 20\.0",
        ):
            load_cluster(path)
    # And a misspelling of it is named as one
    path.write_text(f"{node}shutdown_gace = 5\n")
    with pytest.raises(ConfigError, match=r"did you mean 'shutdown_grace'\?"):
        load_cluster(path)


async def test_cluster_up_supervises_nodes_and_restarts_one_killed(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    # Given a cluster of two nodes brought up from a file (development secrets)
    ports = [free_port(), free_port()]
    path = _cluster_file(tmp_path, ports, free_port())
    # (as systemd would: a datagram socket in NOTIFY_SOCKET for sd_notify)
    with trio.socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        await notify.bind(str(tmp_path / "notify"))
        env = cli_env({"NOTIFY_SOCKET": str(tmp_path / "notify")})
        proc = await start_cli(nursery, "cluster", "up", path, env=env)
        assert proc.stdout is not None
        out = Output(proc.stdout, SAYS)
        await out.until("cluster 'test' ready")
        with trio.fail_after(30):
            assert await notify.recv(64) == b"READY=1"
    table = out.text()
    assert "NODE" in table
    assert "running" in table
    [second] = [line for line in out.lines if "node n2 ready at" in line]  # before "ready"
    pid = int(second.rpartition("(pid ")[2].rstrip(")"))
    async with _cli_client(tmp_path) as client:
        ref = client.ref(f"amqps://127.0.0.1:{ports[1]}/calculator").with_options(timeout=10)
        with trio.fail_after(30):
            assert await ref.ask("add", 1, 2) == 3
        # When that node is killed with SIGKILL
        os.kill(pid, signal.SIGKILL)
        # Then the cluster restarts it, and it serves again
        restarted = await out.until("node n2 ready at")
        assert "(restart 1)" in restarted
        with trio.fail_after(30):
            assert await ref.ask("add", 2, 2) == 4
    # And the Controller reports it, from another process
    status = await _actorctl("cluster", "status", str(path))
    assert status.returncode == 0, status.stderr
    # (one tree: Controller -> nodes -> each node's supervisor -> its actors)
    tree = status.stdout.decode().splitlines()
    assert tree[0].startswith("controller  cluster 'test'  supervisor  running")
    assert tree[0].endswith(f"pid {proc.pid}")  # the Controller's: `cluster up` itself
    [n2] = [line for line in tree if "n2  node" in line]
    assert "running  restarts 1" in n2
    assert any("calculator  actor  running  restarts 0  mailbox 0/100" in line for line in tree)
    # And `--pid` prints that pid alone, for `kill -HUP` (docs/operations.md)
    only = await _actorctl("cluster", "status", str(path), "--pid")
    assert only.returncode == 0, only.stderr
    assert only.stdout.decode() == f"{proc.pid}\n"
    # And `cluster down` stops the whole cluster
    down = await _actorctl("cluster", "down", str(path))
    assert down.returncode == 0, down.stderr
    await out.until("cluster 'test' stopped")
    with trio.fail_after(30):
        await proc.wait()
    assert proc.returncode == 0


async def test_no_accepted_task_is_lost_when_a_worker_node_is_killed_mid_flight(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    # Given two worker nodes behind a router, in a supervised cluster
    ports = {name: free_port() for name in ("n1", "n2", "r")}
    path = tmp_path / "cluster.toml"
    path.write_text(
        f'[cluster]\nname = "work"\ndev = true\ncontroller = "127.0.0.1:{free_port()}"\n'
        + "".join(
            f'[[node]]\nname = "{n}"\nlisten = "127.0.0.1:{ports[n]}"\n'
            'actors = "tests.apps.cluster_work:Counter"\n'
            for n in ("n1", "n2")
        )
        + f'[[node]]\nname = "r"\nlisten = "127.0.0.1:{ports["r"]}"\n'
        + '[[router]]\nname = "work"\nnode = "r"\ninstances = ["n1/counter", "n2/counter"]\n'
    )
    counts = tmp_path / "counts"
    counts.mkdir()
    proc = await start_cli(
        nursery, "cluster", "up", path, env=cli_env({"COUNTER_DIR": str(counts)})
    )
    assert proc.stdout is not None
    out = Output(proc.stdout, SAYS)
    first = await out.until("node n1 ready at")
    n1 = int(first.rpartition("(pid ")[2].rstrip(")"))
    await out.until("cluster 'work' ready")
    tasks = 1000
    delivered = 0
    killed = trio.Event()
    async with _cli_client(tmp_path) as client:
        router = client.ref(f"amqps://127.0.0.1:{ports['r']}/work")

        async def sender(first_task: int) -> None:
            nonlocal delivered
            for task in range(first_task, tasks, 100):
                await router.deliver("work", task)  # returns once a worker ran it
                delivered += 1
                if delivered == 300 and not killed.is_set():
                    # When a worker node is killed with tasks in flight
                    os.kill(n1, signal.SIGKILL)
                    killed.set()

        with trio.fail_after(120):
            async with trio.open_nursery() as senders:
                for first_task in range(100):
                    senders.start_soon(sender, first_task)
    assert killed.is_set()
    # Then the node was restarted, and every accepted task ran at least once
    await out.until("node n1 ready at")
    ran = [int(line) for log in counts.glob("*.log") for line in log.read_text().split()]
    assert set(ran) == set(range(tasks))
    assert len(ran) >= tasks  # at least once: some may have run twice
    down = await _actorctl("cluster", "down", str(path))
    assert down.returncode == 0, down.stderr
    await out.until("cluster 'work' stopped")


async def test_cluster_up_in_process_runs_every_node_in_one_process(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    ports = [free_port(), free_port()]
    path = _cluster_file(tmp_path, ports, free_port())
    proc = await start_cli(nursery, "cluster", "up", path, "--in-process")
    assert proc.stdout is not None
    out = Output(proc.stdout, SAYS)
    await out.until("cluster 'test' ready")
    pids = {line.rpartition("(pid ")[2].rstrip(")") for line in out.lines
            if " ready at " in line}  # fmt: skip
    assert pids == {str(proc.pid)}  # one process: cluster up's own
    async with _cli_client(tmp_path) as client:
        ref = client.ref(f"amqps://127.0.0.1:{ports[0]}/calculator").with_options(timeout=10)
        with trio.fail_after(30):
            assert await ref.ask("add", 20, 22) == 42
    # A cluster of plain actors has no task workers: the task commands say so
    # (and not "is the cluster up?": it is)
    for command in (("inspect", "stats"), ("control", "limits")):
        asked = await _actorctl(*command, str(path))
        assert asked.returncode == 1
        assert b"hosts a task app" in asked.stderr
        assert b"is the cluster up" not in asked.stderr
    down = await _actorctl("cluster", "down", str(path))
    assert down.returncode == 0, down.stderr
    await out.until("cluster 'test' stopped")
    with trio.fail_after(30):
        await proc.wait()
    assert proc.returncode == 0


OLD_TASK_FILE = """[cluster]
name = "old"
app = "tests.apps.task_app:app"

[[node]]
name = "worker"
listen = "127.0.0.1:5999"
actors = "tests.apps.actors:Calculator"
pools = ["celery"]
"""


NODE = '[[node]]\nname = "worker"\nlisten = "127.0.0.1:5999"\n'
CALCULATOR = 'actors = "tests.apps.actors:Calculator"\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # a key of the older task format: the error says where it moved
        (
            OLD_TASK_FILE,
            r"no such key 'cluster\.app' \(= .*\): it moved to the nodes that host the "
            r'app: name the app as such a node\'s actors \(actors = "MODULE:APP"\) and say '
            r"what the node hosts there \(pools = ",
        ),
        (
            f'[cluster]\ncontoller = "127.0.0.1:1"\n{NODE}{CALCULATOR}',
            r"no such key 'cluster\.contoller' \(= '127\.0\.0\.1:1'\): did you mean 'controller'\?",
        ),
        (
            f"{NODE.replace('[[node]]', '[[nodes]]')}{CALCULATOR}{NODE}{CALCULATOR}",
            r"no such key 'nodes' \(= .*\): did you mean 'node'\?",
        ),
        (
            f'{NODE}{CALCULATOR}[[router]]\nname = "r"\nnode = "worker"\n'
            'instance = ["worker/calculator"]\n',
            # a misspelt required key is reported missing, naming the misspelling
            r"key 'router\[0\]\.instances' is missing: router\[0\]\.instance is not a key: "
            r"a misspelling of 'instances'\?",
        ),
        (
            f'{NODE}pools = ["celery"]\n',
            r"no such key 'node\[0\]\.pools' \(= \['celery'\]\): nothing reads it on a node that "
            r"names no actors",
        ),
    ],
    ids=["moved", "misspelt", "table", "router", "no-actors"],
)
def test_a_key_that_nothing_reads_is_an_error_naming_the_fix(
    tmp_path: Path, text: str, message: str
) -> None:
    # Given a cluster file with a key that nothing reads
    path = tmp_path / "cluster.toml"
    path.write_text(text)
    # When it is read (as the CLI reads it, for the task layer too), then the
    # error names the file, the table and key, and the fix
    with pytest.raises(ConfigError, match=message) as caught:
        load_cluster(path, cluster_app())
    assert str(caught.value).startswith(f"{path}: ")


async def test_cluster_up_and_node_run_refuse_keys_of_the_older_task_format(
    tmp_path: Path,
) -> None:
    # Given a cluster file of the older format: the app under [cluster], pools on
    # a node whose actors are a plain actor class
    path = tmp_path / "cluster.toml"
    path.write_text(OLD_TASK_FILE.replace("[cluster]", "[cluster]\ninsecure = true"))
    # When it is brought up, then nothing starts and the error says where app moved
    up = await _actorctl("cluster", "up", str(path))
    assert up.returncode == 2
    assert f"{path}: no such key 'cluster.app'".encode() in up.stderr
    assert b'actors = "MODULE:APP"' in up.stderr
    # And once app is gone, the node itself refuses the pools nothing would read
    path.write_text(path.read_text().replace('app = "tests.apps.task_app:app"\n', ""))
    run = await _actorctl(
        "node", "run", "tests.apps.actors:Calculator", "--cluster", str(path), "--name", "worker",
        "--listen", f"127.0.0.1:{free_port()}", "--insecure",
    )  # fmt: skip
    assert run.returncode == 2
    assert f"{path}: no such key 'node[0].pools'".encode() in run.stderr
    assert b"tests.apps.actors:Calculator is not an actors factory" in run.stderr


def test_a_node_key_that_its_actors_do_not_read_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    cases = {
        # plain actors read no settings: a misspelt node key is named as such
        ("tests.apps.actors:Calculator", "instance = 2"): r"no such key "
        r"'node\[0\]\.instance' \(= 2\): did you mean 'instances'\?",
        # a task app reads pools and services, and only those
        ("tests.apps.task_app:app", 'pool = ["celery"]'): r"no such key 'node\[0\]\.pool' "
        r"\(= \['celery'\]\): did you mean 'pools'\?",
        ("tests.apps.task_app:app", "workers = 3"): r"no such key 'node\[0\]\.workers' \(= 3\): "
        r"the actors factory tests\.apps\.task_app:app reads no such key; the keys it may have: "
        r"\['actors', 'deadletters', 'durable', 'health', 'instances', 'limits', 'listen', "
        r"'metrics', 'name', 'pools', "
        r"'services', 'shutdown_grace'\]",
    }
    for (actors, extra), message in cases.items():
        path.write_text(
            f'[[node]]\nname = "n"\nlisten = "127.0.0.1:5999"\nactors = "{actors}"\n{extra}\n'
        )
        # When the node builds its actors (or, for a key that is a misspelling
        # of a key every node has, already when the file is read: no actors
        # imported), then the key nothing reads is refused
        with pytest.raises(ConfigError, match=message) as caught:
            _load_and_host(path)
        assert str(caught.value).startswith((f"{path.resolve()}: ", f"{path}: "))
    # A factory must say what it reads, so that its node's other keys can be refused
    older = "tests.apps.actors:factory_without_settings_keys"
    with pytest.raises(ConfigError, match=r"has actors_for but no settings_keys"):
        hosted_actors(older, node=NodeConfig("n", "127.0.0.1", 5999, older))


def _load_and_host(path: Path) -> None:
    config = load_cluster(path)  # the file is read without importing the actors
    hosted_actors(config.nodes[0].actors, node=config.nodes[0], cluster=config)


async def test_an_actor_named_by_class_in_a_cluster_file_restarts_fresh() -> None:
    # Given a node hosting two instances of an actor class, as cluster.toml names it
    actors = hosted_actors("tests.apps.actors:Tally", 2)
    assert sorted(actors) == ["tally", "tally-2"]
    async with node_pair(actors) as (server, client):
        tally = client.ref(server.address_of("tally"))
        other = client.ref(server.address_of("tally-2"))
        with trio.fail_after(10):
            assert [await tally.ask("bump") for _ in range(3)] == [1, 2, 3]
            assert await other.ask("bump") == 1  # each copy is an actor of its own
            # When the actor crashes
            with pytest.raises(Modified):
                await tally.deliver("explode")
            # Then the node restarted it as a fresh instance: its count starts again
            assert await tally.ask("bump") == 1
            # And its sibling, which did not crash, kept its state
            assert await other.ask("bump") == 2
