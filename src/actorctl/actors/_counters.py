"""Plain counters an actor keeps as it handles messages, read only when scraped.

The message path pays an integer ``+= 1`` and one ``time.perf_counter()``
pair per message, never a lock, a dict of labels or a call into a metrics
library: ``cluster/_metrics.py`` turns these numbers into Prometheus metric
families at scrape time. Refusals (rare) are counted in a small dict keyed
by outcome and condition.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from typing import Final, final

import attrs

from ..mailbox import ACCEPTED, STATUS_ERROR
from ._dedup import Handled

__all__ = ["LATENCY_BUCKETS", "ActorCounters", "CounterSchema", "Latency", "NamedCounters"]

#: Upper bounds (seconds) of the handler latency histogram's buckets; the
#: last bucket (+Inf) is implicit. Fixed, so that an observation is one
#: ``bisect`` and one increment.
LATENCY_BUCKETS: Final = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


@final
class Latency:
    """A fixed-bucket histogram of durations in seconds (not cumulative: the
    collector sums the buckets up when scraped)."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.total += seconds


@final
class ActorCounters:
    """What one actor did with the messages it took (the mailbox counts those
    it received). Kept by its cell across restarts.

    Attributes:
        handled: messages its handler ran for and finished (accepted).
        failed: messages whose handler raised (accepted, the caller told the error).
        duplicates: messages answered from the dedup window, not run again
            (a sender sent again one it did not see settled: a redelivery).
        refused: messages settled other than accepted, by (outcome, condition):
            bad input or signature, unknown handler, expired, over credit
            (``rejected``), an open breaker or a stopping actor (``modified``).
        latency: how long its handlers ran, accepted messages only.
    """

    __slots__ = ("duplicates", "failed", "handled", "latency", "refused")

    def __init__(self) -> None:
        self.handled = 0
        self.failed = 0
        self.duplicates = 0
        self.refused: dict[tuple[str, str], int] = {}
        self.latency = Latency()

    def record(self, handled: Handled, seconds: float) -> None:
        """One message's handling ended with ``handled`` after ``seconds``."""
        outcome = handled.outcome
        if outcome is not ACCEPTED and outcome.state != "accepted":
            self.refuse(outcome.state, outcome.condition)
            return
        reply = handled.reply
        if reply is not None and reply[0] == STATUS_ERROR:
            self.failed += 1
        else:
            self.handled += 1
        latency = self.latency
        latency.counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        latency.total += seconds

    def refuse(self, state: str, condition: str | None) -> None:
        """A message was settled ``state`` (not accepted) with ``condition``."""
        key = (state, condition or "")
        self.refused[key] = self.refused.get(key, 0) + 1


@final
@attrs.frozen(eq=False)  # one schema object per application: compared by identity
class CounterSchema:
    """How the node's metrics show an application's :class:`NamedCounters`:
    the words are the application's, the runtime only follows them.

    Attributes:
        prefix: of every metric's name (``{prefix}_messages_{suffix}``,
            ``{prefix}_run_duration_seconds``).
        label: the label that holds the counted thing's name.
        events: event -> (metric suffix, help). An event ``KIND:EXTRA`` counts
            under ``KIND``, with EXTRA as the label ``extra_labels[KIND]``.
        extra_labels: the events whose text after the colon is a label, and its name.
        runs_help: the help of the run-duration histogram.
    """

    prefix: str
    label: str
    events: Mapping[str, tuple[str, str]]
    extra_labels: Mapping[str, str]
    runs_help: str


@final
class NamedCounters:
    """Counters of named things one actor runs (a task worker's tasks): by
    (name, event), and a latency histogram per name. An actor that has them
    keeps them as its ``named_counters`` attribute, and the node's metrics
    show them as its ``schema`` says (the runtime never needs to know what a
    task is)."""

    __slots__ = ("counts", "latency", "schema")

    def __init__(self, schema: CounterSchema) -> None:
        self.schema = schema
        self.counts: dict[tuple[str, str], int] = {}
        self.latency: dict[str, Latency] = {}

    def add(self, name: str, event: str) -> None:
        key = (name, event)
        self.counts[key] = self.counts.get(key, 0) + 1

    def observe(self, name: str, seconds: float) -> None:
        latency = self.latency.get(name)
        if latency is None:
            latency = self.latency[name] = Latency()
        latency.observe(seconds)

    def ran(self, name: str, seconds: float, event: str | None) -> None:
        """:meth:`observe` and, unless None, :meth:`add` of ``event``, in one
        call (an actor that counts a run and its outcome per message)."""
        latency = self.latency.get(name)
        if latency is None:
            latency = self.latency[name] = Latency()
        latency.counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        latency.total += seconds
        if event is not None:
            key = (name, event)
            self.counts[key] = self.counts.get(key, 0) + 1
