"""``actorctl cluster reload`` of a cluster that spans hosts, through etcd (issue 34 item 5).

A real etcd on 127.0.0.1 and three ``actorctl host up`` processes, hosts a
(the services node), b and c (a worker node each), each with its own copy
of the cluster file, certificates and keys (made once, copied, as
docs/deploy.md says). The operator changes a's copy and runs ``cluster
reload`` there: the request goes through etcd signed with the CLI's operator
key, each host verifies it, reloads its own nodes and writes its outcome,
and the CLI prints a table of the hosts. Requests that are unsigned, signed
by a key that is not an operator's or by a key no host trusts, and a request
replayed, are refused by each host, logged with the reason, and change
nothing. A host that does not answer is reported, and the command exits 1.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from actorctl.cluster import load_cluster, open_node
from actorctl.etcd import EtcdClient
from actorctl.mailbox import IdentityKey, Keyring, Role
from actorctl.ops import (
    CLI_NAME,
    HostOutcome,
    Outcome,
    ask_reload,
    ensure_dev_secrets,
    request_key,
    sign_request,
)
from actorctl.ops._reload_request import canonical, refusal
from actorctl.tasks import cluster_app
from tests.support.cli import ROOT
from tests.support.etcd_server import EtcdServer, running_etcd
from tests.support.filewatch import FileWatch
from tests.support.harness import free_port
from tests.support.netns import wait_for_output

ACTORCTL = [sys.executable, "-m", "actorctl"]
READY = 60.0  # seconds a host's nodes may take to start on a loaded 2-core machine
WAIT = 120.0  # seconds a reload across the hosts may take there
HOSTS = ("a", "b", "c")

CLUSTER = """\
[cluster]
name = "rehost"
dev = true
controller = "127.0.0.1:{controller}"

[etcd]
endpoints = ["{etcd}"]
ttl = 3

[[node]]
name = "services"
listen = "127.0.0.1:{services}"
host = "a"
actors = "tests.apps.hosts_app:app"
services = true

[[node]]
name = "worker-b"
listen = "127.0.0.1:{worker_b}"
host = "b"
actors = "tests.apps.hosts_app:app"
pools = ["celery"]

[[node]]
name = "worker-c"
listen = "127.0.0.1:{worker_c}"
host = "c"
actors = "tests.apps.hosts_app:app"
pools = ["celery"]
"""
#: A node added on host b by the reload: b starts it, the others do not.
ADDED = """
[[node]]
name = "worker-b2"
listen = "127.0.0.1:{worker_b2}"
host = "b"
actors = "tests.apps.hosts_app:app"
pools = ["celery"]
"""
LIMIT = """
[[task]]
name = "hosts.work"
rate_limit = "{rate}"
"""


class Hosts:
    """etcd, and the ``host up`` of each host, each in a directory of its own."""

    def __init__(self, directory: Path, etcd: EtcdServer) -> None:
        self.directory = directory
        self.etcd = etcd
        names = ("controller", "services", "worker_b", "worker_c", "worker_b2")
        self.ports = {name: free_port() for name in names}
        self.text = CLUSTER.format(etcd=etcd.url, **self.ports)
        self.ups: dict[str, subprocess.Popen[bytes]] = {}
        self.said: dict[str, str] = {}
        self.env = {**os.environ}
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT), self.env.get("PYTHONPATH", "")) if p
        )
        for host in HOSTS:
            self.file(host).parent.mkdir()
            self.file(host).write_text(self.text)
        self.copy_secrets()

    def file(self, host: str) -> Path:
        return self.directory / host / "cluster.toml"

    def copy_secrets(self) -> None:
        """Make what a's file needs on a (development mode), and copy it to b and c."""
        ensure_dev_secrets(load_cluster(self.file("a"), cluster_app()))
        for host in HOSTS[1:]:
            for folder in ("certs", "keys"):
                source, target = self.directory / "a" / folder, self.directory / host / folder
                shutil.copytree(source, target, dirs_exist_ok=True)

    def start(self) -> None:
        for host in HOSTS:
            self.ups[host] = self._host_up(host)
        for host in HOSTS:
            self.said[host] = wait_for_output(self.ups[host], f"host {host!r} ready", READY)

    def _host_up(self, host: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [*ACTORCTL, "host", "up", str(self.file(host)), "--host", host],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
            cwd=ROOT,
        )

    def restart(self, host: str) -> None:
        """Stop ``host``'s ``host up`` warm (SIGTERM, by its PID), and start it again."""
        process = self.ups[host]
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=WAIT)
        if process.stdout is not None:
            process.stdout.close()
        self.ups[host] = self._host_up(host)
        self.said[host] = wait_for_output(self.ups[host], f"host {host!r} ready", READY)

    def reload(self, *args: str, host: str = "a") -> subprocess.CompletedProcess[str]:
        """``actorctl cluster reload FILE ARGS`` with ``host``'s copy of the file."""
        return subprocess.run(
            [*ACTORCTL, "cluster", "reload", str(self.file(host)), *args],
            capture_output=True, text=True, cwd=ROOT, env=self.env, timeout=WAIT, check=False,
        )  # fmt: skip

    def logged(self, host: str, event: str, needle: str, timeout: float = 10.0) -> dict[str, Any]:
        """The first ``event`` line of ``host``'s log that holds ``needle``."""
        path = self.directory / host / "logs" / f"host-{host}.log"
        deadline = time.monotonic() + timeout
        with FileWatch(path.parent) as watch:  # made before the first look
            while True:
                for line in path.read_text().splitlines() if path.exists() else []:
                    if f'"{event}"' in line and needle in line:
                        found: dict[str, Any] = json.loads(line)
                        return found
                left = deadline - time.monotonic()
                assert left > 0, f"host {host} did not log {event} with {needle!r}"
                watch.wait_changed(left)  # woken by the host's next write to its log

    def stop(self) -> None:
        """SIGTERM each ``host up`` this started (by its PID), and wait (bounded)."""
        for process in self.ups.values():
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGCONT)  # one a test stopped
                process.send_signal(signal.SIGTERM)
        for process in self.ups.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
            if process.stdout is not None:
                process.stdout.close()


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hosts]:
    directory = tmp_path_factory.mktemp("rehost")
    with running_etcd(directory) as etcd:
        running = Hosts(directory, etcd)
        try:
            running.start()
            yield running
        finally:
            running.stop()


