"""What an application declares of the Controller's web page (``AppPage``):
its named counters, which the scraper samples in the application's words, and
its control actions, each one name of its own.

(The task layer's page on a real cluster is tests/ops/test_web.py and
tests/tasks/test_web_tasks.py; here an application of other words shows that
the runtime follows what it is given.)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import trio
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from actorctl import ConfigError
from actorctl.actors import CounterSchema, NamedCounters
from actorctl.cluster import PageAction, PageCounters
from actorctl.cluster._metrics import _named_families, render
from actorctl.ops._scrape import Scraper
from actorctl.ops._web import WebApp

ORDERS = CounterSchema(
    prefix="shop_order",
    label="order",
    events=MappingProxyType(
        {"packed": ("packed", "Orders packed"), "lost": ("lost", "Orders lost in the post")}
    ),
    extra_labels=MappingProxyType({}),
    runs_help="How long packing took",
)


class _Named(Collector):
    def __init__(self, counters: NamedCounters) -> None:
        self._counters = counters

    def collect(self) -> Iterator[Metric]:
        return _named_families(self._counters.schema, [self._counters])


def _scraped(counters: NamedCounters) -> dict[str, list[Metric] | str]:
    """One node's metrics as the Controller reads them: rendered by the
    node's own code, parsed by prometheus-client."""
    text = render(_Named(counters)).decode()
    return {"shop-1": list(text_string_to_metric_families(text))}


async def test_the_scraper_samples_the_counters_an_application_names(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Given an application whose counters count orders, and a page that plots packed ones
    counters = NamedCounters(ORDERS)
    scraper = Scraper(dict, counters=PageCounters(ORDERS, ("packed",)))
    for _ in range(3):
        counters.add("pie", "packed")
    counters.add("pie", "lost")
    # When the Controller samples the node's metrics twice, a second apart
    scraper.sample(_scraped(counters))
    await trio.sleep(1.0)  # the mock clock's second (autojump_clock): no real wait
    for _ in range(2):
        counters.add("pie", "packed")
    scraper.sample(_scraped(counters))
    # Then the page has each order's packed count and rate, under the
    # application's label, and not the outcome it did not ask for
    named = scraper.named()
    assert set(named) == {"pie"}
    assert named["pie"]["totals"] == {"packed": 5.0}
    assert [p["packed"] for p in named["pie"]["points"]] == [pytest.approx(2.0)]


async def test_a_page_without_counters_samples_no_names() -> None:
    # Given the same node's metrics, and a page whose application names no counters
    counters = NamedCounters(ORDERS)
    counters.add("pie", "packed")
    scraper = Scraper(dict)
    # When sampled; Then nothing is plotted per name
    scraper.sample(_scraped(counters))
    assert scraper.named() == {}


def test_page_counters_refuse_an_outcome_their_schema_does_not_count() -> None:
    with pytest.raises(ConfigError, match=r"'shipped'.*lost, packed"):
        PageCounters(ORDERS, ("packed", "shipped"))


def _args(body: Mapping[str, Any]) -> list[Any]:
    return [str(body["order"])]


@pytest.mark.parametrize("second", ["pack", "retry"])
def test_the_page_refuses_an_action_named_twice(tmp_path: Path, second: str) -> None:
    # Given actions of one name, or one named as the page's own (a dead letter's retry)
    actions = [PageAction("pack", "_shop", "pack", _args), PageAction(second, "_shop", "x", _args)]

    async def ask(handler: str, *args: Any) -> Any:
        raise AssertionError(f"nothing is asked (asked {handler!r})")

    # When the page is made with them; Then it is refused, naming the action
    with pytest.raises(ConfigError, match=repr(second)):
        WebApp(ask, Scraper(dict), list, tmp_path, "shop", actions=actions)
