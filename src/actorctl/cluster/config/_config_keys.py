"""The error for a key of cluster.toml that nothing reads.

Kept apart from ``_config.py`` so that every reader of a table (the file's own
tables there, an actors factory's node settings in ``_hosting.py``, the
``[etcd]`` table in ``_etcd_config.py``) refuses an unknown key the same way:
naming the key, the nearest known one or where an older format's key moved.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from pathlib import Path

from ..._errors import ConfigError

__all__ = ["unknown_key"]


def unknown_key(
    path: Path | None,
    key: str,
    value: object,
    known: Collection[str],
    why: str = "",
    moved: Mapping[str, str] | None = None,
) -> ConfigError:
    """The error for a key that nothing reads (``key`` with its table, e.g. ``node[1].pool``):
    where the key moved (a key of an older format, in ``moved``: an application
    says where its own went), else which key was meant if one of ``known`` is
    close, else ``why`` and the keys the table may have."""
    name = key.rpartition(".")[2]
    close = difflib.get_close_matches(name, sorted(known), n=1)
    if moved is not None and key in moved:
        fix = moved[key]
    elif close:
        fix = f"did you mean {close[0]!r}?"
    elif why:
        fix = f"{why}; the keys it may have: {sorted(known)}"
    else:
        fix = f"use one of {sorted(known)}"
    where = f"{path}: " if path is not None else ""
    return ConfigError(f"{where}no such key {key!r} (= {value!r}): {fix}")
