"""Per-host certificates and keys: ``actorctl host bundle`` (issue 34 item 5).

The secrets are made once, as docs/deploy.md says, on an operator's machine
(``certs init``, ``keys gen``), and each host gets only its bundle: its nodes'
certificates and private keys, the CA's certificate, everyone's public keys.
The tests read the bundles' files, then run a cluster of three "hosts" (a
directory each, with its own copy of the cluster file and its bundle; their
nodes on 127.0.0.1), each ``host up`` registered in a real etcd, and a caller
on the operator's machine whose tasks run on the workers of hosts b and c over
mutual TLS and signed messages. The operator then reloads the cluster from
its machine through etcd: each host applies its part with the keys of its
bundle only (its nodes' own; no host holds an operator's key), and a host's
key asking another host's node to drain, follow or change a limit is refused.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from actorctl import Rejected, open_node
from actorctl.cluster import load_cluster
from actorctl.mailbox import IdentityKey, Keyring, Role
from actorctl.tasks import cluster_app
from tests.apps.hosts_app import RECORDS, runs
from tests.support.cli import ROOT
from tests.support.etcd_server import running_etcd
from tests.support.harness import free_port
from tests.support.netns import wait_for_output

ACTORCTL = [sys.executable, "-m", "actorctl"]
READY = 60.0  # seconds a host's nodes may take to start on a loaded 2-core machine
NODES = {"a": ["services"], "b": ["worker-b"], "c": ["worker-c"]}

CLUSTER = """\
[cluster]
name = "bundled"
dev = false

[etcd]
endpoints = ["{etcd}"]
ttl = 3

[[node]]
name = "services"
listen = "127.0.0.1:{pa}"
host = "a"
actors = "tests.apps.hosts_app:app"
services = true

[[node]]
name = "worker-b"
listen = "127.0.0.1:{pb}"
host = "b"
actors = "tests.apps.hosts_app:app"
pools = ["celery"]

[[node]]
name = "worker-c"
listen = "127.0.0.1:{pc}"
host = "c"
actors = "tests.apps.hosts_app:app"
pools = ["celery"]
"""
#: What the operator's reload adds: a rate limit on the task the workers run.
LIMIT = """
[[task]]
name = "hosts.work"
rate_limit = "7/m"
"""


def _env(records: Path | None = None) -> dict[str, str]:
    env = {**os.environ}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    if records is not None:
        env[RECORDS] = str(records)
    return env


def actorctl(*args: str, cwd: Path = ROOT) -> str:
    """What ``actorctl ARGS...`` prints; it must succeed."""
    done = subprocess.run(
        [*ACTORCTL, *args], capture_output=True, text=True, env=_env(), cwd=cwd, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def make_secrets(maker: Path) -> None:
    """On the operator's machine: the CA and every certificate, every identity
    key (the nodes' members, the operator's ``cli``), as docs/deploy.md says."""
    names = [name for nodes in NODES.values() for name in nodes]
    actorctl("certs", "init", str(maker / "certs"), *[f"--node={n}" for n in [*names, "cli"]])
    for name in names:
        actorctl("keys", "gen", name, "--dir", str(maker / "keys"), "--member")
    actorctl("keys", "gen", "cli", "--dir", str(maker / "keys"), "--role", "operator")


@pytest.fixture(scope="module")
def made_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The operator's machine as ``certs init`` and ``keys gen`` leave it: the
    cluster file (etcd nowhere yet) and every secret. Made once for the module
    (five ``actorctl`` processes, seconds on a loaded 2-core machine); each test
    gets a copy of its own (:func:`maker`)."""
    made = tmp_path_factory.mktemp("operator")
    ports = {"pa": free_port(), "pb": free_port(), "pc": free_port()}
    (made / "cluster.toml").write_text(CLUSTER.format(etcd="http://127.0.0.1:9", **ports))
    make_secrets(made)
    return made


@pytest.fixture
def maker(made_once: Path, tmp_path: Path) -> Path:
    """The operator's machine, a copy of the module's for this test alone: what
    a test changes there (a public key deleted, the file's etcd) no other sees."""
    made = tmp_path / "operator"
    shutil.copytree(made_once, made)  # copies each file's mode: private keys stay 0600
    return made


def bundle(maker: Path, host: str, out: Path) -> None:
    actorctl("host", "bundle", str(maker / "cluster.toml"), "--host", host, "--out", str(out))


