"""A node's process tunes Python's garbage collector once it is up
(``cli/run/_node.py``: issue 30), unless its environment says not to."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from actorctl.cli.run._node import GC_VARIABLE, YOUNG_COLLECTION, _tune_collector


class _Cycle:
    """An object that refers to itself: freed by the collector alone."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def collector() -> Iterator[None]:
    """The collector's settings as they were, given back after the test."""
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("collector")
def test_a_node_freezes_what_it_made_to_start_and_collects_young_objects_less_often() -> None:
    # Given Python's collector as a process starts with it
    gc.set_threshold(700, 10, 10)
    gc.unfreeze()
    # And a cycle of garbage left from the start
    garbage = _Cycle()
    left = weakref.ref(garbage)
    del garbage
    # When the node tunes it
    assert _tune_collector({}) is True
    # Then the garbage was collected first (not frozen, where it would stay
    # for good), what is left is frozen, and young objects are collected
    # 10,000 at a time
    assert left() is None
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (YOUNG_COLLECTION, 10, 10)


@pytest.mark.usefixtures("collector")
def test_actorctl_gc_python_keeps_pythons_collector_as_it_is() -> None:
    # Given Python's collector as a process starts with it
    gc.set_threshold(700, 10, 10)
    gc.unfreeze()
    # When a node whose environment says ACTORCTL_GC=python tunes it
    assert _tune_collector({GC_VARIABLE: " Python "}) is False
    # Then nothing is frozen and the thresholds are Python's
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == (700, 10, 10)
