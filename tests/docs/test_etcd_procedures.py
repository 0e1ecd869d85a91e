"""docs/deploy.md's procedures, run as the page gives them (issue 34 item 5).

The three etcd members of examples/deploy/etcd/ run on 127.0.0.1, each on
ports of its own and from its own member file; each "host" is a directory
standing for its root (``/etc/default/etcd``, ``/etc/etcd/pki/``,
``/var/lib/etcd/``, ``/var/backups/`` under it), TLS made with a CA of the
test's own (tests/support/tls.py). The page's blocks marked ``long
tests/docs/test_etcd_procedures.py: NAME`` are run by bash as written, but for the
addresses and root paths, rewritten to the host's directory and ports; on
PATH, ``etcdctl`` is Debian's (etcd-client) and ``systemctl`` is
:data:`SYSTEMCTL`: ``start etcd`` and ``stop etcd`` start and stop the
member of the host the block runs on, by its PID; other units are the
test's to stop and start around the block. The test reads what etcd holds
with etcdctl to tell that each procedure did what the page says.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from actorctl.store import Store
from tests.support.docs_blocks import ROOT, blocks
from tests.support.harness import free_port
from tests.support.tls import make_tls

HOSTS = ("a", "b", "c")
MEMBERS = ROOT / "examples" / "deploy" / "etcd"
WAIT = 60.0  # seconds a member may take to start or to join, on a loaded 2-core machine

#: ``systemctl`` for the blocks: ``start etcd`` starts the member of the host
#: whose root is $HOST_ROOT from its /etc/default/etcd (its PID in etcd.pid
#: there), ``stop etcd`` SIGTERMs that PID and waits (bounded) until it is gone.
SYSTEMCTL = """\
import os, select, signal, subprocess, sys
verb, unit = sys.argv[1:3]
root = os.environ["HOST_ROOT"]
pidfile = os.path.join(root, "etcd.pid")
if unit != "etcd":
    sys.exit(0)  # another unit: the test stops and starts it around the block