def test_a_hosts_bundle_holds_its_nodes_secrets_the_ca_certificate_and_public_keys_only(
    maker: Path, tmp_path: Path
) -> None:
    # Given every secret made on the operator's machine
    # When host b's bundle is made
    out = tmp_path / "host-b"
    bundle(maker, "b", out)
    held = {str(path.relative_to(out)) for path in out.rglob("*") if path.is_file()}
    # Then it holds b's node certificate and private keys, the CA's certificate
    assert {"certs/ca.pem", "certs/worker-b.pem", "certs/worker-b.key", "keys/worker-b.key"} <= held
    assert (out / "certs" / "ca.pem").read_bytes() == (maker / "certs" / "ca.pem").read_bytes()
    # and every public key, with the keyring's roles and members
    pubs = {f"keys/{n}.pub" for n in ("services", "worker-b", "worker-c", "cli")}
    assert pubs <= held
    assert {"keys/roles", "keys/members"} <= held
    # And no CA key, no private key of a node of another host, nor the operator's
    private = {path for path in held if path.endswith(".key")}
    assert private == {"certs/worker-b.key", "keys/worker-b.key"}, private
    for path in out.rglob("*.key"):
        assert path.stat().st_mode & 0o777 == 0o600, path
    body = b"".join(path.read_bytes() for path in out.rglob("*") if path.is_file())
    for other in ("ca", "services", "worker-c", "cli"):
        secret = (maker / "certs" / f"{other}.key").read_bytes()
        assert secret not in body, f"{other}'s certificate key is in b's bundle"
    for other in ("services", "worker-c", "cli"):
        secret = (maker / "keys" / f"{other}.key").read_bytes()
        assert secret not in body, f"{other}'s identity key is in b's bundle"
    assert operator_keys(out) == []


def operator_keys(bundle: Path) -> list[str]:
    """The private keys in ``bundle/keys`` whose role, by the bundle's own
    keyring (its ``roles`` file and defaults), is ``operator``."""
    names = [name for nodes in NODES.values() for name in nodes]
    found = []
    for path in sorted((bundle / "keys").glob("*.key")):
        keyring = Keyring.load(bundle / "keys", path.stem, members=names, operators=("controller",))
        if keyring.role(IdentityKey.load(path).key_id) is Role.OPERATOR:
            found.append(path.name)
    return found


