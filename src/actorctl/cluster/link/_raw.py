"""proton's C engine, called directly on the paths every message takes.

proton's Python classes wrap each C object on every access (an ``Event``
wraps six of them), which is the largest pure-Python cost per message after
socket I/O. On the hot paths (deliveries, flow) the node calls the C functions
through proton's own cffi module instead, with raw pointers; everything else
uses the ordinary classes. A raw pointer is used only while its connection is
open, or while the node holds a reference it took with ``incref``.
"""

from __future__ import annotations

from typing import Any, Final

import cproton
from cproton_ffi import ffi, lib

__all__ = [
    "ACCEPTED",
    "DELIVERY",
    "LINK_FLOW",
    "MODIFIED",
    "NULL",
    "REJECTED",
    "RELEASED",
    "lib",
    "recv",
    "remote_condition",
    "send",
    "set_condition",
]

NULL: Final = ffi.NULL
DELIVERY: Final[int] = lib.PN_DELIVERY
LINK_FLOW: Final[int] = lib.PN_LINK_FLOW
ACCEPTED: Final[int] = lib.PN_ACCEPTED
REJECTED: Final[int] = lib.PN_REJECTED
MODIFIED: Final[int] = lib.PN_MODIFIED
RELEASED: Final[int] = lib.PN_RELEASED

_from_buffer = ffi.from_buffer
_link_recv = lib.pn_link_recv
_link_send = lib.pn_link_send
_link_advance = lib.pn_link_advance
_delivery = lib.pn_delivery


def recv(link: Any, size: int) -> bytes:
    """Read one whole delivery's bytes from a receiver and advance past it."""
    buffer = bytearray(size)
    got = _link_recv(link, _from_buffer(buffer), size)
    _link_advance(link)
    if got == size:  # the usual case: one copy, not a slice's and then its bytes'
        return bytes(buffer)
    return bytes(buffer[:got]) if got >= 0 else b""


def send(link: Any, tag: bytes, data: bytes | bytearray) -> Any:
    """Start a delivery on a sender, write it whole, advance; return the delivery.

    ``bytes`` go to C as they are (cffi hands a ``char *`` argument a pointer
    into them; ``pn_link_send`` copies what it is given and writes nothing
    there): one call fewer per message than ``from_buffer``, which a
    ``bytearray`` still needs. (The tag goes in a struct, where cffi takes
    only a pointer.)"""
    delivery = _delivery(link, (len(tag), _from_buffer(tag)))
    _link_send(link, data if type(data) is bytes else _from_buffer(data), len(data))
    _link_advance(link)
    return delivery


def remote_condition(delivery: Any) -> tuple[str | None, str | None]:
    """The error condition the peer put on its outcome for a delivery."""
    condition = lib.pn_disposition_condition(lib.pn_delivery_remote(delivery))
    if condition == NULL or not lib.pn_condition_is_set(condition):
        return None, None
    return cproton.pn_condition_get_name(condition), cproton.pn_condition_get_description(condition)


def set_condition(delivery: Any, name: str, description: str | None) -> None:
    condition = lib.pn_disposition_condition(lib.pn_delivery_local(delivery))
    cproton.pn_condition_set_name(condition, name)
    if description:
        cproton.pn_condition_set_description(condition, description)
