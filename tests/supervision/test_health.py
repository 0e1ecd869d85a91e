"""Health checks: user checks feeding a breaker on a real node, the built-in
checks (a peer, a disk, a certificate that expires within the window), their
declaration in cluster.toml and what `cluster status` shows of them.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
import trio
import trustme
from examples._cluster import running_cluster

from actorctl import (
    Actor,
    Breaker,
    BreakerPolicy,
    CircuitBreaker,
    ConfigError,
    Health,
    HealthCheck,
    Modified,
    handler,
    open_node,
)
from actorctl.cluster import load_cluster
from actorctl.supervision import (
    HEALTH_AGENT,
    HealthMonitor,
    certificate_expiry,
    disk_writable,
    peer_reachable,
)
from tests.support.cli import run_cli
from tests.support.harness import Logs, Secrets, free_port, node_pair

WAIT = 20.0


class Payments(Actor):
    """An actor with a breaker that a health check feeds; records each run."""

    def __init__(self) -> None:
        self.breaker = Breaker("payments", BreakerPolicy(unhealthy=2, reset=0.3))
        self.runs: list[int] = []

    async def on_start(self) -> None:
        CircuitBreaker.attach(self, self.breaker)

    @handler
    async def charge(self, n: int) -> int:
        self.runs.append(n)
        return n


async def _until(monitor: HealthMonitor, done: object) -> None:
    """Wait for the monitor's rounds until ``done()`` holds."""
    with trio.fail_after(WAIT):
        while not done():  # type: ignore[operator]
            await monitor.wait_result()


async def test_health_check_states_drive_a_breaker_and_are_actor_state(
    secrets: Secrets, logs: Logs
) -> None:
    # Given an actor whose breaker a user check (an async function) feeds
    state = [Health.HEALTHY]

    async def payments_api() -> tuple[Health, str]:
        return state[0], "answered in 12 ms" if state[0] is Health.HEALTHY else "HTTP 500"

    def broken() -> Health:
        raise RuntimeError("the check itself has a bug")

    payments = Payments()
    checks = [
        HealthCheck(name="payments-api", fn=payments_api, interval=0.05, breakers=("payments",)),
        HealthCheck(name="buggy", fn=broken, interval=0.05, breakers=("payments",)),
    ]
    monitor = HealthMonitor("server", checks, lambda: [payments.breaker])
    actors = {"payments": payments, HEALTH_AGENT: monitor}
    async with node_pair(actors, secrets=secrets) as (server, client):
        ref = client.ref(server.address_of("payments"))
        health = client.ref(server.address_of(HEALTH_AGENT))
        with trio.fail_after(WAIT):
            assert await ref.ask("charge", 1) == 1
            # When the check reports Unhealthy (twice: the threshold), then the
            # breaker opens and the actor answers modified
            state[0] = Health.UNHEALTHY
            await _until(monitor, lambda: not payments.breaker.closed)
            with pytest.raises(Modified, match=r"health check 'payments-api' reports unhealthy"):
                await ref.ask("charge", 2)
            # And both are actor state, read over the wire
            report = await health.ask("report")
            assert report["checks"]["payments-api"]["state"] == "unhealthy"
            assert report["checks"]["payments-api"]["detail"] == "HTTP 500"
            assert report["breakers"]["payments"][0]["state"] == "open"
            # When it reports Healthy again, then after the reset the probe closes it
            state[0] = Health.HEALTHY
            await trio.sleep_until(payments.breaker.reset_at)
            assert await ref.ask("charge", 3) == 3
            assert payments.breaker.closed
    assert payments.runs == [1, 3]
    # A check that raises is logged as an error and reports nothing
    failed = logs.of_type("actorctl:health:check-failed")
    assert failed
    assert failed[0]["level"] == "error"
    assert "has a bug" in failed[0]["error"]
    assert "buggy" not in report["checks"]


def _cert(directory: Path, ca: trustme.CA, name: str, days: float) -> Path:
    now = datetime.datetime.now(datetime.UTC)
    cert = ca.issue_cert(
        "127.0.0.1", "localhost", name, common_name=name,
        not_before=now - datetime.timedelta(days=1),
        not_after=now + datetime.timedelta(days=days),
    )  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    cert.private_key_pem.write_to_path(str(directory / f"{name}.key"))
    cert.cert_chain_pems[0].write_to_path(str(directory / f"{name}.pem"))
    return directory / f"{name}.pem"


async def test_a_certificate_that_expires_within_seven_days_is_insecure(
    tmp_path: Path, logs: Logs
) -> None:
    # Given a node serving mutual TLS with a certificate that expires in 3 days
    ca = trustme.CA()
    secrets = Secrets.make(tmp_path, "server", "client")
    tls = tmp_path / "tls"
    ca.cert_pem.write_to_path(str(tls / "ca.pem"))
    soon = _cert(tls, ca, "server", days=3)
    _cert(tls, ca, "client", days=365)
    later = _cert(tmp_path / "other", ca, "later", days=30)
    checks = [
        HealthCheck(name="tls", fn=certificate_expiry(soon), interval=60),
        HealthCheck(name="tls-later", fn=certificate_expiry(later), interval=60),
    ]
    monitor = HealthMonitor("server", checks)
    async with node_pair({HEALTH_AGENT: monitor}, secrets=secrets) as (server, client):
        # When its checks have run, then (asked over that very connection) the
        # certificate is Insecure, and one that expires in 30 days Healthy
        with trio.fail_after(WAIT):
            await _until(monitor, lambda: len(monitor.results) == 2)
            report = await client.ref(server.address_of(HEALTH_AGENT)).ask("report")
    tls_check = report["checks"]["tls"]
    assert tls_check["state"] == "insecure"
    assert (
        "expires in 2.9 days" in tls_check["detail"] or "expires in 3.0 days" in tls_check["detail"]
    )
    assert report["checks"]["tls-later"]["state"] == "healthy"
    [changed] = [m for m in logs.of_type("actorctl:health:changed") if m["check"] == "tls"]
    assert changed["level"] == "warning"
    # An expired one is Insecure too; an unreadable one Unhealthy
    expired = certificate_expiry(soon, days=7, clock=lambda: 4e9)
    assert expired()[0] is Health.INSECURE  # type: ignore[index]
    assert certificate_expiry(tmp_path / "none.pem")()[0] is Health.UNHEALTHY  # type: ignore[index]