def test_a_bundle_is_refused_over_another_and_for_a_host_without_nodes(
    maker: Path, tmp_path: Path
) -> None:
    out = tmp_path / "host-a"
    bundle(maker, "a", out)
    cluster = str(maker / "cluster.toml")
    again = subprocess.run(
        [*ACTORCTL, "host", "bundle", cluster, "--host", "b", "--out", str(out)],
        capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert again.returncode == 2
    assert f"error: {out / 'certs'} is not empty: give --out a new directory" in again.stderr
    assert "Traceback" not in again.stderr
    nowhere = subprocess.run(
        [*ACTORCTL, "host", "bundle", cluster, "--host", "z", "--out", str(tmp_path / "z")],
        capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert nowhere.returncode == 2
    assert "host 'z' runs no node: the file's hosts are a, b, c" in nowhere.stderr
    # And `host up` where every secret is (the operator's machine) warns of them
    everything = subprocess.run(
        [*ACTORCTL, "host", "up", cluster, "--host", "a"],
        capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert everything.returncode == 1  # its etcd does not answer
    assert f"warning: {maker / 'certs' / 'ca.key'} is the cluster CA's private key" in (
        everything.stderr
    )
    assert "cli.key, worker-b.key, worker-c.key in" in everything.stderr, everything.stderr
    (maker / "keys" / "worker-c.pub").unlink()
    unknown = subprocess.run(
        [*ACTORCTL, "host", "bundle", cluster, "--host", "b", "--out", str(tmp_path / "b")],
        capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert unknown.returncode == 2
    assert "has no public key for worker-c" in unknown.stderr, unknown.stderr
    # And a host whose node's key was made an operator gets no bundle: its
    # private key would be an operator's on that host
    actorctl("keys", "add", str(maker / "keys" / "services.pub"), "--role", "operator", "--dir",
             str(maker / "keys"))  # fmt: skip
    operator = subprocess.run(
        [*ACTORCTL, "host", "bundle", cluster, "--host", "a", "--out", str(tmp_path / "a2")],
        capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert operator.returncode == 2
    assert (
        "cannot bundle host 'a': the key of node services has the operator role" in operator.stderr
    ), operator.stderr
    assert "give it the member role" in operator.stderr
    assert not (tmp_path / "a2").exists()


@contextlib.contextmanager
def hosts_up(hosts: dict[str, Path], records: Path) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """``host up`` of each host, in its own directory, each ready; SIGTERMed
    (by PID) and waited for on the way out."""
    ups: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for host, directory in hosts.items():
            ups[host] = subprocess.Popen(
                [*ACTORCTL, "host", "up", str(directory / "cluster.toml"), "--host", host],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_env(records), cwd=ROOT,
            )  # fmt: skip
        for host, up in ups.items():
            said = wait_for_output(up, f"host {host!r} ready", timeout=READY)
            assert "warning:" not in said, said  # it holds no secret it does not use
        yield ups
    finally:
        for up in ups.values():
            if up.poll() is None:
                up.send_signal(signal.SIGTERM)
        for up in ups.values():
            try:
                up.wait(timeout=READY)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()
            if up.stdout is not None:
                up.stdout.close()


def test_a_cluster_whose_hosts_hold_only_their_bundles_runs_tasks_across_them(
    maker: Path, tmp_path: Path
) -> None:
    (tmp_path / "etcd").mkdir()
    with running_etcd(tmp_path / "etcd") as etcd:
        # Given the cluster file naming etcd, and each host's directory holding
        # its copy of the file and its bundle, nothing else
        text = (maker / "cluster.toml").read_text().replace("http://127.0.0.1:9", etcd.url)
        (maker / "cluster.toml").write_text(text)
        hosts = {host: tmp_path / f"host-{host}" for host in NODES}
        for host, directory in hosts.items():
            bundle(maker, host, directory)
            (directory / "cluster.toml").write_text(text)
            assert not (directory / "certs" / "ca.key").exists()
        records = tmp_path / "records"
        records.mkdir()
        # When each host runs `host up` and the operator's caller sends 40 tasks
        with hosts_up(hosts, records) as ups:
            caller = subprocess.run(
                [sys.executable, "-m", "tests.apps.hosts_caller", str(maker / "cluster.toml"), "40",
                 "60"],
                capture_output=True, text=True, env=_env(records), cwd=ROOT, timeout=READY + 60,
            )  # fmt: skip
            said = caller.stdout + caller.stderr
            # Then every result comes back, and the workers of b and c ran them
            assert "results 40 0" in said, said[-3000:]
            sent = (maker / "sent.txt").read_text().split()
            done = runs(records)
            ran = {task for task, _ in done}
            lost = [task for task in sent if task not in ran]
            twice = len(done) - len(ran)
            print(f"40 tasks across bundled hosts: {len(lost)} lost, {twice} ran twice")
            assert lost == []
            assert len({pid for _, pid in done}) == 2, done
            reload_from_bundles(maker, hosts, text)
        for host, up in ups.items():
            assert up.returncode == 0, host


def reload_from_bundles(maker: Path, hosts: dict[str, Path], text: str) -> None:
    """The bundled cluster running: a reload reaches every host, with no
    operator's key on any, and a host's keys reach only its own nodes."""
    # Given no host holding an operator's private key (nor the Controller's)
    for host, directory in hosts.items():
        assert operator_keys(directory) == [], host
        assert not (directory / "keys" / "controller.key").exists(), host
    # When the operator, on its machine, reloads a file that adds a rate limit
    changed = text + LIMIT
    (maker / "cluster.toml").write_text(changed)
    done = subprocess.run(
        [*ACTORCTL, "cluster", "reload", str(maker / "cluster.toml")],
        capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=READY * 2,
    )  # fmt: skip
    # Then every host, set up from its bundle only, applied its part
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {line.split()[0]: line.split()[1] for line in done.stdout.splitlines()[2:5]}
    assert rows == {"a": "changed", "b": "changed", "c": "changed"}, done.stdout
    assert "worker-c: task hosts.work: rate_limit None -> 7/m" in done.stdout, done.stdout
    for host, directory in hosts.items():
        assert (directory / "cluster.toml").read_text() == changed, host
    # When host b's keys (its bundle's) ask host c's worker to drain, to
    # follow a file, or to lift the limit, and ask b's own worker to drain
    on_c = load_cluster(hosts["c"] / "cluster.toml", cluster_app()).node("worker-c")
    asks = [
        ("_node", "drain", (0.5,)),
        ("_node", "follow", (str(hosts["b"] / "cluster.toml"),)),
        ("_tasks", "limit", ("hosts.work", "rate_limit", None)),
    ]
    own, refused = trio.run(ask_as_b, hosts["b"], f"amqps://{on_c.listen}", asks)
    # Then each of c's is refused, naming the role it needs and the one b's key has
    for (actor, op, _), why in zip(asks, refused, strict=True):
        assert f"handler {op!r} of actor {actor!r} needs the operator role" in why, why
        assert "has the member role" in why, why
    # and b's own worker does what its own key asks (as b's part of a reload)
    assert isinstance(own, dict), own
    assert own["drained"] is True, own


async def ask_as_b(
    directory: Path, address: str, asks: list[tuple[str, str, tuple[object, ...]]]
) -> tuple[object, list[str]]:
    """Signed with worker-b's key from b's bundle: worker-b's answer to a
    drain, and the refusals of each of ``asks`` (actor, op, args) of
    ``address`` (each must be refused)."""
    config = load_cluster(directory / "cluster.toml", cluster_app())
    own = f"amqps://{config.node('worker-b').listen}/_node"
    refused = []
    with trio.fail_after(60):
        security = config.security("worker-b")
        async with open_node("worker-b-probe", host=None, security=security) as b:
            drained = await b.ref(own).with_options(timeout=30).ask("drain", 0.5)
            for actor, op, args in asks:
                with pytest.raises(Rejected) as refusal:
                    await b.ref(f"{address}/{actor}").with_options(timeout=30).ask(op, *args)
                refused.append(str(refusal.value))
    return drained, refused
