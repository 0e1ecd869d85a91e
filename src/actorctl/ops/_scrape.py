"""The Controller's view of every node's metrics: it scrapes each node's
``/metrics``, serves them together with a ``node`` label (and
``actorctl_node_up`` 0 for a node that did not answer, with why), and keeps a
few minutes of samples (messages handled, mean handler latency) for the web
page's plots.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, final
from urllib.parse import urlsplit

import trio
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from ..cluster._http import http_get
from ..cluster._metrics import render

__all__ = ["Scraper"]

#: Samples kept for the plots: one per ``interval`` (5 minutes at 1 s).
KEEP: Final = 300
_DONE: Final = ("actorctl_actor_messages_handled_total", "actorctl_actor_messages_failed_total")
_LATENCY: Final = "actorctl_actor_handler_duration_seconds"


@final
class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


@final
class Scraper:
    """Scrapes the nodes whose /metrics ``targets`` names (node name to URL, or
    None for a node that serves none or is not running).

    Args:
        targets: read afresh at each scrape (nodes restart on other ports).
        timeout: seconds each node gets to answer.
    """

    def __init__(
        self, targets: Callable[[], Mapping[str, str | None]], timeout: float = 2.0
    ) -> None:
        self._targets = targets
        self._timeout = timeout
        #: (monotonic time, per node (messages done, latency sum, latency count)).
        self.samples: collections.deque[tuple[float, dict[str, tuple[float, float, float]]]] = (
            collections.deque(maxlen=KEEP)
        )
        #: The last scrape: per node, its families, or why it did not answer.
        self.last: dict[str, list[Metric] | str] = {}

    async def scrape(self) -> dict[str, list[Metric] | str]:
        """Every node at once: its metric families, or why it did not answer."""
        found: dict[str, list[Metric] | str] = {}

        async def one(node: str, url: str | None) -> None:
            if url is None:
                found[node] = "serves no /metrics (not running, or none configured)"
                return
            parts = urlsplit(url)
            try:
                status, body = await http_get(
                    parts.hostname or "127.0.0.1",
                    parts.port or 80,
                    parts.path,
                    timeout=self._timeout,
                )
                if status != 200:
                    raise OSError(f"HTTP {status}")
                found[node] = list(text_string_to_metric_families(body.decode()))
            except (OSError, trio.BrokenResourceError, trio.TooSlowError, ValueError) as exc:
                # (a connection reset by a node that was just killed is not an OSError in trio)
                found[node] = f"{url}: {type(exc).__name__}: {exc}"

        async with trio.open_nursery() as nursery:
            for node, url in self._targets().items():
                nursery.start_soon(one, node, url)
        self.last = found
        return found

    def aggregate(self, scraped: Mapping[str, list[Metric] | str]) -> bytes:
        """One exposition of every node's families, each sample labelled with
        its node, and ``actorctl_node_up`` (1, or 0 with the error) per node."""
        merged: dict[str, Metric] = {}
        up = GaugeMetricFamily(
            "actorctl_node_up",
            "Whether the node answered the Controller's scrape (0: see the error label)",
            labels=["node", "error"],
        )
        for node, families in sorted(scraped.items()):
            if isinstance(families, str):
                up.add_metric([node, families], 0)
                continue
            up.add_metric([node, ""], 1)
            for family in families:
                into = merged.get(family.name)
                if into is None:
                    into = merged[family.name] = Metric(
                        family.name, family.documentation, family.type
                    )
                for s in family.samples:
                    into.add_sample(s.name, {**s.labels, "node": node}, s.value)
        return render(_Families([*merged.values(), up]))

    def sample(self, scraped: Mapping[str, list[Metric] | str]) -> None:
        """Keep the totals the plots need from one scrape."""
        point: dict[str, tuple[float, float, float]] = {}
        for node, families in scraped.items():
            if isinstance(families, str):
                continue
            done = total = count = 0.0
            for family in families:
                for s in family.samples:
                    if s.name in _DONE:
                        done += s.value
                    elif s.name == f"{_LATENCY}_sum":
                        total += s.value
                    elif s.name == f"{_LATENCY}_count":
                        count += s.value
            point[node] = (done, total, count)
        self.samples.append((trio.current_time(), point))

    def series(self) -> dict[str, list[dict[str, Any]]]:
        """Per node: messages/s and mean handler latency (s) between samples."""
        out: dict[str, list[dict[str, Any]]] = {}
        points = list(self.samples)
        if not points:
            return out
        start = points[0][0]
        for (t0, before), (t1, after) in itertools.pairwise(points):
            for node, (done, total, count) in after.items():
                if node not in before or t1 <= t0:
                    continue
                d0, s0, c0 = before[node]
                rate = max(0.0, (done - d0) / (t1 - t0))
                latency = (total - s0) / (count - c0) if count > c0 else None
                out.setdefault(node, []).append(
                    {"t": round(t1 - start, 3), "rate": rate, "latency": latency, "done": done}
                )
        return out

    async def run(self, interval: float = 1.0) -> None:
        """Scrape and sample every ``interval`` seconds, until cancelled."""
        while True:
            self.sample(await self.scrape())
            await trio.sleep(interval)
