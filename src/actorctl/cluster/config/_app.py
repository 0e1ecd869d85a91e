"""What an application on the runtime declares of cluster.toml.

The runtime reads the tables it knows (``[cluster]``, ``[[node]]``,
``[[router]]``, ``[[supervisor]]``, ``[[boxed]]``, ``[etcd]``) and nothing
else by name. An application built on it (the task layer, say: its
``[[periodic]]``, ``[[source]]`` and ``[[task]]`` tables) declares its own
through a :class:`ClusterApp` (``_config.py``) given to ``load_cluster`` (``_load.py``): the
arrays of tables it reads and their keys (:class:`AppTable`, checked with the
same words as the runtime's own), the roles it holds leases for, the checks
``cluster up`` makes before it starts anything, and what a ``cluster reload``
of its tables changes (:class:`AppReload`). So a misspelt key of an
application's table is named with the nearest known key, as any other is,
while the runtime keeps no word of the application.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import final

import attrs

__all__ = ["AppReload", "AppTable"]


@final
@attrs.frozen
class AppTable:
    """An array of tables ``[[name]]`` that an application reads.

    Attributes:
        name: the tables' key in the file (``periodic`` for ``[[periodic]]``).
        known: the keys each table may have: any other is refused, naming the
            nearest known one.
        required: the keys each table must have.
    """

    name: str
    known: frozenset[str]
    required: tuple[str, ...] = ("name",)


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
