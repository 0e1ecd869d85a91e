"""Shared fixtures: captured eliot logs, secrets for a server and a client node,
and a real etcd (tests/etcd_server.py; skipped, naming the package, without it).

The helpers they are built on (and that fixtures fit less well) are in tests/harness.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import eliot
import pytest

from .etcd_server import EtcdServer, running_etcd
from .harness import Logs, Secrets


def _nowhere(message: dict[str, object]) -> None:
    """Until a destination is added, eliot keeps what is logged and hands it
    to the first one: a test's ``logs`` would get what earlier tests logged.
    This one is there from the start, so each ``logs`` sees its own test's."""


eliot.add_destinations(_nowhere)


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
