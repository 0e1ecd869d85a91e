"""A small reader for AMQP 1.0 encoded messages: the inbox's fast path.

It reads the sections and primitive types that messages usually carry and
gives up (returns None) on anything else, in which case the caller falls back
to proton's complete decoder. It never guesses. A message that nests lists or
maps deeper than its stack reads is refused (``WireFormatError``), not given
up on: proton's decoder would recurse as deep. A message signed within a
session in the layout actorctl writes is read by ``_session_read``, with
this module's readers, its signature properties left out of the map.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any, Final

from .._errors import WireFormatError

__all__ = ["Sections", "read_message"]

_U8 = struct.Struct(">B").unpack_from
_I8 = struct.Struct(">b").unpack_from
_U16 = struct.Struct(">H").unpack_from
_I16 = struct.Struct(">h").unpack_from
_U32 = struct.Struct(">I").unpack_from
_I32 = struct.Struct(">i").unpack_from
_U64 = struct.Struct(">Q").unpack_from
_I64 = struct.Struct(">q").unpack_from
_F32 = struct.Struct(">f").unpack_from
_F64 = struct.Struct(">d").unpack_from

_FIXED: dict[int, tuple[Any, int]] = {
    0x50: (_U8, 1), 0x51: (_I8, 1), 0x52: (_U8, 1), 0x53: (_U8, 1), 0x54: (_I8, 1),
    0x55: (_I8, 1), 0x60: (_U16, 2), 0x61: (_I16, 2), 0x70: (_U32, 4), 0x71: (_I32, 4),
    0x80: (_U64, 8), 0x81: (_I64, 8), 0x72: (_F32, 4), 0x82: (_F64, 8), 0x83: (_I64, 8),
}  # fmt: skip
_CONSTANTS: dict[int, Any] = {0x40: None, 0x41: True, 0x42: False, 0x43: 0, 0x44: 0, 0x45: []}
_IGNORED_SECTIONS = frozenset({0x70, 0x71, 0x72, 0x78})  # header, annotations, footer

Sections = tuple[list[Any], dict[Any, Any], bytes]


class _Unsupported(Exception):
    pass


def read_message(data: bytes) -> Sections | None:
    """(properties, application-properties, data body) or None if unsure.

    Raises:
        WireFormatError: its lists or maps nest too deep to be read.
    """
    if type(data) is not bytes:  # proton's encode gives a bytearray: keys are found by bytes
        data = bytes(data)
    try:
        return _read_message(data)
    except (_Unsupported, IndexError, struct.error, UnicodeDecodeError, ValueError):
        return None
    except TypeError:  # a map key that is a list or a map: not hashable
        return None
    except RecursionError:  # lists in lists (a few bytes a level) past Python's stack
        raise WireFormatError(TOO_DEEP) from None


#: Why a message whose lists or maps nest past what the reader's stack holds is
#: refused (no message actorctl or a client of its protocol writes nests so).
TOO_DEEP: Final = (
    "its lists or maps nest too deep to be read (hundreds of levels): no message of "
    "docs/protocol.md nests more than a few"
)


_U32_PAIR = struct.Struct(">II").unpack_from
# The three sections as actorctl writes them: a list32 of properties, a map32
# of application properties and a vbin32 of data, each behind its descriptor.
_PROPERTIES32 = b"\x00\x53\x73\xd0"
_APP_PROPERTIES32 = b"\x00\x53\x74\xd1"
_DATA32 = b"\x00\x53\x75\xb0"


def _read_message(data: bytes) -> Sections | None:
    # What actorctl writes, in its order, read straight through (per message);
    # anything else (another order, other forms, more sections) goes to
    # _read_sections, which reads these the same way too.
    if data.startswith(_PROPERTIES32):
        size, count = _U32_PAIR(data, 4)
        properties, pos = _compound(data, 12, count, False, 8 + size, _RECURRING_PROPERTIES)
        if data.startswith(_APP_PROPERTIES32, pos):
            size, count = _U32_PAIR(data, pos + 4)
            app, pos = _map(data, pos + 12, count, pos + 8 + size)
            if data.startswith(_DATA32, pos):
                start = pos + 8
                if start + _U32(data, pos + 4)[0] == len(data):
                    return properties, app, data[start:]
    return _read_sections(data)


def _read_sections(data: bytes) -> Sections | None:
    pos, end = 0, len(data)
    properties: list[Any] = []
    app: dict[Any, Any] = {}
    body: bytes | None = None
    while pos < end:
        if data[pos] != 0x00 or data[pos + 1] != 0x53:
            return None
        code, constructor = data[pos + 2], data[pos + 3]
        # The sections every message has, in the forms actorctl writes them (a
        # list32 of properties, a map32 of application properties, a vbin32 of
        # data), are read without _read's dispatch; any other form goes there.
        if code == 0x73 and constructor == 0xD0:
            size, count = _U32(data, pos + 4)[0], _U32(data, pos + 8)[0]
            properties, pos = _compound(
                data, pos + 12, count, False, pos + 8 + size, _RECURRING_PROPERTIES
            )
        elif code == 0x74 and constructor == 0xD1:
            size, count = _U32(data, pos + 4)[0], _U32(data, pos + 8)[0]
            app, pos = _map(data, pos + 12, count, pos + 8 + size)
        elif code == 0x75 and constructor == 0xB0 and body is None:
            start = pos + 8
            pos = start + _U32(data, pos + 4)[0]
            if pos > end:
                return None  # truncated
            body = bytes(data[start:pos])
        else:
            value, pos = _read(data, pos + 3)
            if code == 0x73 and isinstance(value, list):
                properties = value
            elif code == 0x74 and isinstance(value, dict):
                app = value
            elif code == 0x75 and body is None and isinstance(value, bytes):
                body = value
            elif code not in _IGNORED_SECTIONS:
                return None  # amqp-value, amqp-sequence, several data sections: proton's job
    if pos != end or body is None:
        return None
    return properties, app, body


def _read(data: bytes, pos: int) -> tuple[Any, int]:
    code = data[pos]
    pos += 1
    fixed = _FIXED.get(code)
    if fixed is not None:
        unpack, size = fixed
        return unpack(data, pos)[0], pos + size
    if code in _CONSTANTS:
        value = _CONSTANTS[code]
        return ([] if code == 0x45 else value), pos
    if code == 0x56:
        return data[pos] != 0, pos + 1
    if code in (0xA0, 0xA1, 0xA3):
        size = data[pos]
        pos += 1
    elif code in (0xB0, 0xB1, 0xB3):
        size = _U32(data, pos)[0]
        pos += 4
    elif code == 0x98:
        return str(uuid.UUID(bytes=bytes(data[pos : pos + 16]))), pos + 16
    elif code in (0xC0, 0xC1):
        return _compound(data, pos + 2, data[pos + 1], code == 0xC1, pos + 1 + data[pos])
    elif code in (0xD0, 0xD1):
        size, count = _U32(data, pos)[0], _U32(data, pos + 4)[0]
        return _compound(data, pos + 8, count, code == 0xD1, pos + 4 + size)
    else:
        raise _Unsupported(code)
    end = pos + size
    if end > len(data):
        raise _Unsupported("truncated")
    raw = bytes(data[pos:end])
    return (raw if code in (0xA0, 0xB0) else raw.decode("utf-8")), end


#: The properties that recur from message to message (to, subject, reply-to,
#: content-type), by their place in the properties list: their text is found
#: by its bytes in ``_texts``, not decoded anew. The ids (message-id,
#: correlation-id) are unique: decoded, never kept.
_RECURRING_PROPERTIES: Final = frozenset({2, 3, 4, 6})
_NO_PLACES: Final[frozenset[int]] = frozenset()


def _compound(
    data: bytes,
    pos: int,
    count: int,
    is_map: bool,
    end: int,
    recurring: frozenset[int] = _NO_PLACES,
) -> tuple[Any, int]:
    # The values messages carry most (str8, sym8, null, timestamp, vbin8) are
    # read inline: this runs for every property of every message. A text at a
    # place of ``recurring`` (_RECURRING_PROPERTIES, for the properties) is
    # looked up by its bytes first.
    if is_map:
        return _map(data, pos, count, end)
    # Each item is set in its place (no append call per item), in a list made
    # at its size: a count the message's bytes left cannot hold (each item
    # takes one at least) is refused first, never allocated (the sizes in the
    # message may be forged too, so it is the bytes themselves that bound it).
    if count > len(data) - pos:
        raise _Unsupported("more items than bytes")
    items: list[Any] = [None] * count
    texts = _texts
    for at in range(count):
        code = data[pos]
        if code == 0xA1 or code == 0xA3:
            stop = pos + 2 + data[pos + 1]
            if at in recurring:  # (a membership test and an index: no call)
                raw = data[pos + 2 : stop]
                items[at] = texts[raw] if raw in texts else _decoded(texts, raw)
            else:
                items[at] = data[pos + 2 : stop].decode()
            pos = stop
        elif code == 0x40:
            pos += 1  # null: the item is None already
        elif code == 0x83:
            items[at] = _I64(data, pos + 1)[0]
            pos += 9
        elif code == 0xA0:
            stop = pos + 2 + data[pos + 1]
            items[at] = data[pos + 2 : stop]  # data is bytes: a slice is a copy
            pos = stop
        else:
            items[at], pos = _read(data, pos)
    if pos != end:
        raise _Unsupported("size mismatch")
    return items, pos


# Map keys by their UTF-8 bytes, decoded: bounded, past it they are decoded
# anew (never emptied: a key found by ``in`` is still there at ``[]``, whatever
# another thread reads meanwhile).
_keys: dict[bytes, str] = {}
_MAX_KEYS = 4096
# The text pairs that recur (kind, lang, a pool, the signature's algorithm,
# session and node), by their bytes as written (both constructors and sizes):
# the key and value, decoded. A pair goes in at its second sighting (``_once``
# holds those met once), so that unique values (task ids) never fill it; each
# is bounded. A full ``_pairs`` is replaced by a new dict, never emptied: a
# reader holds the dict it began with, so a pair it found by ``in`` is still
# there at ``[]``, whatever another thread reads meanwhile.
_pairs: dict[bytes, tuple[str, str]] = {}
_once: dict[bytes, None] = {}  # a dict: noting a pair is no call
#: How many pairs were noted in ``_once`` since it was last emptied (at least
#: its size): counted, not measured, so that noting one is no call.
_noted: Final = [0]


# The recurring properties' texts (_RECURRING_PROPERTIES) by their UTF-8
# bytes, decoded: bounded, past it they are decoded anew (never emptied: a
# text found by ``in`` is still there at ``[]``, whatever another thread reads
# meanwhile).
_texts: dict[bytes, str] = {}


def _decoded(cache: dict[bytes, str], raw: bytes) -> str:
    """``raw`` decoded (UTF-8), and kept in ``cache`` (``_keys``, ``_texts``,
    ``_session_read._ids``) while it holds fewer than ``_MAX_KEYS``: a bounded
    cache, never emptied."""
    text = raw.decode("utf-8")
    if len(cache) < _MAX_KEYS:
        cache[raw] = text
    return text


def _pair(pair: bytes, key: str, value: str) -> None:
    """Cache a text pair met before (see ``_pairs``). (``_map`` notes one met
    the first time itself.)"""
    global _pairs
    if len(_pairs) >= _MAX_KEYS:
        _pairs = {}  # a new one: see _pairs
    _pairs[pair] = (key, value)


def _forget_once() -> None:
    """Empty ``_once`` (it noted ``_MAX_KEYS`` pairs)."""
    _once.clear()
    _noted[0] = 0


def _map(data: bytes, pos: int, count: int, end: int) -> tuple[dict[Any, Any], int]:
    """A map's pairs straight into a dict (the application properties of every
    message: a signed one has ten): keys and values as in _compound, inline.
    A pair of texts that recurs is found whole by its bytes in ``_pairs``; any
    other key is decoded once, then found by its bytes in ``_keys``."""
    if count % 2:
        raise _Unsupported("odd map")
    result: dict[Any, Any] = {}
    keys, pairs, once = _keys, _pairs, _once
    key: Any
    value: Any
    for _ in range(count // 2):
        code = data[pos]
        if code == 0xA3 or code == 0xA1:  # keys are symbols or strings, as a rule
            stop = pos + 2 + data[pos + 1]
            code = data[stop]
            if code == 0xA1 or code == 0xA3:  # and so are most values
                after = stop + 2 + data[stop + 1]
                pair = data[pos:after]
                if pair in pairs:  # ``in`` and ``[]``: no call (per pair)
                    key, value = pairs[pair]
                else:
                    raw = data[pos + 2 : stop]
                    key = keys[raw] if raw in keys else _decoded(keys, raw)
                    value = data[stop + 2 : after].decode()
                    if after > end:
                        raise _Unsupported("truncated")
                    if pair in once:  # its second sighting: cached now
                        _pair(pair, key, value)
                    else:  # met the first time (a unique value, an id): noted, with no call
                        once[pair] = None
                        _noted[0] += 1
                        if _noted[0] >= _MAX_KEYS:
                            _forget_once()
                result[key] = value
                pos = after
                continue
            raw = data[pos + 2 : stop]
            key = keys[raw] if raw in keys else _decoded(keys, raw)
            pos = stop
        else:
            key, pos = _read(data, pos)
        code = data[pos]
        if code == 0xA1 or code == 0xA3:
            stop = pos + 2 + data[pos + 1]
            value = data[pos + 2 : stop].decode()
            pos = stop
        elif code == 0xA0:
            stop = pos + 2 + data[pos + 1]
            value = data[pos + 2 : stop]  # data is bytes: a slice is a copy
            pos = stop
        elif code == 0x40:
            value = None
            pos += 1
        elif code == 0x81:  # a long: retries, and the like
            value = _I64(data, pos + 1)[0]
            pos += 9
        else:
            value, pos = _read(data, pos)
        result[key] = value  # a key given twice: the last one holds, as dict(pairs)
    if pos != end:
        raise _Unsupported("size mismatch")
    return result, pos
