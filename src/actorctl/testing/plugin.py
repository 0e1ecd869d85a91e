"""The pytest plugin of ``actorctl.testing``: the ``actorctl_cluster`` fixture.

Loaded by the ``pytest11`` entry point ``actorctl`` (or list it in a
conftest: ``pytest_plugins = ["actorctl.testing.plugin"]``). It needs
pytest-trio (the fixture is async, and runs in the test's trio run)::

    @pytest.mark.actorctl_cluster("myapp.tasks:app", workers=2)
    async def test_adds(actorctl_cluster):
        assert await (await add.adelay(1, 2)).aget(timeout=10) == 3
        await actorctl_cluster.wait_idle()

The marker takes the app (the object, or ``"MODULE:NAME"``) and the keyword
arguments of :func:`actorctl.testing.open_cluster`; the cluster's directory
is the test's ``tmp_path``.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ..tasks import App
from ._cluster import TestCluster, open_cluster

__all__ = ["actorctl_cluster", "pytest_configure"]

MARKER = "actorctl_cluster"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(app, **options): the app (or 'MODULE:NAME') and the options of "
        "actorctl.testing.open_cluster for the actorctl_cluster fixture",
    )


def _app_of(given: object) -> App:
    if isinstance(given, str):
        module, _, name = given.partition(":")
        given = getattr(importlib.import_module(module), name or "app")
    if not isinstance(given, App):
        raise pytest.UsageError(
            f"@pytest.mark.{MARKER}: expected an actorctl App or 'MODULE:NAME' naming one, "
            f"got {given!r}"
        )
    return given


@pytest.fixture
async def actorctl_cluster(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[TestCluster]:
    """An in-process cluster for the app the test's ``actorctl_cluster`` marker
    names, the app connected to it for the test."""
    marker = request.node.get_closest_marker(MARKER)
    if marker is None or not (marker.args or "app" in marker.kwargs):
        raise pytest.UsageError(
            f"the {MARKER} fixture needs @pytest.mark.{MARKER}(app, workers=..., ...) "
            "on the test (or its module: pytestmark = ...)"
        )
    options = dict(marker.kwargs)
    app = _app_of(marker.args[0] if marker.args else options.pop("app"))
    options.setdefault("directory", tmp_path / "cluster")
    async with open_cluster(app, **options) as cluster:
        yield cluster