def with_rate(text: str, rate: str) -> str:
    """``text`` (a cluster file) with the rate limit of hosts.work set to ``rate``."""
    if "rate_limit" not in text:
        return text + LIMIT.format(rate=rate)
    return re.sub(r'rate_limit = "[^"]*"', f'rate_limit = "{rate}"', text)


def limits(hosts: Hosts, node: str) -> dict[str, Any]:
    """What ``node``'s ``_tasks`` says its limits are, asked as the ``cli`` member."""
    config = load_cluster(hosts.file("a"), cluster_app())
    address = f"amqps://{config.node(node).listen}/_tasks"

    async def ask() -> dict[str, Any]:
        async with open_node(CLI_NAME, host=None, security=config.security(CLI_NAME)) as client:
            answer: dict[str, Any] = (
                await client.ref(address).with_options(timeout=30).ask("limits")
            )
            return answer

    return trio.run(ask)


def through_etcd(
    hosts: Hosts, request: Any, timeout: float = WAIT, *, received: set[str] | None = None
) -> dict[str, HostOutcome]:
    """Write ``request`` where the hosts watch, and each live host's outcome
    (and, given ``received``, check which hosts said they received it)."""
    config = load_cluster(hosts.file("a"), cluster_app())

    async def ask() -> dict[str, HostOutcome]:
        client = EtcdClient([hosts.etcd.url], timeout=10)
        answers = await ask_reload(config, client, request, timeout)
        assert answers.live == list(HOSTS)
        if received is not None:
            assert answers.received == received, answers.received
        return answers.outcomes

    return trio.run(ask)


def test_a_reload_from_one_host_reaches_every_host_and_each_does_its_own_part(
    hosts: Hosts,
) -> None:
    # Given the three hosts running, and on host a the file changed: a rate
    # limit for the task its workers on b and c run, and a node added on b
    # (its certificate and key made on a and copied, as every node's)
    text = hosts.text + ADDED.format(**hosts.ports) + LIMIT.format(rate="7/m")
    hosts.file("a").write_text(text)
    hosts.copy_secrets()
    assert "7/m" not in json.dumps(limits(hosts, "worker-b"))
    # When the operator reloads it on host a
    done = hosts.reload()
    print(done.stdout, done.stderr)
    # Then every host answered, each changed, and the command succeeds
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {line.split()[0]: line.split()[1] for line in done.stdout.splitlines()[2:5]}
    assert rows == {"a": "changed", "b": "changed", "c": "changed"}, done.stdout
    # and only b started the node the file gives it
    b_part = done.stdout.split("host b changes:")[1].split("host c changes:")[0]
    assert "+ node worker-b2: start it" in b_part
    assert "node worker-b2 started" in b_part
    assert done.stdout.count("worker-b2: start it") == 1
    wait_for_output(hosts.ups["b"], "node worker-b2 ready", READY)
    # and the workers on b and c apply the limit, each host's copy of the file is a's
    for node in ("worker-b", "worker-c", "worker-b2"):
        assert "7/m" in json.dumps(limits(hosts, node)), node
    for host in HOSTS:
        assert hosts.file(host).read_text() == text, host

    # When the same file is reloaded again, as a dry run
    again = hosts.reload("--dry-run")
    # Then no host would change anything
    assert again.returncode == 0, again.stdout + again.stderr
    assert [line.split()[1] for line in again.stdout.splitlines()[2:5]] == ["unchanged"] * 3