async def test_the_peer_and_disk_checks(tmp_path: Path, secrets: Secrets) -> None:
    async with open_node("server", **secrets.options("server")) as server:
        host, port = str(server.host), int(server.port)
        assert await peer_reachable(host, port)() is Health.HEALTHY  # type: ignore[misc]
    down = await peer_reachable("127.0.0.1", free_port(), timeout=1.0)()  # type: ignore[misc]
    assert down[0] is Health.UNHEALTHY
    assert "unreachable" in down[1]
    assert disk_writable(tmp_path)() is Health.HEALTHY
    assert disk_writable(tmp_path / "gone")()[0] is Health.PERMANENTLY_UNAVAILABLE  # type: ignore[index]
    (tmp_path / "file").write_text("x")  # not a directory
    assert disk_writable(tmp_path / "file")()[0] is Health.PERMANENTLY_UNAVAILABLE  # type: ignore[index]


def test_health_tables_in_cluster_toml_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    head = '[cluster]\ninsecure = true\n[[node]]\nname = "a"\nlisten = "127.0.0.1:1"\n'
    path.write_text(head + '[[node.health]]\nname = "d"\ncheck = "disk"\nintervl = 5\n')
    with pytest.raises(
        ConfigError, match=r"node\[0\]\.health\[0\]\.intervl.*did you mean 'interval'\?"
    ):
        load_cluster(path)
    path.write_text(head + '[[node.health]]\nname = "d"\ncheck = "dsk"\n')
    with pytest.raises(ConfigError, match=r"health\[0\]\.check': expected 'peer', 'disk'"):
        load_cluster(path)
    path.write_text(head + '[[node.health]]\nname = "p"\ncheck = "peer"\n')
    with pytest.raises(ConfigError, match=r"health\[0\]\.peer': expected a node name"):
        load_cluster(path)
    path.write_text(head + '[[node.health]]\nname = "d"\ncheck = "disk"\ninterval = 0\n')
    with pytest.raises(ConfigError, match=r"interval': expected a number > 0, got 0"):
        load_cluster(path)
    path.write_text(head + '[[node.health]]\nname = "c"\ncheck = "certificate"\n')
    from actorctl.cluster import hosted_actors

    config = load_cluster(path)
    with pytest.raises(ConfigError, match=r"an insecure cluster has no certificate: set path"):
        hosted_actors(None, node=config.nodes[0], cluster=config)


def test_cluster_status_shows_each_nodes_checks(tmp_path: Path) -> None:
    # Given a cluster whose node n1 serves with a certificate that expires in
    # 3 days, and checks it, its store's disk and its peer n2
    ca = trustme.CA()
    certs = tmp_path / "certs"
    ca.cert_pem.write_to_path(str(_cert(certs, ca, "n1", days=3).parent / "ca.pem"))
    for name in ("n2", "cli", "controller"):
        _cert(certs, ca, name, days=365)
    toml = tmp_path / "template.toml"
    toml.write_text(
        f'[cluster]\nname = "health"\ndev = true\ncerts = "{certs}"\nkeys = "{tmp_path / "keys"}"\n'
        'controller = "127.0.0.1:5900"\n'
        '[[node]]\nname = "n1"\nlisten = "127.0.0.1:5901"\n'
        'actors = "tests.apps.actors:Calculator"\n'
        '[[node.health]]\nname = "tls"\ncheck = "certificate"\ninterval = 60\n'
        '[[node.health]]\nname = "store"\ncheck = "disk"\ninterval = 60\n'
        '[[node.health]]\nname = "to-n2"\ncheck = "peer"\npeer = "n2"\ninterval = 0.2\n'
        '[[node]]\nname = "n2"\nlisten = "127.0.0.1:5902"\n'
        'actors = "tests.apps.actors:Calculator"\n'
    )
    with running_cluster(toml, echo=False) as path:
        # When `cluster status` asks the Controller
        status = run_cli("cluster", "status", path, timeout=60)
    # Then each check of n1 is a line under it, with its state and detail
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    [tls] = [line for line in lines if "tls  health-check" in line]
    assert "insecure" in tls
    assert "expires in" in tls
    assert any("store  health-check  healthy" in line for line in lines)
    assert any("to-n2  health-check  healthy" in line for line in lines)
    # And each node's dead letters: how many it keeps, and whether 80 % full
    rows = [line for line in lines if "_deadletters  dead-letters" in line]
    assert len(rows) == 2
    assert all("dead-letters  ok  0 kept (max 10000)" in row for row in rows)
