"""A node's Prometheus metrics, read from the plain counters its parts keep.

Nothing on the message path calls prometheus-client: the mailbox, the cell
(``actors/_counters.py``), the connections (``link/_engine.py``, summed by
``link/_engine_set.py``), the backlog and the dead letters keep integers, and
:class:`NodeCollector` turns them into metric families when ``/metrics`` is
scraped. docs/operations.md lists each metric and what it means.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Final, final

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from ..actors import (
    LATENCY_BUCKETS,
    ActorCell,
    CounterSchema,
    Latency,
    NamedCounters,
    ReplyMemory,
)
from ..mailbox import ReplayCache
from ..store import Store
from ._deadletters import DeadLetters
from ._http import Request, Response
from ._replays import ReplayJournal
from .link._engine_set import EngineSet
from .outbox._backlog import Backlog
from .replication._shipper import Replication

__all__ = ["CONTENT_TYPE", "NodeCollector", "metrics_handler", "render"]

CONTENT_TYPE: Final = CONTENT_TYPE_LATEST


def _named_families(schema: CounterSchema, counters: list[NamedCounters]) -> Iterator[Metric]:
    """A counter per event of ``schema``, and the run-duration histogram, over
    the ``counters`` of every actor that keeps them."""
    totals: dict[tuple[str, str, str], int] = {}
    latencies: dict[str, list[Latency]] = {}
    for named in counters:
        for (name, event), count in list(named.counts.items()):
            kind, _, extra = event.partition(":")
            key = (kind, name, extra)
            totals[key] = totals.get(key, 0) + count
        for name, latency in list(named.latency.items()):
            latencies.setdefault(name, []).append(latency)
    label, extras = schema.label, schema.extra_labels
    for kind, (suffix, doc) in schema.events.items():
        labels = [label, extras[kind]] if kind in extras else [label]
        family = CounterMetricFamily(f"{schema.prefix}_messages_{suffix}", doc, labels=labels)
        for (event, name, extra), count in sorted(totals.items()):
            if event == kind:
                family.add_metric([name, extra] if kind in extras else [name], count)
        yield family
    runs = HistogramMetricFamily(
        f"{schema.prefix}_run_duration_seconds", schema.runs_help, labels=[label]
    )
    for name, parts in sorted(latencies.items()):
        merged = Latency()
        for part in parts:
            merged.counts = [a + b for a, b in zip(merged.counts, part.counts, strict=True)]
            merged.total += part.total
        runs.add_metric([name], _buckets(merged), merged.total)
    yield runs


def _buckets(latency: Latency) -> list[tuple[str, float]]:
    """Cumulative buckets of a fixed-bucket histogram, as prometheus-client wants."""
    out = []
    running = 0
    for bound, count in zip((*LATENCY_BUCKETS, float("inf")), latency.counts, strict=True):
        running += count
        out.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
    return out


@final
class NodeCollector(Collector):
    """The metrics of one node, read at scrape time.

    Args:
        cells: the node's actors, by name.
        engines: its live connections.
        backlog: its outgoing backlog.
        dead_letters: its dead letters.
        peers: how many peer nodes it keeps a connection to.
        replies: the bytes of replies its dedup windows keep (None: not shown).
        replays: its replay cache (None: not shown).
        store: its store: the replication of its batches, when it has one.
    """

    def __init__(
        self,
        cells: Mapping[str, ActorCell],
        engines: EngineSet,
        backlog: Callable[[], Backlog],
        dead_letters: DeadLetters,
        peers: Callable[[], int],
        replies: ReplyMemory | None = None,
        replays: ReplayCache | None = None,
        store: Store | None = None,
    ) -> None:
        self._cells = cells
        self._engines = engines
        self._backlog = backlog
        self._dead_letters = dead_letters
        self._peers = peers
        self._replies = replies
        self._replays = replays
        self._store = store

    def collect(self) -> Iterator[Metric]:
        yield from self._actors()
        yield from self._named()
        yield from self._node()

    def _actors(self) -> Iterator[Metric]:
        label = ["actor"]
        received = CounterMetricFamily(
            "actorctl_actor_messages_received", "Messages an actor's mailbox took in", labels=label
        )
        handled = CounterMetricFamily(
            "actorctl_actor_messages_handled",
            "Messages whose handler ran and returned (accepted)",
            labels=label,
        )
        failed = CounterMetricFamily(
            "actorctl_actor_messages_failed",
            "Messages whose handler raised (accepted; the caller got the error)",
            labels=label,
        )
        redelivered = CounterMetricFamily(
            "actorctl_actor_messages_redelivered",
            "Messages received again and answered from the dedup window, not run again",
            labels=label,
        )
        refused = CounterMetricFamily(
            "actorctl_actor_messages_refused",
            "Messages settled other than accepted, by outcome and condition",
            labels=["actor", "outcome", "condition"],
        )
        restarts = CounterMetricFamily(
            "actorctl_actor_restarts", "Times an actor was started again", labels=label
        )
        depth = GaugeMetricFamily(
            "actorctl_actor_mailbox_messages",
            "Messages in a mailbox now (queued or being handled)",
            labels=label,
        )
        capacity = GaugeMetricFamily(
            "actorctl_actor_mailbox_capacity_messages",
            "The most messages a mailbox holds at once",
            labels=label,
        )
        credit = GaugeMetricFamily(
            "actorctl_actor_link_credit",
            "Link credit granted to senders and not yet used",
            labels=label,
        )
        kept = GaugeMetricFamily(
            "actorctl_actor_kept_reply_bytes",
            "Bytes of replies an actor's dedup window keeps for duplicates",
            labels=label,
        )
        latency = HistogramMetricFamily(
            "actorctl_actor_handler_duration_seconds",
            "How long handlers ran (accepted messages)",
            labels=label,
        )
        for name, cell in sorted(self._cells.items()):
            stats = cell.mailbox.statistics()
            counters = cell.counters
            received.add_metric([name], stats.received)
            handled.add_metric([name], counters.handled)
            failed.add_metric([name], counters.failed)
            redelivered.add_metric([name], counters.duplicates)
            for (state, condition), count in sorted(counters.refused.items()):
                refused.add_metric([name, state, condition], count)
            restarts.add_metric([name], max(0, cell.starts - 1))
            depth.add_metric([name], stats.depth)
            capacity.add_metric([name], stats.capacity)
            credit.add_metric([name], stats.credit)
            kept.add_metric([name], cell.kept_reply_bytes)
            latency.add_metric([name], _buckets(counters.latency), counters.latency.total)
        dead = CounterMetricFamily(
            "actorctl_actor_messages_dead_lettered",
            "Messages this node gave up on and kept as dead letters, by target actor and reason",
            labels=["actor", "reason"],
        )
        for (reason, target), count in sorted(self._dead_letters.added.items()):
            dead.add_metric([target, reason], count)
        yield from (received, handled, failed, redelivered, refused, dead, restarts)
        yield from (depth, capacity, credit, kept, latency)

    def _named(self) -> Iterator[Metric]:
        """The named counters of the actors that keep them (``named_counters``),
        summed across actors of one schema and shown in the schema's words."""
        by_schema: dict[CounterSchema, list[NamedCounters]] = {}
        for cell in self._cells.values():
            named = getattr(cell.actor, "named_counters", None)
            if isinstance(named, NamedCounters):
                by_schema.setdefault(named.schema, []).append(named)
        for schema, counters in by_schema.items():
            yield from _named_families(schema, counters)

    def _node(self) -> Iterator[Metric]:
        received, sent, links = self._engines.traffic()
        backlog = self._backlog()
        yield GaugeMetricFamily(
            "actorctl_node_connections", "AMQP connections open now", value=len(self._engines)
        )
        yield CounterMetricFamily(
            "actorctl_node_connections_opened",
            "AMQP connections opened (either way) since the node started",
            value=self._engines.opened,
        )
        yield GaugeMetricFamily("actorctl_node_links", "AMQP links open now", value=links)
        yield GaugeMetricFamily(
            "actorctl_node_peers", "Peer nodes this node keeps a connection to", value=self._peers()
        )
        yield CounterMetricFamily(
            "actorctl_node_received_bytes", "Bytes read from connections", value=received
        )
        yield CounterMetricFamily(
            "actorctl_node_sent_bytes", "Bytes written to connections", value=sent
        )
        yield GaugeMetricFamily(
            "actorctl_node_backlog_messages",
            "Messages in the outgoing backlog, waiting for their receiver",
            value=len(backlog),
        )
        yield CounterMetricFamily(
            "actorctl_node_backlog_resent_messages",
            "Backlog messages sent again after a refusal or an unreachable peer",
            value=backlog.resent,
        )
        yield GaugeMetricFamily(
            "actorctl_node_dead_letters", "Dead letters kept now", value=len(self._dead_letters)
        )
        yield CounterMetricFamily(
            "actorctl_node_actor_restarts",
            "Restarts of this node's actors, all together",
            value=sum(max(0, cell.starts - 1) for cell in self._cells.values()),
        )
        yield from self._memory()
        shipper = self._store.shipper if self._store is not None else None
        if isinstance(shipper, Replication):
            yield from _replication(shipper)

    def _memory(self) -> Iterator[Metric]:
        """What the node remembers of the messages it took, in bytes."""
        replies, replays = self._replies, self._replays
        if replies is not None:
            yield GaugeMetricFamily(
                "actorctl_node_kept_reply_bytes",
                "Bytes of replies its actors' dedup windows keep for duplicates",
                value=replies.bytes,
            )
            yield GaugeMetricFamily(
                "actorctl_node_kept_reply_max_bytes",
                "The bound of those bytes (max_kept_reply_bytes)",
                value=replies.max_bytes,
            )
            yield CounterMetricFamily(
                "actorctl_node_replies_forgotten",
                "Replies no longer kept for duplicates (a bound reached, or too large to keep)",
                value=replies.forgotten,
            )
            yield CounterMetricFamily(
                "actorctl_node_replies_forgotten_answered",
                "Duplicates answered with a ReplyForgotten error, not run again",
                value=replies.answered,
            )
        if replays is not None:
            yield GaugeMetricFamily(
                "actorctl_node_replay_bytes",
                "What its replay cache holds (ids' lengths plus a fixed cost each)",
                value=replays.bytes,
            )
            yield CounterMetricFamily(
                "actorctl_node_replay_dropped",
                "Replay cache entries dropped before their time for a bound",
                value=replays.dropped,
            )
            journal = replays.journal
            if isinstance(journal, ReplayJournal):  # a durable store keeps the cache
                yield GaugeMetricFamily(
                    "actorctl_node_replay_journal_bytes",
                    "What the replay cache's rows in its store hold (keys, values, 64 bytes each)",
                    value=journal.bytes,
                )
                yield CounterMetricFamily(
                    "actorctl_node_replay_journal_pruned",
                    "Replay journal rows deleted before their time for max_replay_journal_bytes",
                    value=journal.pruned,
                )