if verb == "start":
    env = {k: v for k, v in os.environ.items() if not k.startswith("ETCD")}
    for line in open(os.path.join(root, "etc/default/etcd")):
        if "=" in line and not line.startswith("#"):
            key, _, value = line.strip().partition("=")
            env[key] = value
    with open(os.path.join(root, "etcd.log"), "ab") as log:
        member = subprocess.Popen(["etcd"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
    open(pidfile, "w").write(str(member.pid))
elif verb == "stop":
    try:
        pid = int(open(pidfile).read())
        gone = os.pidfd_open(pid)  # readable once it has ended (not this one's child)
        os.kill(pid, signal.SIGTERM)
    except (FileNotFoundError, ProcessLookupError):
        sys.exit(0)  # stopped already
    if not select.select([gone], [], [], 30)[0]:
        sys.exit(f"etcd (pid {pid}) did not stop within 30 s")
"""


def _tools() -> None:
    for tool, package in (("etcd", "etcd-server"), ("etcdctl", "etcd-client")):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed: apt-get install {package}")


def procedure(name: str) -> str:
    """The text of the docs/deploy.md block marked
    ``long tests/docs/test_etcd_procedures.py: NAME``."""
    wanted = f"tests/docs/test_etcd_procedures.py: {name}"
    found = [b for b in blocks() if b.page == "docs/deploy.md" and b.mark("long") == wanted]
    assert len(found) == 1, f"docs/deploy.md has {len(found)} blocks marked {wanted!r}"
    return found[0].text


class Hosts:
    """Three hosts' roots, their etcd members' ports, and how to run a block on one."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.roots = {host: directory / f"host-{host}" for host in HOSTS}
        self.client = {host: free_port() for host in HOSTS}
        self.peer = {host: free_port() for host in HOSTS}
        tools = directory / "bin"
        tools.mkdir()
        (tools / "systemctl").write_text(f"#!{sys.executable}\n{SYSTEMCTL}")
        (tools / "systemctl").chmod(0o755)
        self.path = f"{tools}{os.pathsep}{os.environ['PATH']}"
        make_tls(directory / "pki", *(f"etcd-{i}" for i in (1, 2, 3)), "client")
        for i, (host, root) in enumerate(self.roots.items(), 1):
            pki = root / "etc" / "etcd" / "pki"
            pki.mkdir(parents=True)
            for name in ("ca.pem", f"etcd-{i}.pem", f"etcd-{i}.key", "client.pem", "client.key"):
                shutil.copy(directory / "pki" / name, pki / name)
            member = self.rewrite((MEMBERS / f"member-{i}.env").read_text(), host)
            (root / "etc" / "default").mkdir(parents=True)
            (root / "etc" / "default" / "etcd").write_text(member)
            (root / "var" / "lib" / "etcd").mkdir(parents=True)

    def rewrite(self, text: str, host: str) -> str:
        """``text`` with each member's address and ports the test's, and the
        root paths under ``host``'s directory."""
        for i, name in enumerate(HOSTS, 1):
            text = text.replace(f"10.0.0.{i}:2379", f"127.0.0.1:{self.client[name]}")
            text = text.replace(f"10.0.0.{i}:2380", f"127.0.0.1:{self.peer[name]}")
        root = self.roots[host]
        return re.sub(r"(?<![\w.])/(etc|var|root)/", lambda m: f"{root}/{m.group(1)}/", text)

    def run(self, host: str, *names: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run the page's blocks ``names`` on ``host``, in one bash -e, after
        its ``env`` block (and ``user``, once auth is on)."""
        script = "\n".join(self.rewrite(procedure(name), host) for name in names)
        done = subprocess.run(
            ["bash", "-e", "-c", script],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=self.env(host),
            timeout=WAIT,
            check=False,
        )
        if check:
            assert done.returncode == 0, f"{names} on {host}:\n{done.stdout}\n{done.stderr}"
        return done

    def env(self, host: str) -> dict[str, str]:
        """What a block on ``host`` runs with: this PATH, the host's root for
        ``systemctl``, and where auth.sh reads the user actorctl's password
        (/etc/actorctl/etcd/password on the host)."""
        root = self.roots[host]
        password = root / "etc" / "actorctl" / "etcd" / "password"
        return {**os.environ, "PATH": self.path, "HOST_ROOT": str(root),
                "PASSWORD_FILE": str(password)}  # fmt: skip

    def systemctl(self, host: str, verb: str) -> None:
        """``systemctl VERB etcd`` on ``host``, as the prose asks (not a block)."""
        done = subprocess.run(
            ["systemctl", verb, "etcd"], env=self.env(host), capture_output=True, text=True,
            timeout=WAIT, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr

    def wait_healthy(self, *before: str) -> None:
        """Until the page's ``health`` block says every member is healthy (bounded)."""
        deadline = time.monotonic() + WAIT
        while (done := self.run("a", *before, "health", check=False)).returncode != 0:
            assert time.monotonic() < deadline, f"not healthy: {done.stdout}{done.stderr}"
            time.sleep(0.2)  # etcd's members say nothing when they are ready: asked again

    def etcdctl(
        self, host: str, *args: str, user: str | None = "root"
    ) -> subprocess.CompletedProcess[str]:
        """``etcdctl ARGS`` against ``host``'s member alone, as the test reads
        etcd: as ``user`` (root: its password from the page's file; none: no user)."""
        pki = self.roots[host] / "etc" / "etcd" / "pki"
        if user == "root":
            user = "root:" + (self.roots["a"] / "root" / "etcd-root.password").read_text().strip()
        command = ["etcdctl", f"--endpoints=https://127.0.0.1:{self.client[host]}",
                   f"--cacert={pki / 'ca.pem'}", f"--cert={pki / 'client.pem'}",
                   f"--key={pki / 'client.key'}", *([f"--user={user}"] if user else []),
                   *args]  # fmt: skip
        return subprocess.run(command, capture_output=True, text=True, timeout=WAIT, check=False)

    def kill(self, host: str) -> None:
        """SIGKILL ``host``'s member (its host lost), by the PID its start wrote."""
        pidfile = self.roots[host] / "etcd.pid"
        if pidfile.exists():
            pid = int(pidfile.read_text())
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                return
            pidfile.unlink()


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    _tools()
    made = Hosts(tmp_path)
    try:
        yield made
    finally:
        for host in HOSTS:
            made.kill(host)


def test_the_pages_etcd_procedures_replace_a_member_and_restore_a_snapshot(hosts: Hosts) -> None:
    # Given the three members of examples/deploy/etcd/ started (TLS on both
    # sides), and etcd's auth turned on as the page says
    for host in HOSTS:
        hosts.systemctl(host, "start")
    hosts.wait_healthy("env")
    (hosts.roots["a"] / "root").mkdir()
    (hosts.roots["a"] / "root" / "etcd-root.password").write_text("root-secret\n")
    (hosts.roots["a"] / "etc" / "actorctl" / "etcd").mkdir(parents=True)
    (hosts.roots["a"] / "etc" / "actorctl" / "etcd" / "password").write_text("actorctl-pw\n")
    hosts.run("a", "env", "auth")
    for host in ("b", "c"):  # the operator's root password, wherever it runs etcdctl
        shutil.copytree(hosts.roots["a"] / "root", hosts.roots[host] / "root")
    # Then without a user etcd refuses, and the user actorctl reaches /actorctl/ only
    assert hosts.etcdctl("a", "get", "/actorctl/x", user=None).returncode != 0
    mine = hosts.etcdctl("a", "put", "/actorctl/x", "1", user="actorctl:actorctl-pw")
    assert mine.returncode == 0, mine.stderr
    other = hosts.etcdctl("a", "put", "/other", "1", user="actorctl:actorctl-pw")
    assert other.returncode != 0
    assert "permission denied" in other.stderr, other.stderr
    assert hosts.etcdctl("a", "put", "/actorctl/before", "kept").returncode == 0

    # When host c's member is lost (SIGKILL, its data gone), and replaced as
    # the page says: removed and added from host a, started anew on host c
    hosts.kill("c")
    hosts.run("a", "env", "user", "replace")
    hosts.run("c", "env", "user", "join")
    hosts.wait_healthy("env", "user")
    # Then the new member holds what etcd held, read from it alone
    held = hosts.etcdctl("c", "get", "/actorctl/before", "--consistency=s", "--print-value-only")
    assert held.stdout.strip() == "kept", held.stdout + held.stderr
    listed = hosts.etcdctl("a", "member", "list")
    assert sorted(line.split(", ")[2] for line in listed.stdout.splitlines()) == [
        "etcd-1",
        "etcd-2",
        "etcd-3",
    ], listed.stdout

    # When a snapshot is saved as the page says, and something written after it
    hosts.run("a", "env", "user", "snapshot")
    assert hosts.etcdctl("a", "put", "/actorctl/after", "lost").returncode == 0
    snapshot = hosts.roots["a"] / "var" / "backups" / "etcd" / "etcd-snapshot.db"
    assert snapshot.stat().st_size > 0
    # and every member is stopped, then each restored from it and started
    for host in HOSTS:
        hosts.systemctl(host, "stop")
        backups = hosts.roots[host] / "var" / "backups" / "etcd"
        backups.mkdir(parents=True, exist_ok=True)
        if host != "a":
            shutil.copy(snapshot, backups / snapshot.name)
    for host in HOSTS:
        hosts.run(host, "env", "user", "restore")
    hosts.wait_healthy("env", "user")
    # Then etcd holds what the snapshot held (its users too), and not what came after
    for host in HOSTS:
        held = hosts.etcdctl(host, "get", "/actorctl/before", "--print-value-only")
        assert held.stdout.strip() == "kept", (host, held.stdout, held.stderr)
        after = hosts.etcdctl(host, "get", "/actorctl/after", "--print-value-only")
        assert after.returncode == 0, after.stderr
        assert after.stdout.strip() == "", (host, after.stdout)
    print("member replaced and snapshot restored on three members: etcd healthy, data kept")


async def test_the_pages_store_backup_is_consistent_while_the_node_runs_and_restores(
    tmp_path: Path,
) -> None:
    if shutil.which("sqlite3") is None:
        pytest.skip("sqlite3 is not installed: apt-get install sqlite3")
    root = tmp_path / "host-b"
    path = root / "var" / "lib" / "actorctl" / "data" / "worker-b" / "store.sqlite"

    def rewrite(text: str) -> str:
        return re.sub(r"(?<![\w.])/(etc|var|root)/", lambda m: f"{root}/{m.group(1)}/", text)

    async def run(name: str) -> None:
        done = await trio.run_process(
            ["bash", "-e", "-c", rewrite(procedure(name))],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"},
        )
        assert done.returncode == 0, done.stderr.decode()

    # systemctl for the restore block: the test stops and starts the store around it
    (tmp_path / "systemctl").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "systemctl").chmod(0o755)
    with trio.fail_after(WAIT):
        # Given worker-b's store, open (its node runs), with rows committed
        async with trio.open_nursery() as nursery:
            store = Store(path, name="worker-b")
            await nursery.start(store.run)
            for i in range(100):
                store.put("backlog", f"m{i}", b"x" * 100)
            await store.sync()
            # When it is backed up as the page says, while it runs, and more is written
            await run("store-backup")
            for i in range(100, 150):
                store.put("backlog", f"m{i}", b"y")
            store.delete("backlog", "m0")
            await store.sync()
            nursery.cancel_scope.cancel(reason="the node stops")
        # And it is restored as the page says (the node stopped)
        await run("store-restore")
        # Then the node's store holds what was committed when the backup ran
        async with trio.open_nursery() as nursery:
            again = Store(path, name="worker-b")
            await nursery.start(again.run)
            keys = {key for key, _ in again.items("backlog")}
            nursery.cancel_scope.cancel(reason="read")
    assert keys == {f"m{i}" for i in range(100)}, sorted(keys)[:5]
