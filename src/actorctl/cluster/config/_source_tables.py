"""The keys of a ``[[source]]`` table, and the name its actor goes by.

A data source (docs/sources.md) is read by the task app of the node that
hosts it; the cluster layer only checks the table's keys (``_config``) and,
before ``cluster up`` starts anything, that some node hosts each source
(``_preflight``). The keys of every built-in kind are known here, so that a
misspelt one is refused with the nearest known key; which keys go with which
``kind`` is the task layer's check (``tasks/sources/_source_config.py``).
"""

from __future__ import annotations

from typing import Final

__all__ = ["SOURCE_KEYS", "SOURCE_PREFIX", "SOURCE_REQUIRED", "source_actor"]

#: Keys every source has (what it feeds, how often, how much), then those of
#: the built-in kinds, then ``settings`` (a table for a "module:Class" source).
SOURCE_KEYS: Final = frozenset(
    {"name", "kind", "task", "actor", "handler", "node", "poll", "batch", "window"}
    | {"path", "pattern", "url", "key", "timeout", "database", "table", "columns"}
    | {"settings"}
)
SOURCE_REQUIRED: Final = ("name", "kind")
#: A source named ``NAME`` is the actor ``source.NAME`` on its node.
SOURCE_PREFIX: Final = "source."


def source_actor(name: str) -> str:
    """The name of the actor that reads the source ``name``."""
    return f"{SOURCE_PREFIX}{name}"
