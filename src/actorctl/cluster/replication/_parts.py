"""The wire form of shipped store writes (:mod:`._shipper` sends them,
:mod:`._replica` takes them): a batch cut into parts that fit a message, and
each write as JSON values."""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from typing import Any, Final

from ...store import Write

__all__ = ["PART_BYTES", "decode_writes", "encode_writes", "split_writes"]

#: Raw bytes of values in one shipped part, at most (a message's bound is 1 MiB,
#: and base64 grows values by a third).
PART_BYTES: Final = 256 * 1024


def split_writes(writes: Sequence[Write]) -> list[list[Write]]:
    """``writes`` in runs of at most ``PART_BYTES`` of values (a bigger value alone)."""
    parts: list[list[Write]] = []
    size = math.inf
    for write in writes:
        length = len(write[0]) + len(write[1]) + len(write[2] or b"")
        if size + length > PART_BYTES:
            parts.append([])
            size = 0
        parts[-1].append(write)
        size += length
    return parts


def encode_writes(writes: Sequence[Write]) -> list[Any]:
    """Writes as JSON values (a value in base64)."""
    return [
        [table, key, None if value is None else base64.b64encode(value).decode(), expires]
        for table, key, value, expires in writes
    ]


def decode_writes(wire: object) -> list[Write]:
    """What :func:`encode_writes` made, back.

    Raises:
        ValueError: not writes.
    """
    if not isinstance(wire, list):
        raise ValueError(f"expected a list of writes, got {type(wire).__name__}")
    writes: list[Write] = []
    for item in wire:
        if not (isinstance(item, list) and len(item) == 4):
            raise ValueError(f"expected [table, key, value, expires], got {item!r:.80}")
        table, key, value, expires = item
        if not (isinstance(table, str) and isinstance(key, str)):
            raise ValueError(f"a write's table and key are text, got {item!r:.80}")
        if expires is not None and not isinstance(expires, int | float):
            raise ValueError(f"a write's expires is seconds or null, got {expires!r:.40}")
        data = None if value is None else base64.b64decode(str(value), validate=True)
        writes.append((table, key, data, None if expires is None else float(expires)))
    return writes