def test_a_broken_file_is_refused_before_anything_is_written_to_etcd(hosts: Hosts) -> None:
    # Given a's copy of the file with a misspelt key
    good = hosts.file("a").read_text()
    before = trio.run(EtcdClient([hosts.etcd.url]).get, request_key("rehost"))
    hosts.file("a").write_text(good.replace("pools =", "pols =", 1))
    try:
        # When it is reloaded
        done = hosts.reload()
    finally:
        hosts.file("a").write_text(good)
    # Then it is refused, naming the key, and no request reached etcd
    assert done.returncode == 2, done.stdout + done.stderr
    assert "reload refused, the cluster runs on unchanged" in done.stderr
    assert "no such key 'node[1].pols'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    after = trio.run(EtcdClient([hosts.etcd.url]).get, request_key("rehost"))
    assert after == before


def test_unsigned_forged_and_replayed_requests_are_refused_by_every_host(hosts: Hosts) -> None:
    config = load_cluster(hosts.file("a"), cluster_app())
    keys = hosts.directory / "a" / "keys"
    operator = IdentityKey.load(keys / "cli.key")
    # Given requests that would lift the limit: unsigned, signed by a
    # member's key (worker-b's: not an operator), and by a key no host trusts
    content = with_rate(hosts.file("a").read_text(), "1000/s")
    before = limits(hosts, "worker-c")
    unsigned = attrs.evolve(sign_request(config, content, operator), signature=b"")
    member = sign_request(config, content, IdentityKey.load(keys / "worker-b.key"))
    stranger = sign_request(config, content, IdentityKey.generate("mallory"))
    # and one signed by the operator whose file was changed after it was signed
    signed = sign_request(config, hosts.file("a").read_text(), operator)
    tampered = attrs.evolve(signed, content=content)
    cases = [
        (unsigned, "the request is not signed"),
        (member, "whose role is member: a reload needs the operator role"),
        (stranger, "which this host does not trust"),
        (tampered, "the request's signature does not match"),
    ]
    for request, why in cases:
        # When each is written where the hosts watch
        outcomes = through_etcd(hosts, request, received=set())
        # Then every host refuses it, saying why (none says it received it:
        # a receipt comes only once a request is verified), and logs it with the reason
        assert set(outcomes) == set(HOSTS)
        for host, outcome in outcomes.items():
            assert outcome.outcome is Outcome.REFUSED, (host, outcome)
            assert why in outcome.reason, (host, outcome.reason)
            assert hosts.logged(host, "actorctl:reload:refused", request.id)["reason"]
    # Given a request the operator signed (a dry run), received and answered by every host
    genuine = sign_request(config, hosts.file("a").read_text(), operator, dry_run=True)
    first = through_etcd(hosts, genuine, received=set(HOSTS))
    assert {o.outcome for o in first.values()} == {Outcome.UNCHANGED}, first
    # When it is written again (replayed)
    replayed = through_etcd(hosts, genuine)
    # Then every host refuses it as a replay
    for host, outcome in replayed.items():
        assert outcome.outcome is Outcome.REFUSED, (host, outcome)
        assert f"request {genuine.id} was seen before: a replay" in outcome.reason
    # And one asked long ago, signed, is refused as outside the time window
    old = attrs.evolve(genuine, id="old-one", asked=time.time() - 3600)
    old = attrs.evolve(old, signature=operator.sign(canonical(old)))
    for outcome in through_etcd(hosts, old).values():
        assert outcome.outcome is Outcome.REFUSED
        assert "outside the 300 s window" in outcome.reason, outcome.reason
    # and nothing changed: the limits are those the operator set, every copy as it was
    assert limits(hosts, "worker-c") == before
    for host in HOSTS:
        assert "1000/s" not in hosts.file(host).read_text()


