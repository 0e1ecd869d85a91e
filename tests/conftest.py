"""Shared fixtures: captured eliot logs, secrets for a server and a client node,
and a real etcd (tests/support/etcd_server.py; skipped, naming the package, without it).

The helpers they are built on (and that fixtures fit less well) are in tests/support/harness.py.
"""

from __future__ import annotations

import compileall
from collections.abc import Iterator
from pathlib import Path

import eliot
import pytest

from tests.support.etcd_server import EtcdServer, running_etcd
from tests.support.harness import Logs, Secrets


def _nowhere(message: dict[str, object]) -> None:
    """Until a destination is added, eliot keeps what is logged and hands it
    to the first one: a test's ``logs`` would get what earlier tests logged.
    This one is there from the start, so each ``logs`` sees its own test's."""


eliot.add_destinations(_nowhere)

#: The modules that take longest, longest first: run first, so that the
#: longest ones start early and the short ones fill in at the end. pytest-xdist
#: hands each worker whole modules, the next one once two tests or fewer of its
#: current one are left (``--no-loadscope-reorder`` in pyproject.toml keeps
#: this order; by default it orders modules by how many tests they have). The
#: others follow in their rooms' order, which ends with tests/project/,
#: tests/store/, tests/supervision/, tests/tasks/ and tests/testing/: any module
#: there that takes long is listed, so that what is left for the end is short
#: and neither worker waits idle on the other's last long module.
#:
#: Ordered by each module's total (setup, calls, teardown) measured room by
#: room with ``--durations=0`` on the shared 2-core machine, loaded (about
#: twice the times of a clean run; the order is what counts): the docs run
#: 174-189 s, the bench smoke runs 125 s (its three-host bench alone 69 s; it
#: was in none of the first places, and ran late in tests/project/), the
#: three-host module and the retries against a downstream 108-125 s, the
#: 10,000-step chain 102 s, the fault tests that kill nodes 95 s, then 20-70 s.
SLOW_FIRST = (
    "test_docs_run.py",
    "test_bench_smoke.py",
    "test_hosts.py",
    "test_retry_cluster.py",
    "test_long_chain.py",
    "test_kill.py",
    "test_hosts_quorum.py",
    "test_hosts_quorum_faults.py",
    "test_inspect.py",
    "test_control_cli.py",
    "test_reload_hosts.py",
    "test_hosts_partition.py",
    "test_cli.py",
    "test_task_state.py",
    "test_examples.py",
    "test_reload.py",
    "test_web.py",
    "test_cluster.py",
    "test_tasks.py",
    "test_web_tasks.py",
    "test_mistakes.py",
    "test_cluster_controller.py",
    "test_periodic_cluster.py",
    "test_warm_shutdown.py",
    "test_celery.py",
    "test_readme.py",
    "test_host_bundle.py",
    "test_sources_cluster.py",
    "test_host_stop.py",
    "test_replicated_services.py",
)


#: What the processes the suite starts import: compiled once (pytest_configure).
COMPILED = ("src", "tests", "examples", "bench")


def pytest_configure(config: pytest.Config) -> None:
    """Compile the project's modules once, before any test starts a process.

    The suite starts several hundred ``actorctl`` processes (nodes, clusters,
    commands). With PYTHONDONTWRITEBYTECODE set, as on CI, nothing writes
    their bytecode, and each process compiled every module of the project
    again: 0.45 s of CPU of the 1.2 s it took to start, on a suite that is
    CPU-bound on 2 cores. ``compileall`` writes it whatever that says.
    """
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: its controller did it
        return
    root = Path(__file__).resolve().parent.parent
    for directory in COMPILED:
        compileall.compile_dir(root / directory, quiet=1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: place for place, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))


@pytest.fixture
def logs() -> Iterator[Logs]:
    captured = Logs()
    eliot.add_destinations(captured)
    try:
        yield captured
    finally:
        eliot.remove_destination(captured)


@pytest.fixture
def secrets(tmp_path: Path) -> Secrets:
    """TLS files from one CA, and keyrings that trust each other, for "server" and "client"."""
    return Secrets.make(tmp_path, "server", "client")


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """One etcd for a module's tests that leave it running."""
    with running_etcd(tmp_path_factory.mktemp("etcd")) as server:
        yield server


@pytest.fixture
def own_etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    """An etcd of the test's own, to kill and restart."""
    with running_etcd(tmp_path) as server:
        yield server
