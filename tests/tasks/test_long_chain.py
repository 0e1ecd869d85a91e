"""A chain of ten thousand steps, against a real multi-process cluster
(``tests/apps/tasks.toml``, as tests/tasks/test_tasks.py runs it).

A module of its own: the longest test of the suite runs beside the others
(pytest-xdist gives each worker whole modules), not after tests/tasks/test_tasks.py's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from examples._cluster import running_cluster

from actorctl import chain
from tests.apps.task_app import add, app

APPS = Path(__file__).resolve().parents[1] / "apps"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Path]:
    with running_cluster(APPS / "tasks.toml", echo=False) as path:
        yield path


async def test_a_chain_of_ten_thousand_steps_works(cluster: Path) -> None:
    async with app.aconnect(cluster):
        steps = chain(add.s(0, 1), *(add.s(1) for _ in range(9_999)))
        assert len(steps.tasks) == 10_000
        # A bound, not a timing: about 4-5 ms of hops per step (two hops, each
        # stored before it is settled), 40-50 s alone, and up to twice that
        # while the other pytest worker runs a three-host test
        assert await (await steps.adelay()).aget(timeout=240) == 10_000
