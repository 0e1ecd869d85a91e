"""A small reader for AMQP 1.0 encoded messages: the inbox's fast path.

It reads the sections and primitive types that messages usually carry and
gives up (returns None) on anything else, in which case the caller falls back
to proton's complete decoder. It never guesses. A message signed within a
session in the layout actorctl writes is read by :func:`read_in_session`,
which leaves its signature properties out of the map and gives them apart.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any, Final

from ._auth import HMAC_SHA256, SIG, SIG_ALG, SIG_KEY, SIG_NODE

__all__ = ["Sections", "SessionTail", "read_in_session", "read_message", "session_tail"]

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
    """(properties, application-properties, data body) or None if unsure."""
    if type(data) is not bytes:  # proton's encode gives a bytearray: keys are found by bytes
        data = bytes(data)
    try:
        return _read_message(data)
    except (_Unsupported, IndexError, struct.error, UnicodeDecodeError, ValueError):
        return None
    except TypeError:  # a map key that is a list or a map: not hashable
        return None


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


def _str8(text: str) -> bytes:
    raw = text.encode()
    return b"\xa1" + bytes((len(raw),)) + raw


# The signature that ends the application properties of a message signed
# within a session, as actorctl writes it (``_encoding._session_head``): sig_alg
# hmac-sha256, sig_key and the session id (32 characters), sig and the digest
# (a vbin8 of 32 bytes); then sig_node and a node (``session_tail``).
_IN_SESSION: Final = _str8(SIG_ALG) + _str8(HMAC_SHA256) + _str8(SIG_KEY) + b"\xa1\x20"
_SESSION_ID_AT: Final = len(_IN_SESSION)
_DIGEST_HEAD_AT: Final = _SESSION_ID_AT + 32
_DIGEST_HEAD: Final = _str8(SIG) + b"\xa0\x20"
_DIGEST_AT: Final = _DIGEST_HEAD_AT + len(_DIGEST_HEAD)
_NODE_AT: Final = _DIGEST_AT + 32


#: The ``sig_node`` pair naming one node, and the size of the four signature
#: pairs that end with it (see :func:`session_tail`).
SessionTail = tuple[bytes, int]


def session_tail(node: str) -> SessionTail | None:
    """The ``sig_node`` pair naming ``node`` as it ends the application
    properties of a message signed within a session for it, and the size of the
    signature pairs that end with it (see :func:`read_in_session`); None for a
    name too long for that layout."""
    raw = node.encode()
    if len(raw) > 255:
        return None
    pair = _str8(SIG_NODE) + _str8(node)
    return pair, _NODE_AT + len(pair)


def read_in_session(data: bytes, tail: SessionTail) -> tuple[Sections, str, bytes] | None:
    """A message signed within a session for the node ``tail`` names
    (:func:`session_tail`), in the layout actorctl writes it: its sections (the
    properties padded to ten, the application properties without the four
    signature pairs), its session id and its digest. None if it is not in that
    layout or is read no further here: :func:`read_message` reads it then.

    The signature pairs are matched by their bytes where the sender writes them
    (the map's last four pairs) and never decoded into the map: what is left of
    it is read as :func:`read_message` reads it, and must end where they begin.
    Read from the start, the map's pairs are the ones read here and then these
    four, so the sections and the signature are what the general reader would
    give (a signature key given twice: the last one holds in both)."""
    if type(data) is not bytes or not data.startswith(_PROPERTIES32):
        return None
    node, signature = tail
    try:
        size, count = _U32_PAIR(data, 4)
        start = 8 + size  # the application properties
        if not data.startswith(_APP_PROPERTIES32, start):
            return None
        size, items = _U32_PAIR(data, start + 4)
        end = start + 8 + size  # the data section
        at = end - signature  # the signature pairs
        if (
            items < 8  # keys and values: the four pairs at least
            or at < start + 12
            or data[at : _SESSION_ID_AT + at] != _IN_SESSION
            or data[_DIGEST_HEAD_AT + at : _DIGEST_AT + at] != _DIGEST_HEAD
            or data[_NODE_AT + at : end] != node
            or not data.startswith(_DATA32, end)
            or end + 8 + _U32(data, end + 4)[0] != len(data)
        ):
            return None
        # The properties between the message-id (a str8) and the creation-time
        # (a timestamp) found whole by their bytes (``_middles``), inline (per
        # message); read item by item otherwise.
        properties = middle = None
        if count == 10 and data[12] == 0xA1 and data[start - 9] == 0x83:
            after = 14 + data[13]
            middle = data[after : start - 9]
            if middle in _middles:  # (in and []: no call)
                mid = data[14:after].decode()
                properties = [mid, *_middles[middle], _I64(data, start - 8)[0]]
        if properties is None:
            properties = _properties(data, count, start, middle)
        app, _ = _map(data, start + 12, items - 8, at)
        raw = data[_SESSION_ID_AT + at : _DIGEST_HEAD_AT + at]
        session_id = _ids[raw] if raw in _ids else _decoded(_ids, raw)  # no call (per message)
    except (_Unsupported, IndexError, struct.error, UnicodeDecodeError, ValueError, TypeError):
        return None
    if count < 10:  # the trailing nulls left out
        properties += [None] * (10 - count)
    return (properties, app, data[end + 8 :]), session_id, data[_DIGEST_AT + at : _NODE_AT + at]


# Session ids by their bytes, decoded: bounded, past it they are decoded anew
# (never emptied, as ``_keys``).
_ids: dict[bytes, str] = {}

#: The eight properties between a message-id and a creation-time (user-id, to,
#: subject, reply-to, correlation-id, content-type, content-encoding, expiry),
#: by their bytes, read: a tell's recur from message to message, since its ids
#: and time are at either end (an ask's hold its correlation-id and expiry:
#: never kept). Those of values that cannot change (texts, numbers, nulls) go
#: in at their second sighting (``_middles_once``), bounded and never emptied,
#: as ``_keys``; ``_middles_once`` is emptied when full, as ``_once``. Only a
#: middle of at most ``_MOST_MIDDLE`` bytes is noted or kept: both are filled
#: before a message's signature is checked, so each entry's size is bounded as
#: their count is (a tell's middle is about a hundred bytes).
_middles: dict[bytes, tuple[Any, ...]] = {}
_middles_once: dict[bytes, None] = {}
_MOST_MIDDLE: Final = 512
_FIXED_VALUES: Final = frozenset({type(None), str, int, float, bool, bytes})
_UNREADABLE: Final = (
    _Unsupported,
    IndexError,
    struct.error,
    UnicodeDecodeError,
    ValueError,
    TypeError,
)


def _properties(data: bytes, count: int, end: int, middle: bytes | None) -> list[Any]:
    """The properties list of a message signed within a session (``count``
    items from 12 to ``end``), read item by item; and its ``middle`` (the bytes
    between its message-id and creation-time, None if it has not both), if it
    holds no correlation-id and no expiry (those of a tell), noted for
    ``_middles``, where ``read_in_session`` finds them: at a second sighting,
    read again on their own to the same eight values."""
    properties: list[Any] = _compound(data, 12, count, False, end, _RECURRING_PROPERTIES)[0]
    if middle is None or properties[5] is not None or properties[8] is not None:
        return properties  # an ask's: its correlation-id and expiry are its own
    if len(middle) > _MOST_MIDDLE:
        return properties  # not kept (see _middles)
    if middle not in _middles_once:  # met once: noted
        if len(_middles_once) >= _MAX_KEYS:
            _middles_once.clear()
        _middles_once[middle] = None
    elif len(_middles) < _MAX_KEYS and len(middle) >= 8:
        try:  # eight items that end where the creation-time begins, or none kept
            values, _ = _compound(middle, 0, 8, False, len(middle))
        except _UNREADABLE:
            return properties
        if values == properties[1:9] and {*map(type, values)} <= _FIXED_VALUES:
            _middles[middle] = tuple(values)
    return properties


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
    """``raw`` decoded (UTF-8), and kept in ``cache`` (``_ids``, ``_keys``,
    ``_texts``) while it holds fewer than ``_MAX_KEYS``: a bounded cache,
    never emptied."""
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
