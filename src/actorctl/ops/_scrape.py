"""The Controller's view of every node's metrics: it scrapes each node's
``/metrics``, serves them together with a ``node`` label (and
``actorctl_node_up`` 0 for a node that did not answer, with why), and keeps a
few minutes of samples for the web page's plots (with their wall times, for
the time axes): per node the messages its actors handled and their mean
handler latency, and per name of the application's named counters (its
``AppPage.counters``: a task, say) the counts of the outcomes it plots (the
runs that succeeded, failed and were retried).

Messages done are the work of the nodes: an actor whose name begins with
``_`` is a node's agent (``_node``, ``_deadletters``, ``_health``, an
application's such as ``_tasks``) answering the Controller, the page and the
operator's commands, and its messages are not counted, so that an idle
cluster's figure stays still while the page watches it.
"""

from __future__ import annotations

import collections
import itertools
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, final
from urllib.parse import urlsplit

import trio
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from ..cluster._http import http_get
from ..cluster._metrics import render
from ..cluster.config._app import PageCounters

__all__ = ["Scraper"]

#: Samples kept for the plots: one per ``interval`` (5 minutes at 1 s).
KEEP: Final = 300
_DONE: Final = ("actorctl_actor_messages_handled_total", "actorctl_actor_messages_failed_total")
_LATENCY: Final = "actorctl_actor_handler_duration_seconds"
#: An actor whose name begins with this is a node's agent: its messages are not work.
AGENT_PREFIX: Final = "_"

#: Per node (messages done, latency sum, latency count).
NodePoint = dict[str, tuple[float, float, float]]
#: Per node, per name, its totals of each outcome.
NamedPoint = dict[str, dict[str, dict[str, float]]]


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
        counters: the application's named counters to sample per name (its
            ``AppPage.counters``; None: none).
    """

    def __init__(
        self,
        targets: Callable[[], Mapping[str, str | None]],
        timeout: float = 2.0,
        counters: PageCounters | None = None,
    ) -> None:
        self._targets = targets
        self._timeout = timeout
        #: The sampled counters' sample names, each to its outcome; and their label.
        self._named = counters.metrics() if counters is not None else {}
        self._label = counters.schema.label if counters is not None else ""
        #: (monotonic time, wall time, per node, per name): KEEP of them.
        self.samples: collections.deque[tuple[float, float, NodePoint, NamedPoint]] = (
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
        point: NodePoint = {}
        named: NamedPoint = {}
        for node, families in scraped.items():
            if isinstance(families, str):
                continue
            done = total = count = 0.0
            mine = named[node] = {}
            for family in families:
                for s in family.samples:
                    if s.labels.get("actor", "").startswith(AGENT_PREFIX):
                        continue  # a node's agent: bookkeeping, not work
                    if s.name in _DONE:
                        done += s.value
                    elif s.name == f"{_LATENCY}_sum":
                        total += s.value
                    elif s.name == f"{_LATENCY}_count":
                        count += s.value
                    elif (outcome := self._named.get(s.name)) is not None:
                        counts = mine.setdefault(s.labels.get(self._label, ""), {})
                        counts[outcome] = counts.get(outcome, 0.0) + s.value
            point[node] = (done, total, count)
        self.samples.append((trio.current_time(), time.time(), point, named))

    def series(self) -> dict[str, list[dict[str, Any]]]:
        """Per node, between samples: ``at`` (the wall time, s since the epoch),
        ``rate`` (messages done per second), ``latency`` (mean handler latency
        in s, None: none handled) and ``done`` (the node's total)."""
        out: dict[str, list[dict[str, Any]]] = {}
        for (t0, _, before, _), (t1, at, after, _) in itertools.pairwise(self.samples):
            for node, (done, total, count) in after.items():
                if node not in before or t1 <= t0:
                    continue
                d0, s0, c0 = before[node]
                rate = max(0.0, (done - d0) / (t1 - t0))
                latency = (total - s0) / (count - c0) if count > c0 else None
                out.setdefault(node, []).append(
                    {"at": round(at, 3), "rate": rate, "latency": latency, "done": done}
                )
        return out

    def named(self) -> dict[str, dict[str, Any]]:
        """Per name (a task): ``totals``, its counts now (of each outcome of
        the counters, ``succeeded``, ``failed``, ``retried`` say, summed over
        the nodes that answered the last scrape), and ``points`` between
        samples: ``at`` (wall time), ``dt`` (seconds since the sample before)
        and each outcome per second, from the nodes that answered both (a name
        a node had not counted yet counts from 0)."""
        out: dict[str, dict[str, Any]] = {}
        if self.samples:
            for counts in self.samples[-1][3].values():
                for name, outcomes in counts.items():
                    totals = out.setdefault(name, {"totals": {}, "points": []})["totals"]
                    for outcome, value in outcomes.items():
                        totals[outcome] = totals.get(outcome, 0.0) + value
        for (t0, _, _, before), (t1, at, _, after) in itertools.pairwise(self.samples):
            if t1 <= t0:
                continue
            rates: dict[str, dict[str, float]] = {}
            for node, counts in after.items():
                if node not in before:
                    continue
                for name, outcomes in counts.items():
                    was = before[node].get(name, {})
                    point = rates.setdefault(name, {"at": round(at, 3), "dt": t1 - t0})
                    for outcome, value in outcomes.items():
                        rate = max(0.0, (value - was.get(outcome, 0.0)) / (t1 - t0))
                        point[outcome] = point.get(outcome, 0.0) + rate
            for name, point in rates.items():
                if name in out:
                    out[name]["points"].append(point)
        return out

    async def run(self, interval: float = 1.0) -> None:
        """Scrape and sample every ``interval`` seconds, until cancelled."""
        while True:
            self.sample(await self.scrape())
            await trio.sleep(interval)
