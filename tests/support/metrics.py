"""A node's /metrics as the tests read it: scraped, parsed with
prometheus-client's own parser, and checked against the naming rules.

``lint`` parses an exposition and checks its names, ``value`` picks one
sample, ``scrape`` fetches a node's /metrics over HTTP and lints it.
"""

from __future__ import annotations

import re
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from actorctl import Node
from actorctl.cluster._http import http_get

__all__ = ["lint", "scrape", "value"]

_NAME = re.compile(r"^actorctl_[a-z0-9_]+$")
_UNITS = ("_seconds", "_bytes", "_messages", "_credit", "_connections", "_links", "_peers")


def lint(text: str) -> dict[str, Any]:
    """Parse an exposition with prometheus-client's parser and check the
    naming rules: the actorctl_ prefix, snake case, counters ending in
    _total, histograms with buckets, a sum and a count, durations in seconds
    (not ms), sizes in bytes. Returns the families by name."""
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families, "nothing exposed"
    for name, family in families.items():
        assert _NAME.match(name), name
        assert family.documentation, f"{name} has no help text"
        assert not re.search(r"_(ms|milliseconds|kb|mb|percent)(_|$)", name), name
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples), name
            assert not name.endswith("_total"), f"{name}: the parser strips _total"
        if family.type == "histogram":
            assert name.endswith("_seconds"), name
            kinds = {s.name.removeprefix(name) for s in family.samples}
            assert kinds <= {"_bucket", "_sum", "_count", "_created"}, (name, kinds)
        if family.type == "gauge":
            assert not name.endswith("_total"), name
    return families


def value(families: dict[str, Any], name: str, **labels: str) -> float:
    """The one sample of ``name`` whose labels include ``labels``."""
    found = [
        s.value
        for f in families.values()
        for s in f.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (name, labels, found)
    return float(found[0])


async def scrape(node: Node) -> dict[str, Any]:
    assert node.metrics is not None
    status, body = await http_get(*node.metrics, "/metrics", timeout=5.0)
    assert status == 200
    return lint(body.decode())
