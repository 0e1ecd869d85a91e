"""What an application on the runtime declares of cluster.toml.

The runtime reads the tables it knows (``[cluster]``, ``[[node]]``,
``[[router]]``, ``[[supervisor]]``, ``[[boxed]]``, ``[etcd]``) and nothing
else by name. An application built on it (the task layer, say: its
``[[periodic]]``, ``[[source]]`` and ``[[task]]`` tables) declares its own
through a :class:`ClusterApp` (``_config.py``) given to ``load_cluster`` (``_load.py``): the
arrays of tables it reads and their keys (:class:`AppTable`, checked with the
same words as the runtime's own), the roles it holds leases for, the checks
``cluster up`` makes before it starts anything, what a ``cluster reload``
of its tables changes (:class:`AppReload`), and what the Controller's web page
shows of it (:class:`AppPage`: what to ask of which actors, the script that
draws it, the control actions it offers and the named counters it plots). So
a misspelt key of an
application's table is named with the nearest known key, as any other is,
while the runtime keeps no word of the application.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, final

import attrs

from ..._errors import ConfigError
from ..._schema import schema_keys, schema_required
from ...actors import CounterSchema

__all__ = ["AppPage", "AppReload", "AppTable", "PageAction", "PageCounters", "PageFeed"]

#: Rows a window keeps on the Controller, as the task layer's feed asks (web_window's default).
WINDOW: Final = 1000


@final
@attrs.frozen
class AppTable:
    """An array of tables ``[[name]]`` that an application reads.

    Attributes:
        name: the tables' key in the file (``periodic`` for ``[[periodic]]``).
        known: the keys each table may have: any other is refused, naming the
            nearest known one.
        required: the keys each table must have.
        schema: the record each table is read as (:meth:`of`), its values
            checked by the runtime's converter as the runtime's own tables'
            are (``_schema.py``); None: only its keys are checked.
    """

    name: str
    known: frozenset[str]
    required: tuple[str, ...] = ("name",)
    schema: type[attrs.AttrsInstance] | None = None

    @classmethod
    def of(cls, name: str, schema: type[attrs.AttrsInstance]) -> AppTable:
        """The tables ``[[name]]``, each read as a ``schema`` record: its fields
        are the keys a table may have, those without a default the keys it
        must have, and each field's type (and ``key(...)``) what its value is."""
        return cls(name, schema_keys(schema), schema_required(schema), schema)


@final
@attrs.frozen
class AppReload:
    """What a ``cluster reload`` of an application's tables changes.

    Attributes:
        live: changes running nodes follow in place, a line each, as
            ``cluster reload`` prints them (``periodic nightly added``).
        restart: nodes to drain and restart, each with what changed on it.
    """

    live: tuple[str, ...] = ()
    restart: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)


@final
@attrs.frozen
class PageFeed:
    """What the Controller's web page asks, each second while a page is open,
    of the actor ``actor`` on every running node that hosts one.

    Attributes:
        key: where the page finds the answers (``snapshot.app[key]``).
        actor: the actor asked, by name, on each node that hosts it.
        op: the handler asked.
        window: 0: the page shows each node's latest answer, as it came.
            Otherwise the handler takes a cursor (None, then the ``cursor`` of
            the node's last answer) and answers ``{"cursor": ..., "rows":
            [...]}`` with the rows since; the Controller keeps the last
            ``window`` rows of every node together (or as many as
            cluster.toml's ``[cluster] web_window`` says), each row a dict
            with an ``id`` and a ``name`` (what the page's search finds).
        split: for a window, the field whose values the page lists apart
            (the newest rows of each value).
        order: for a window, the field that orders the rows of one ask of
            every node (a time) as they enter the window, oldest first.
    """

    key: str
    actor: str
    op: str
    window: int = 0
    split: str | None = None
    order: str | None = None


@final
@attrs.frozen
class PageAction:
    """A control action the page offers: ``POST /api/control/NAME`` with a
    JSON body, which the Controller broadcasts as ``op`` to the actor
    ``actor`` on every node that hosts one. Like every control action it
    needs the operator's client certificate.

    Attributes:
        name: the action's name in the URL (not one of the page's own:
            ``retry``).
        actor: the actor asked, by name, on each node that hosts it.
        op: the handler asked.
        args: the handler's arguments, from the request's JSON body; a
            ``KeyError`` or ``ValueError`` it raises (a field missing or
            malformed) is answered 400, naming it.
    """

    name: str
    actor: str
    op: str
    args: Callable[[Mapping[str, Any]], list[Any]]


@final
@attrs.frozen
class PageCounters:
    """Named counters (an actor's :class:`~actorctl.actors.NamedCounters`)
    whose counts the page plots per name, from the metrics the Controller
    scrapes (the snapshot's ``named``).

    Attributes:
        schema: how the nodes' metrics show them (their names and label).
        outcomes: the metric suffixes sampled per name
            (``{prefix}_messages_{suffix}``, each one of ``schema``'s), and
            the keys the page finds them under.
    """

    schema: CounterSchema
    outcomes: tuple[str, ...]

    def __attrs_post_init__(self) -> None:
        known = {suffix for suffix, _ in self.schema.events.values()}
        unknown = [o for o in self.outcomes if o not in known]
        if unknown:
            raise ConfigError(
                f"PageCounters: no counter {unknown} in the schema {self.schema.prefix!r}: "
                f"give suffixes it counts ({', '.join(sorted(known))})"
            )

    def metrics(self) -> dict[str, str]:
        """The sample names of the outcomes' counters (the scraped
        ``..._total``), each to its outcome."""
        return {f"{self.schema.prefix}_messages_{o}_total": o for o in self.outcomes}


@final
@attrs.frozen
class AppPage:
    """What an application adds to the Controller's web page.

    Attributes:
        feeds: what the page asks of the nodes (:class:`PageFeed`).
        script: JavaScript the page runs after its own; it draws the app's
            sections from ``snapshot.app`` (the page's helpers are on
            ``window.actorctl``, docs/operations.md), and the forms of its
            actions (into ``#app-control``, posting with ``control``).
        actions: the control actions it offers (:class:`PageAction`).
        counters: the named counters the page plots per name (None: none).
    """

    feeds: tuple[PageFeed, ...] = ()
    script: str = ""
    actions: tuple[PageAction, ...] = ()
    counters: PageCounters | None = None