def render(collector: Collector) -> bytes:
    """The Prometheus text exposition of what ``collector`` reads now."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry)


def metrics_handler(collector: Collector) -> Callable[[Request], object]:
    """An HTTP handler (``_http.py``) that serves ``collector`` on ``/metrics``."""

    async def handle(request: Request) -> Response:
        if request.path not in ("/metrics", "/metrics/"):
            return Response(404, body=b"not found: the metrics are at /metrics\n")
        if request.method != "GET":
            return Response(405, body=b"GET /metrics\n")
        return Response(200, CONTENT_TYPE, render(collector))

    return handle


def _replication(replication: Replication) -> Iterator[Metric]:
    """Whether what the node confirms is on its standbys (docs/deploy.md)."""
    batches = CounterMetricFamily(
        "actorctl_node_replication_batches",
        "Store batches shipped to the standbys: replicated (every standby committed it), "
        "unreplicated (confirmed without a standby: degraded), refused (not confirmed)",
        labels=["outcome"],
    )
    batches.add_metric(["replicated"], replication.replicated)
    batches.add_metric(["unreplicated"], replication.unreplicated)
    batches.add_metric(["refused"], replication.refused)
    yield batches
    stats = replication.statistics()
    yield GaugeMetricFamily(
        "actorctl_node_replication_degraded",
        "1 while the node confirms with fewer standbys than named (a standby is away)",
        value=1 if stats.degraded else 0,
    )
    yield GaugeMetricFamily(
        "actorctl_node_replication_standbys_in_sync",
        "Standbys that take every batch now",
        value=sum(1 for in_sync in stats.standbys.values() if in_sync),
    )