def test_a_request_replayed_after_a_host_restarts_is_refused_by_it_too(hosts: Hosts) -> None:
    config = load_cluster(hosts.file("a"), cluster_app())
    operator = IdentityKey.load(hosts.directory / "a" / "keys" / "cli.key")
    # Given a request the operator signed (a dry run), answered by every host
    genuine = sign_request(config, hosts.file("a").read_text(), operator, dry_run=True)
    first = through_etcd(hosts, genuine)
    assert {o.outcome for o in first.values()} == {Outcome.UNCHANGED}, first
    # and host c's ``host up`` restarted since, its memory gone
    hosts.restart("c")
    # When the request is written again, inside its time window
    replayed = through_etcd(hosts, genuine)
    # Then every host refuses it as a replay, c too: it read the ids it acted
    # on from the file it wrote beside its copy of the cluster file
    for host, outcome in replayed.items():
        assert outcome.outcome is Outcome.REFUSED, (host, outcome)
        assert f"request {genuine.id} was seen before: a replay" in outcome.reason, host
    assert genuine.id in (hosts.directory / "c" / ".cluster.reload-seen").read_text()


def test_a_host_that_does_not_answer_is_reported_and_the_command_fails(hosts: Hosts) -> None:
    # Given host c's host up stopped (SIGSTOP): its node stays registered in etcd
    text = with_rate(hosts.file("a").read_text(), "9/m")
    hosts.file("a").write_text(text)
    os.kill(hosts.ups["c"].pid, signal.SIGSTOP)
    try:
        # When the operator reloads, waiting up to 90 s for the hosts' outcomes
        # (each host checks the file in a process of its own: seconds on a
        # loaded machine), but 10 s for a host to say it received the request
        # (a running host up says so before it checks: well under a second)
        began = time.monotonic()
        done = hosts.reload("--timeout", "90", "--receipt-timeout", "10")
        took = time.monotonic() - began
    finally:
        os.kill(hosts.ups["c"].pid, signal.SIGCONT)
    # Then a and b applied it, c is reported as not answering, and it exits 1
    print(done.stdout, done.stderr, f"took {took:.1f} s")
    assert done.returncode == 1, done.stdout + done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[2:5]}
    assert rows["a"].split()[1] == "changed"
    assert rows["b"].split()[1] == "changed"
    assert "did not answer" in rows["c"]
    assert "registered in etcd, did not say it received the request within 10 s" in rows["c"]
    # and it stopped waiting for c then, not at the 90 s timeout
    assert took < 90
    assert "9/m" in json.dumps(limits(hosts, "worker-b"))

    # Given host c's host up stopped for good (its node leaves etcd)
    hosts.ups["c"].send_signal(signal.SIGTERM)
    wait_for_output(hosts.ups["c"], "host 'c' stopped", READY)
    hosts.ups["c"].wait(timeout=READY)
    # When the operator reloads again
    done = hosts.reload("--timeout", "30")
    # Then c is reported as down, not waited for, and it exits 1
    assert done.returncode == 1, done.stdout + done.stderr
    row_c = next(line for line in done.stdout.splitlines() if line.startswith("c "))
    assert "did not answer" in row_c
    assert "none of its nodes is registered in etcd" in row_c


def test_a_request_for_another_cluster_or_signed_by_a_revoked_key_is_refused(
    tmp_path: Path,
) -> None:
    # Given a host's keyring that trusts an operator key and has revoked another
    path = tmp_path / "cluster.toml"
    path.write_text(
        '[cluster]\nname = "rehost"\ninsecure = true\n'
        '[[node]]\nname = "n"\nlisten = "127.0.0.1:9"\nhost = "a"\n'
    )
    config = load_cluster(path, cluster_app())
    host, operator, revoked = (IdentityKey.generate(n) for n in ("host", "cli", "old"))
    keyring = Keyring(
        host,
        [operator.public],
        revoked=[revoked.public],
        roles={operator.key_id: Role.OPERATOR, revoked.key_id: Role.OPERATOR},
    )
    good = sign_request(config, "x", operator)
    assert refusal(good, "rehost", keyring, (), good.asked) is None
    # When a request is for another cluster, or signed by the revoked key
    other = refusal(good, "other", keyring, (), good.asked)
    by_revoked = sign_request(config, "x", revoked)
    gone = refusal(by_revoked, "rehost", keyring, (), by_revoked.asked)
    # Then each is refused, saying why
    assert other == "the request is for cluster 'rehost', not 'other'"
    assert gone is not None
    assert "which this host does not trust (revoked)" in gone
