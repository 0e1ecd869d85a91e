"""The reader of a message signed within a session, in the layout actorctl
writes it: the inbox's and the reply link's fast path (issue 30).

Its four signature properties are matched by their bytes where the sender
writes them, never decoded into the application properties; what recurs in
its properties from message to message is found whole by its bytes: a tell's
eight properties between its message-id and its creation-time
(``_middles``), an ask's or a reply's around its correlation-id
(``_around``), and the application properties around a header that repeats
the correlation-id (``_repeats``). Anything it does not read here it leaves (returns None) to
``_amqp.read_message``, the general reader, which gives the same sections.
"""

from __future__ import annotations

import struct
from typing import Any, Final

from ._amqp import (
    _APP_PROPERTIES32,
    _DATA32,
    _I64,
    _MAX_KEYS,
    _PROPERTIES32,
    _RECURRING_PROPERTIES,
    _U32,
    _U32_PAIR,
    Sections,
    _compound,
    _decoded,
    _map,
    _Unsupported,
)
from ._auth import HMAC_SHA256, SIG, SIG_ALG, SIG_KEY, SIG_NODE

__all__ = ["SessionTail", "read_in_session", "session_tail"]


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
    layout or is read no further here: ``_amqp.read_message`` reads it then.

    The signature pairs are matched by their bytes where the sender writes them
    (the map's last four pairs) and never decoded into the map: what is left of
    it is read as ``read_message`` reads it, and must end where they begin.
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
        # message), or, an ask's or a reply's, around its correlation-id
        # (``_around``); read item by item otherwise.
        properties = middle = None
        if count == 10 and data[12] == 0xA1 and data[start - 9] == 0x83:
            after = 14 + data[13]
            middle = data[after : start - 9]
            middles = _middles  # (the dict found in: a full one is replaced)
            if middle in middles:  # (in and []: no call)
                mid = data[14:after].decode()
                properties = [mid, *middles[middle], _I64(data, start - 8)[0]]
            elif _asks:
                properties = _around(data, after, start - 9)
        if properties is None:
            properties = _properties(data, count, start, middle)
        # A header that repeats the correlation-id: the map
        # found around it (``_repeats``), else read pair by pair.
        correlation_id = properties[5] if count > 5 else None  # (padded to ten below)
        app = None
        if _repeats and type(correlation_id) is str:
            app = _repeating(data, start + 12, at, items - 8, correlation_id)
        if app is None:
            app, _ = _map(data, start + 12, items - 8, at)
            if type(correlation_id) is str:
                _note_repeat(data, start + 12, at, items - 8, correlation_id, app)
        raw = data[_SESSION_ID_AT + at : _DIGEST_HEAD_AT + at]
        session_id = _ids[raw] if raw in _ids else _decoded(_ids, raw)  # no call (per message)
    except (_Unsupported, IndexError, struct.error, UnicodeDecodeError, ValueError, TypeError):
        return None
    except RecursionError:  # nested too deep: read_message says so
        return None
    if count < 10:  # the trailing nulls left out
        properties += [None] * (10 - count)
    return (properties, app, data[end + 8 :]), session_id, data[_DIGEST_AT + at : _NODE_AT + at]


# Session ids by their bytes, decoded: bounded, past it they are decoded anew
# (never emptied, as ``_amqp._keys``).
_ids: dict[bytes, str] = {}

#: The eight properties between a message-id and a creation-time (user-id, to,
#: subject, reply-to, correlation-id, content-type, content-encoding, expiry),
#: by their bytes, read: a tell's recur from message to message, since its ids
#: and time are at either end (an ask's hold its correlation-id and expiry:
#: never kept here, see ``_asks``). Those of values that cannot change (texts,
#: numbers, nulls) go in at their second sighting (``_middles_once``); a full
#: one is replaced by a new dict, as ``_amqp._pairs`` (a reader holds the dict
#: it found an entry in), so that entries noted once by a peer's junk never
#: keep the ones in use out for good; ``_middles_once`` is emptied when full,
#: as ``_amqp._once``. Only a middle of at most ``_MOST_MIDDLE`` bytes is
#: noted or kept: both are filled before a message's signature is checked, so
#: each entry's size is bounded as their count is (a tell's middle is about a
#: hundred bytes).
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

#: What an ask's or a reply's middle holds around its correlation-id, by the
#: bytes before it (user-id, to, subject, reply-to: its head, found by their
#: lengths, ``_correlation_at``): its head and its size, the four read and
#: the two after it (content-type, content-encoding), the bytes of those two
#: (its tail) and their size, and whether an expiry (a timestamp) or a null
#: follows them (the sizes kept, not measured per message). An
#: ask's ids and times are its own, the rest recurs (an actor's address, subject and
#: caller). Kept as ``_middles`` is: at a head's second sighting
#: (``_asks_once``), if head and tail are at most ``_MOST_MIDDLE`` bytes
#: together, of values that cannot change; at most ``_MAX_KEYS`` of them, a
#: full one replaced by a new dict. ``_last_ask`` holds the one found last (a worker's asks are
#: of a few kinds), tried first by its bytes alone.
_Around = tuple[bytes, int, tuple[Any, ...], bytes, int, bool]
_asks: dict[bytes, _Around] = {}
_asks_once: dict[bytes, None] = {}
_last_ask: list[_Around | None] = [None]


def _correlation_at(data: bytes, after: int, stop: int) -> int:
    """Where the correlation-id (a str8) begins in the middle of an ask or a
    reply, from ``after`` (the end of its message-id) to ``stop`` (its
    creation-time): past a null user-id and the to, subject and reply-to
    (each a str8, a sym8 or a null); -1 if they are not those."""
    if data[after] != 0x40:
        return -1
    at = after + 1
    for _ in range(3):
        code = data[at]
        if code == 0xA1 or code == 0xA3:
            at += 2 + data[at + 1]
        elif code == 0x40:
            at += 1
        else:
            return -1
    return at if at < stop and data[at] == 0xA1 else -1


def _around(data: bytes, after: int, stop: int) -> list[Any] | None:
    """The ten properties of an ask or a reply whose head is in ``_asks``,
    its middle (``after`` to ``stop``, its creation-time) read as its head,
    its correlation-id, its tail and its expiry, each where the one before
    ends, and ending at ``stop``: what ``_compound`` reads item by item from
    those bytes (a head read whole ends where it ends whatever follows it).
    None if it is not one known (it is read item by item then).

    Raises:
        UnicodeDecodeError: an id that is not UTF-8 (the general reader
            refuses it too).
    """
    known = _last_ask[0]
    if known is not None and data.startswith(known[0], after) and data[after + known[1]] == 0xA1:
        at = after + known[1]
    else:
        at = _correlation_at(data, after, stop)
        if at < 0:
            return None
        head = data[after:at]
        asks = _asks  # (the dict found in: a full one is replaced)
        if head not in asks:  # (in and []: no call)
            return None
        known = _last_ask[0] = asks[head]
    _, _, (user, to, subject, reply_to, content_type, encoding), tail, size, timed = known
    begin = at + 2
    end = begin + data[at + 1]
    if not data.startswith(tail, end):
        return None
    at = end + size
    if timed:
        if at + 9 != stop or data[at] != 0x83:
            return None
        expiry = _I64(data, at + 1)[0]
    elif at + 1 != stop or data[at] != 0x40:
        return None
    else:
        expiry = None
    return [
        data[14:after].decode(),
        user,
        to,
        subject,
        reply_to,
        data[begin:end].decode(),
        content_type,
        encoding,
        expiry,
        _I64(data, stop + 1)[0],
    ]


def _properties(data: bytes, count: int, end: int, middle: bytes | None) -> list[Any]:
    """The properties list of a message signed within a session (``count``
    items from 12 to ``end``), read item by item; and its ``middle`` (the bytes
    between its message-id and creation-time, None if it has not both): if it
    holds no correlation-id and no expiry (a tell's), noted for ``_middles``,
    where ``read_in_session`` finds them: at a second sighting, read again on
    their own to the same eight values; else (an ask's, a reply's) noted for
    ``_asks`` (``_note_ask``)."""
    global _middles
    properties: list[Any] = _compound(data, 12, count, False, end, _RECURRING_PROPERTIES)[0]
    if middle is None or len(middle) > _MOST_MIDDLE:
        return properties  # not kept (see _middles)
    if properties[5] is not None or properties[8] is not None:
        _note_ask(data, end - 9 - len(middle), end - 9, properties)
        return properties
    if middle not in _middles_once:  # met once: noted
        if len(_middles_once) >= _MAX_KEYS:
            _middles_once.clear()
        _middles_once[middle] = None
    elif len(middle) >= 8:
        try:  # eight items that end where the creation-time begins, or none kept
            values, _ = _compound(middle, 0, 8, False, len(middle))
        except _UNREADABLE:
            return properties
        if values == properties[1:9] and {*map(type, values)} <= _FIXED_VALUES:
            if len(_middles) >= _MAX_KEYS:
                _middles = {}  # full: a new one (see _middles)
            _middles[middle] = tuple(values)
    return properties


def _note_ask(data: bytes, after: int, stop: int, properties: list[Any]) -> None:
    """Note the head of an ask or a reply (its middle, from ``after`` to
    ``stop``, its creation-time, of at most ``_MOST_MIDDLE`` bytes, read item
    by item into ``properties``); at its second sighting keep it in
    ``_asks``, if its head and its tail read on their own to the same values,
    and its correlation-id is a str8 and its expiry a timestamp or a null, as
    ``_around`` finds them."""
    global _asks
    at = _correlation_at(data, after, stop)
    if at < 0:
        return
    head = data[after:at]
    if head in _asks:
        return  # kept (with another tail or expiry: read item by item)
    if head not in _asks_once:  # met once: noted
        if len(_asks_once) >= _MAX_KEYS:
            _asks_once.clear()
        _asks_once[head] = None
        return
    timed = properties[8] is not None
    if type(properties[5]) is not str or data[stop - 9 if timed else stop - 1] != (
        0x83 if timed else 0x40
    ):
        return
    end = at + 2 + data[at + 1]
    tail = data[end : stop - 9 if timed else stop - 1]
    try:  # four items, and two, that end where the next begins, or none kept
        before, _ = _compound(head, 0, 4, False, len(head))
        later, _ = _compound(tail, 0, 2, False, len(tail))
    except _UNREADABLE:
        return
    if (
        before == properties[1:5]
        and later == properties[6:8]
        and {*map(type, before), *map(type, later)} <= _FIXED_VALUES
    ):
        if len(_asks) >= _MAX_KEYS:
            _asks = {}  # full: a new one (see _asks)
        _asks[head] = (head, len(head), (*before, *later), tail, len(tail), timed)


#: The application properties (less the signature's) of asks and replies
#: with a header that repeats their correlation-id, by their
#: bytes before its value (the pairs before it and its key: the head): how
#: many items the map holds, the header's key, the bytes after its value
#: (the tail) and their size, and the map read (that header's value, the
#: first one's). Kept
#: as ``_asks`` is: at a head's second sighting (``_repeats_once``), if head
#: and tail are at most ``_MOST_MIDDLE`` bytes together, of values that
#: cannot change; at most ``_MAX_KEYS`` of them, a full one replaced by a
#: new dict. A map longer than any kept (``_MOST_REPEATING``) is not searched
#: for its correlation-id: a peer's long map costs no search of its bytes.
_repeats: dict[bytes, tuple[int, str, bytes, int, dict[Any, Any]]] = {}
_repeats_once: dict[bytes, None] = {}
_MOST_REPEATING: Final = _MOST_MIDDLE + 2 + 255


def _repeating(
    data: bytes, begin: int, end: int, count: int, correlation_id: str
) -> dict[Any, Any] | None:
    """The map of ``count`` items from ``begin`` to ``end`` whose head is in
    ``_repeats``: its bytes are that head, the correlation-id (a str8) and
    that tail, so it is that map with the correlation-id as that header's
    value (what ``_map`` reads of those bytes). None if not (it is read pair
    by pair then)."""
    if end - begin > _MOST_REPEATING:
        return None  # longer than any kept: not searched
    raw = correlation_id.encode()
    at = data.find(raw, begin, end)
    if at < begin + 2:
        return None
    head = data[begin : at - 2]
    repeats = _repeats  # (the dict found in: a full one is replaced)
    if head not in repeats:  # (in and []: no call)
        return None
    items, key, tail, size, read = repeats[head]
    found = data[at - 1]  # the size of the str8 the text is found in: the text's alone
    after = at + found
    if (
        items != count
        or data[at - 2] != 0xA1
        or found != len(raw)
        or after + size != end
        or not data.startswith(tail, after)
    ):
        return None
    app = read.copy()
    app[key] = correlation_id  # in its place, as _map would set it
    return app


def _note_repeat(
    data: bytes, begin: int, end: int, count: int, correlation_id: str, app: dict[Any, Any]
) -> None:
    """Note the head of a map (``count`` items from ``begin`` to ``end``, read
    as ``app``) with a header that repeats ``correlation_id``; at its second
    sighting keep it in ``_repeats`` if, with that value emptied, the map's
    bytes read to the same keys in the same order and the same values but
    that header's (so that the value is that header's last, and nothing
    else depends on its bytes)."""
    global _repeats
    if end - begin > _MOST_REPEATING:
        return
    raw = correlation_id.encode()
    at = data.find(raw, begin, end)
    if at < begin + 2 or data[at - 2] != 0xA1 or data[at - 1] != len(raw):
        return
    head, tail = data[begin : at - 2], data[at + len(raw) : end]
    if len(head) + len(tail) > _MOST_MIDDLE or head in _repeats:
        return
    if head not in _repeats_once:  # met once: noted
        if len(_repeats_once) >= _MAX_KEYS:
            _repeats_once.clear()
        _repeats_once[head] = None
        return
    emptied = head + b"\xa1\x00" + tail
    try:
        read, _ = _map(emptied, 0, count, len(emptied))
    except _UNREADABLE:
        return
    changed = [key for key in app if read.get(key) != app[key]]
    if (
        list(read) == list(app)
        and len(changed) == 1
        and app[changed[0]] == correlation_id
        and read[changed[0]] == ""
        and {*map(type, app.values())} <= _FIXED_VALUES
    ):
        if len(_repeats) >= _MAX_KEYS:
            _repeats = {}  # full: a new one (see _repeats)
        _repeats[head] = (count, changed[0], tail, len(tail), dict(app))
