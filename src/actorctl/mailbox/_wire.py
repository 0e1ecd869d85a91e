"""The AMQP 1.0 encodings that actorctl's message encoders write themselves
(docs/protocol.md): section descriptors, compound and size headers, strings
and binaries. ``_encoding.py`` writes a message from them, and ``_shapes.py``
the parts of a message that recur (a message's shape) once.
"""

from __future__ import annotations

import struct
from typing import Final

from ._auth import SIG_NODE
from ._envelope import CONTENT_TYPE_JSON, KINDS

__all__ = [
    "APP_PROPERTIES",
    "DATA",
    "FALSE",
    "JSON_SYMBOL",
    "KIND_LANG",
    "LANG",
    "LENGTHS",
    "NULL",
    "PROPERTIES",
    "SIG_NODE_KEY",
    "TRUE",
    "binary",
    "pack_double",
    "pack_list32",
    "pack_long",
    "pack_size32",
    "string",
]

# Section descriptors (0x00, smallulong code) and the 32-bit compound constructors.
PROPERTIES: Final = b"\x00\x53\x73\xd0"
APP_PROPERTIES: Final = b"\x00\x53\x74\xd1"
DATA: Final = b"\x00\x53\x75\xb0"
NULL: Final = b"\x40"
TRUE: Final = b"\x41"
FALSE: Final = b"\x42"
pack_list32: Final = struct.Struct(">II").pack
pack_size32: Final = struct.Struct(">I").pack
pack_long: Final = struct.Struct(">q").pack
pack_double: Final = struct.Struct(">d").pack

#: One byte's worth of lengths, each as its byte (a vbin8's or a str8's size).
LENGTHS: Final = [bytes((size,)) for size in range(256)]


def string(text: str) -> bytes:
    """``text`` as an AMQP string (str8, or str32 past 255 bytes)."""
    raw = text.encode()
    if (size := len(raw)) < 256:
        return b"\xa1" + LENGTHS[size] + raw
    return b"\xb1" + pack_size32(size) + raw


def binary(raw: bytes) -> bytes:
    """``raw`` as an AMQP binary (vbin8, or vbin32 past 255 bytes)."""
    if len(raw) < 256:
        return b"\xa0" + bytes((len(raw),)) + raw
    return b"\xb0" + pack_size32(len(raw)) + raw


#: The content type every actorctl message has, as the symbol on the wire.
JSON_SYMBOL: Final = b"\xa3" + bytes((len(CONTENT_TYPE_JSON),)) + CONTENT_TYPE_JSON.encode()
#: The ``lang`` application property, key and value.
LANG: Final = string("lang") + string("py")
#: The ``sig_node`` application property's key.
SIG_NODE_KEY: Final = string(SIG_NODE)
#: The ``kind`` and ``lang`` application properties of each kind of message.
KIND_LANG: Final = {kind: string("kind") + string(kind) + LANG for kind in KINDS}
