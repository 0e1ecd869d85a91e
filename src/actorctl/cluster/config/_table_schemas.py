"""The schemas of the runtime's own tables of cluster.toml: ``[cluster]``,
``[[node]]`` and ``[[router]]``, each a frozen attrs record read by
``_schema.read_table`` (a field is a key; its ``key(...)`` says what the
error for a wrong value says was expected).

A key that holds a table read by a module of its own (``[node.limits]``,
``[node.metrics]``, ``[[node.health]]``, ``[node.deadletters]``,
``[cluster] web``) is a field of type ``Any`` here: its module reads it
(``[node.deadletters]`` as :class:`DeadLettersTable`, in the words of
``DeadLetterBounds``' errors). What only the whole file shows (a router's node exists,
ports used twice) is checked by ``_load.py`` and ``_node_table.py``.
"""

from __future__ import annotations

import re
from typing import Any, Final, final

import attrs

from ..._schema import key
from .._deadletters import BOUND_WORDS, DeadLetterBounds
from ._app import WINDOW
from ._config import SHUTDOWN_GRACE
from ._tree_config import TARGET
from ._web_config import LISTEN, listen_ok

__all__ = [
    "MOST_GRACE",
    "ClusterTable",
    "DeadLettersTable",
    "NodeTable",
    "RouterTable",
    "endpoint",
]

_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?")
#: The longest shutdown_grace (s): a day; a stop that may wait longer is no stop.
MOST_GRACE: Final = 86_400.0
_STRING: Final = "a non-empty string"
_ENDPOINT: Final = "HOST:PORT, e.g. 127.0.0.1:5701"


def endpoint(listen: str) -> tuple[str, int] | None:
    """``HOST:PORT`` as (host, port); None if it is not one."""
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host, int(port)


def _named(value: str) -> bool:
    return _NAME.fullmatch(value) is not None


@final
@attrs.frozen
class ClusterTable:
    """``[cluster]``: the cluster's name, its development mode, where its
    certificates and keys are, and where the Controller listens."""

    name: str = key(_STRING, default="cluster")
    dev: bool = key("true or false", default=False)
    dev_public: bool = key("true or false", default=False)
    certs: str = key(_STRING, default="certs")
    keys: str = key(_STRING, default="keys")
    insecure: bool = key("true or false", default=False)
    controller: str = key(
        _ENDPOINT, lambda v: endpoint(v) is not None, default="127.0.0.1:5700", type_words=_STRING
    )
    # where the Controller serves its web page (and the cluster's /metrics)
    web: str | None = key(LISTEN, listen_ok, default=None)
    # the rows of each windowed feed the web page keeps (None: each feed's own)
    web_window: int | None = key(
        f"a whole number from 1 to 100000 (the rows the web page keeps, default {WINDOW})",
        lambda v: 1 <= v <= 100_000,
        default=None,
    )


@final
@attrs.frozen
class NodeTable:
    """A ``[[node]]`` table: the keys the runtime reads (an actors factory
    reads the table's others, its ``settings``)."""

    name: str = key("letters, digits, '.' and '-'", _named, type_words=_STRING)
    listen: str = key(_ENDPOINT, lambda v: endpoint(v) is not None, type_words=_STRING)
    host: str = key(
        "a host's name: letters, digits, '.' and '-'", _named, default="", type_words=_STRING
    )
    actors: str | None = key(
        "MODULE:OBJECT, e.g. examples.workers:actors",
        lambda v: TARGET.fullmatch(v) is not None,
        default=None,
    )
    instances: int = key("a whole number from 1 to 1000", lambda v: 1 <= v <= 1000, default=1)
    durable: bool = key(
        "true or false (whether node {name!r} keeps its store on disk)", default=True
    )
    shutdown_grace: float = key(
        f"seconds from 0 to {MOST_GRACE:g} that node {{name!r}} gives its running "
        "handlers to finish when it stops (e.g. shutdown_grace = 20.0; 0: a stop "
        "cancels them at once, and they run again elsewhere)",
        lambda v: 0 <= v <= MOST_GRACE,
        default=SHUTDOWN_GRACE,
    )
    limits: Any = attrs.field(factory=dict)  # its own words: _node_table._limits
    deadletters: Any = attrs.field(factory=dict)  # DeadLettersTable
    health: Any = attrs.field(factory=list)  # _health_tables.py
    metrics: Any = None  # [node.metrics]: _web_config.MetricsTable


@final
@attrs.frozen
class RouterTable:
    """A ``[[router]]`` table: a logical name and the actors it picks from."""

    name: str
    node: str
    # NODE/ACTOR strings (each is checked against the file's nodes by read_routers)
    instances: tuple[str, ...] = key('a list like ["n1/emails"]', bool)


_BOUNDS: Final = attrs.fields(DeadLetterBounds)


@final
@attrs.frozen
class DeadLettersTable:
    """A node's ``[node.deadletters]`` table: how many dead letters it keeps,
    and for how many seconds (``DeadLetterBounds``' defaults where absent)."""

    max: int = key(BOUND_WORDS["max"], lambda v: v >= 1, default=_BOUNDS.max.default)
    ttl: float = key(BOUND_WORDS["ttl"], lambda v: v > 0, default=_BOUNDS.ttl.default)
