"""The services role across hosts (tasks/client/_services_role.py): several services
nodes take turns holding it in etcd, and what goes to a pool's router, the
scheduler or the event hub follows whichever holds it.

Real in-process nodes on 127.0.0.1 and a real etcd, in real time (etcd counts
leases on its own clock); waits are on events (a run, a log message), bounded
by ``trio.fail_after``. The three-host story (a services node's host killed)
is tests/hosts/test_hosts.py's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from actorctl import Address, App, ConfigError, TaskContext, open_node
from actorctl.cluster import load_cluster
from actorctl.etcd import EtcdClient, EtcdRoleLease, follow_holder
from actorctl.etcd._role_lease import role_key
from actorctl.mailbox import Outcome
from actorctl.tasks._hosting import _worker_class, cluster_directory
from actorctl.tasks.client._client import Directory, TaskClient, send_task
from actorctl.tasks.client._lookup import result_addresses
from actorctl.tasks.client._services_role import SERVICES_ROLE_NAME, ServicesRole, follow_services
from actorctl.tasks.protocol._protocol import CHORDS, EVENTS, SCHEDULER
from actorctl.tasks.worker._control import WorkerState
from tests.support.cli import run_cli
from tests.support.etcd_server import EtcdServer, open_proxy
from tests.support.harness import Logs, free_port

app = App("services-role")
app.pool("celery", concurrency=8)
#: The task id of each run of ``job``.
RAN: list[str] = []
_WAITING: list[tuple[int, trio.Event]] = []
TTL = 2


@app.task(bind=True)
async def job(ctx: TaskContext) -> None:
    RAN.append(ctx.id)
    for count, event in _WAITING:
        if len(RAN) >= count:
            event.set()


async def ran(count: int) -> None:
    """Wait until ``job`` has run ``count`` times in all (in this trio run)."""
    if len(RAN) < count:
        event = trio.Event()
        _WAITING.append((count, event))
        await event.wait()


@pytest.fixture(autouse=True)
def _fresh_runs() -> None:
    RAN.clear()
    _WAITING.clear()


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> str:
    """A cluster name of the test's own (its roles' keys are under it)."""
    return f"svc-{request.node.name.removeprefix('test_')[:40].replace('_', '-').strip('-')}"


async def send_job(sender: TaskClient, task_id: str, *, durable: bool = False) -> None:
    """``job`` sent to pool celery as a worker (``durable``) or a caller sends it."""
    await send_task(
        sender,
        task=job.name,
        pool="celery",
        args=[],
        kwargs={},
        task_id=task_id,
        reply_to=None,
        durable=durable,
    )


def directory_of(s1: str, s2: str) -> Directory:
    """What cluster_directory makes of a file with services nodes s1 and s2
    (in that order) and a pool ``celery``: a directory that follows the role."""
    return Directory(
        {
            "celery": f"{s1}/celery",
            EVENTS: f"{s1}/events",
            SCHEDULER: f"{s1}/scheduler",
            CHORDS: f"{s1}/chords",
        },
        {"celery": (s2,)},
        frozenset({"celery", EVENTS, SCHEDULER}),
        services={"s1": s1, "s2": s2},
        failover=20.0,
    )


async def test_what_waits_for_a_lost_services_node_goes_to_the_one_that_takes_the_role_over(
    etcd: EtcdServer, cluster: str, logs: Logs
) -> None:
    client = EtcdClient([etcd.url], timeout=2)
    p1, p2 = free_port(), free_port()
    s1, s2 = f"amqp://127.0.0.1:{p1}", f"amqp://127.0.0.1:{p2}"
    # Given a node whose directory follows the services role, first to s1
    # (the file's first services node), which nobody runs: its host is lost
    directory = directory_of(s1, s2)
    follower = ServicesRole(directory, client, cluster, TTL)
    async with open_node(
        "w", {SERVICES_ROLE_NAME: follower}, host=None, insecure=True, connect_timeout=0.5
    ) as node:
        sender = TaskClient(node.outbox, directory)
        with trio.fail_after(30):
            # And 10 tasks its workers handed to its backlog (durable), for s1's router
            for i in range(10):
                await send_job(sender, f"durable-{i}", durable=True)
            async with trio.open_nursery() as nursery:
                # And a caller's task on its way to s1, to be confirmed
                async def confirmed(task_status: trio.TaskStatus[None]) -> None:
                    task_status.started()  # send_task resolves the pool before it awaits
                    await send_job(sender, "confirmed")

                await nursery.start(confirmed)
                # ... and the backlog found s1 cannot be reached (the tasks
                # asked where else to go: nowhere yet)
                await logs.wait_for("actorctl:backlog:waiting")
                assert directory.holder == "s1"
                assert len(node.outbox.backlog) == 10

                # When services node s2 starts, and takes the role (nobody holds it)
                worker = _worker_class(app, "celery")(
                    app, "celery", directory_of(s1, s2), WorkerState()
                )
                candidate = ServicesRole(directory_of(s1, s2), client, cluster, TTL, candidate="s2")
                actors = {"celery": worker, SERVICES_ROLE_NAME: candidate}
                async with open_node("s2", actors, port=p2, insecure=True):
                    # Then every task runs there, once: the backlog's and the caller's
                    await ran(11)
                    # And etcd says s2 holds the role
                    refused = await EtcdRoleLease(client, cluster, "services").request("s1", TTL)
                    assert (refused["granted"], refused["holder"]) == (False, "s2")
                    # (the nursery ends once the caller's send returns: s2 confirmed it)
    assert sorted(RAN) == sorted(["confirmed", *(f"durable-{i}" for i in range(10))])
    assert directory.holder == "s2"
    assert candidate.held
    # ... the caller's, sent again to s2 once its send to s1 failed
    resent = logs.of_type("actorctl:client:resent")
    assert [m["task_id"] for m in resent] == ["confirmed"]
    assert resent[0]["to"] == f"{s2}/celery"
    following = logs.of_type("actorctl:services:following")
    assert {m["holder"] for m in following} == {"s2"}
    # And s2, stopped, gave the role up at once: the next candidate holds it
    after = await EtcdRoleLease(client, cluster, "services").request("s1", TTL)
    assert after["granted"]


def test_the_directory_moves_pools_scheduler_event_hub_and_chords_with_the_role() -> None:
    s1, s2 = "amqp://127.0.0.1:5801", "amqp://127.0.0.1:5802"
    directory = directory_of(s1, s2)
    old = directory.resolve("celery")
    assert directory.elected
    assert directory.holder == "s1"
    assert directory.elsewhere(old) is None  # s1 holds it: nothing moves
    # When the role moves to s2
    assert directory.follow("s2")
    assert not directory.follow("s2")  # already there
    # Then the pool, the scheduler and the event hub resolve to s2's
    for name, actor in (("celery", "celery"), (SCHEDULER, "scheduler"), (EVENTS, "events")):
        assert str(directory.resolve(name)) == f"{s2}/{actor}"
    assert directory.elsewhere(old) == directory.resolve("celery")
    # ... but not what was refused for good (bad input): that is not sent again
    assert directory.elsewhere(old, Outcome("rejected", "amqp:decode-error", "bad")) is None
    # And a new chord opens on s2's barrier, and the results for one opened on
    # s1's go there too (s2 took s1's barriers over from its replica)
    assert str(directory.resolve(CHORDS)) == f"{s2}/chords"
    assert directory.elsewhere(Address.parse(f"{s1}/chords")) == directory.resolve(CHORDS)
    # And a holder no file names changes nothing, and says so
    follow_services(directory, "s9")
    assert directory.holder == "s2"
    # ... nor does nobody (the role is between holders)
    follow_services(directory, None)
    assert directory.holder == "s2"


def test_a_result_kept_by_any_services_node_is_asked_for_not_only_by_the_holder() -> None:
    # Given two services nodes taking turns, s2 holding the role now
    s1, s2 = "amqp://127.0.0.1:5801", "amqp://127.0.0.1:5802"
    directory = directory_of(s1, s2)
    assert directory.follow("s2")
    # Then a result fetched by id is asked of both services nodes' _tasks (s1
    # kept what it sent while it held the role), and of each worker node's
    asked = {str(address) for address in result_addresses(directory)}
    assert {f"{s1}/_tasks", f"{s2}/_tasks"} <= asked, asked
    assert {str(a) for a in directory.control_addresses()} <= asked, asked


def test_several_services_nodes_without_etcd_are_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(
        '[cluster]\nname = "x"\ndev = true\n\n'
        '[[node]]\nname = "s1"\nlisten = "127.0.0.1:5811"\nactors = "tests.apps.task_app:app"\n'
        "services = true\n\n"
        '[[node]]\nname = "s2"\nlisten = "127.0.0.1:5812"\nactors = "tests.apps.task_app:app"\n'
        "services = true\n"
    )
    with pytest.raises(ConfigError, match=r"only one node may have services = true.*s1, s2"):
        cluster_directory(load_cluster(path))
    # And with [etcd] they take turns: the first named is followed until etcd says otherwise
    path.write_text(path.read_text() + '\n[etcd]\nendpoints = ["http://127.0.0.1:2379"]\n')
    directory = cluster_directory(load_cluster(path))
    assert directory.elected
    assert directory.holder == "s1"
    assert list(directory.services) == ["s1", "s2"]
    # ... but not under `cluster up`, which runs them on one host, without etcd:
    # refused before anything starts, saying what to run instead
    up = run_cli("cluster", "up", path, timeout=30)
    assert up.returncode == 2, up.stderr
    assert "only one node may have services = true on one host" in up.stderr
    assert "`actorctl host up FILE --host NAME` on each" in up.stderr
    assert "Traceback" not in up.stderr


async def test_a_follower_cut_off_from_etcd_keeps_its_holder_and_catches_up_once_back(
    etcd: EtcdServer, cluster: str, logs: Logs
) -> None:
    told: list[str | None] = []
    changed = trio.Event()

    def tell(holder: str | None) -> None:
        nonlocal changed
        told.append(holder)
        changed.set()
        changed = trio.Event()

    async def told_that(holder: str | None) -> None:
        while not told or told[-1] != holder:
            await changed.wait()

    direct = EtcdClient([etcd.url], timeout=2)
    s1 = EtcdRoleLease(direct, cluster, "services")
    with trio.fail_after(20):
        async with open_proxy(etcd.client_port) as proxy, trio.open_nursery() as nursery:
            # Given a follower that reaches etcd through a link the test can cut
            behind = EtcdClient([proxy.url], timeout=1)
            nursery.start_soon(follow_holder, behind, cluster, "services", tell)
            await told_that(None)  # nobody holds it yet
            # And s1 takes the role: the follower is told
            assert (await s1.request("s1", 10))["granted"]  # a ttl that outlasts the test
            await told_that("s1")
            # When the link is cut, and meanwhile s1 resigns and s2 takes the role
            proxy.cut()
            await logs.wait_for("actorctl:role:watch-broken")
            await s1.resign()
            s2 = EtcdRoleLease(direct, cluster, "services")
            assert (await s2.request("s2", 10))["granted"]
            # Then the follower is told nothing while cut off (it keeps s1) ...
            assert told[-1] == "s1", told
            # ... and s2, once the link is back
            proxy.heal()
            await told_that("s2")
            nursery.cancel_scope.cancel(reason="test over")
    broken = logs.of_type("actorctl:role:watch-broken")
    assert len(broken) == 1, broken  # said once for the break, not at every retry


async def test_a_candidate_takes_the_role_as_soon_as_etcd_ends_the_holders_lease(
    etcd: EtcdServer, cluster: str, logs: Logs
) -> None:
    ttl = 30  # a candidate asks every 10 s: what it waits for is etcd, not its turn
    client = EtcdClient([etcd.url], timeout=2)
    s1, s2 = "amqp://127.0.0.1:5811", f"amqp://127.0.0.1:{free_port()}"
    with trio.fail_after(20):
        # Given s1 holding the services role (its host about to be lost)
        lost = EtcdRoleLease(client, cluster, "services")
        assert (await lost.request("s1", ttl))["granted"]
        # And candidate s2, refused the role (asking again in 10 s)
        candidate = ServicesRole(directory_of(s1, s2), client, cluster, ttl, candidate="s2")
        async with open_node("s2", {SERVICES_ROLE_NAME: candidate}, host=None, insecure=True):
            await logs.wait_for("actorctl:services:standby")
            # When etcd ends s1's lease (revoked here, as etcd does once the ttl has run out)
            held = await client.get(role_key(cluster, "services"))
            assert held is not None
            await client.revoke(held.lease)
            ended = trio.current_time()
            # Then s2 holds the role within a second, not at its next turn
            await logs.wait_for("actorctl:services:leader")
            took = trio.current_time() - ended
    print(f"s2 held the role {took:.2f} s after s1's lease ended (its next turn: {ttl / 3:.0f} s)")
    assert took < 1.0
    assert candidate.held
