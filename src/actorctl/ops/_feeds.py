"""What the web page asks of the nodes for the application the cluster runs:
the feeds its :class:`~actorctl.cluster.AppPage` declares (``PageFeed``).

Each second while a page is open (each few seconds while none is), the
Controller asks every feed's handler of the feed's actor on every running node
that hosts one, all at once, through its own ``broadcast``:

- a plain feed keeps each node's latest answer, as it came;
- a windowed feed passes each node the cursor of its last answer and keeps the
  rows it answers in one window of the last N rows of every node together
  (``[cluster] web_window``, else the feed's own): the Controller's memory
  for it is bounded by N, whatever the cluster runs.

The page gets, for a window, its newest rows and the newest of each value of
the feed's ``split`` field; ``search`` finds rows by id or name in the whole
window (``/api/feed/KEY?q=...``). Nothing here knows what the rows are.
"""

from __future__ import annotations

import collections
import functools
import itertools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, final

import trio

from ..cluster.config._app import PageFeed

__all__ = ["SHOWN", "Feeds"]

#: Rows of a window the page's snapshot carries: the newest, and the newest of each split.
SHOWN: Final = 50
#: Seconds a node gets to answer a feed's ask.
FEED_TIMEOUT: Final = 3.0

#: Asks the Controller ``handler`` with ``args``.
Ask = Callable[..., Awaitable[Any]]


@final
class Feeds:
    """The feeds of one application, polled by the page's loop (``_web.py``).

    Args:
        feeds: what to ask (``AppPage.feeds``).
        ask: asks the Controller a handler (here: ``broadcast``).
        window: rows each windowed feed keeps (None: the feed's own).
    """

    def __init__(self, feeds: Sequence[PageFeed], ask: Ask, window: int | None = None) -> None:
        self._feeds = tuple(feeds)
        self._ask = ask
        self._rows: dict[str, collections.deque[dict[str, Any]]] = {
            f.key: collections.deque(maxlen=window or f.window) for f in feeds if f.window
        }
        #: Per windowed feed, the cursor of each node's last answer.
        self._cursors: dict[str, dict[str, Any]] = {key: {} for key in self._rows}
        #: Per feed, the latest answers (plain), or who did not answer (window).
        self._latest: dict[str, Any] = {}

    async def poll(self) -> None:
        """Ask every feed of every node that hosts its actor, at once."""
        async with trio.open_nursery() as nursery:
            for feed in self._feeds:
                nursery.start_soon(self._poll, feed)

    async def _poll(self, feed: PageFeed) -> None:
        try:
            if not feed.window:
                self._latest[feed.key] = await self._ask(
                    "broadcast", feed.actor, feed.op, [], FEED_TIMEOUT
                )
                return
            each = {node: [cursor] for node, cursor in self._cursors[feed.key].items()}
            answers = await self._ask("broadcast", feed.actor, feed.op, [None], FEED_TIMEOUT, each)
        except Exception as exc:  # the page shows that the Controller did not answer
            self._latest[feed.key] = {"error": f"{type(exc).__name__}: {exc}"}
            return
        self._latest[feed.key] = {"unanswered": self._take(feed, answers)}

    def _take(self, feed: PageFeed, answers: dict[str, Any]) -> dict[str, str]:
        """Keep the rows of every node's answer (in the feed's order); who did
        not answer, and why."""
        cursors = self._cursors[feed.key]
        unanswered: dict[str, str] = {}
        new: list[dict[str, Any]] = []
        for node, answer in sorted(answers.items()):
            if not isinstance(answer, dict) or not isinstance(answer.get("rows"), list):
                why = answer.get("unanswered") if isinstance(answer, dict) else None
                unanswered[node] = str(why or f"not a window's answer: {answer!r:.200}")
                continue
            new.extend({"node": node, **row} for row in answer["rows"] if isinstance(row, dict))
            cursors[node] = answer.get("cursor")
        if feed.order is not None:
            new.sort(key=functools.partial(_order, feed.order))
        self._rows[feed.key].extend(new)
        return unanswered

    def snapshot(self) -> dict[str, Any]:
        """What the page's snapshot carries of each feed (by its key)."""
        out: dict[str, Any] = {}
        for feed in self._feeds:
            latest = self._latest.get(feed.key)
            if not feed.window:
                out[feed.key] = latest
                continue
            rows = self._rows[feed.key]
            by: dict[str, list[dict[str, Any]]] = {}
            if feed.split is not None:
                for row in reversed(rows):
                    some = by.setdefault(str(row.get(feed.split)), [])
                    if len(some) < SHOWN:
                        some.append(row)
            out[feed.key] = {
                **(latest or {}),
                "kept": len(rows),
                "window": rows.maxlen,
                "newest": list(itertools.islice(reversed(rows), SHOWN)),
                "by": by,
            }
        return out

    def search(self, key: str, text: str, limit: int = SHOWN) -> list[dict[str, Any]] | None:
        """The rows of window ``key`` whose id holds ``text`` or whose name
        holds it (any case), newest first, ``limit`` at most (None: no such
        window)."""
        rows = self._rows.get(key)
        if rows is None:
            return None
        wanted = text.strip().lower()
        found = (
            row
            for row in reversed(rows)
            if wanted in str(row.get("id", "")).lower()
            or wanted in str(row.get("name", "")).lower()
        )
        return list(itertools.islice(found, max(1, limit)))


def _order(field: str, row: dict[str, Any]) -> float:
    """Where ``row`` goes by its ``field`` (a number; a row without one, last)."""
    value = row.get(field)
    return float(value) if isinstance(value, int | float) else float("inf")
