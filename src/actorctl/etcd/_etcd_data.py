"""What the etcd client hands out and takes in: keys and values, compares and
operations of a transaction, watch events; and their JSON form on etcd's gateway.

The gateway speaks proto3 JSON: bytes (keys, values) are base64, 64-bit numbers
(revisions, lease ids) are strings, and a field at its default value (0, false,
empty, the first enum member) is left out: a put event has no ``type``, a
failed transaction no ``succeeded``, an expired lease's keepalive no ``TTL``.
The helpers here read every field with its default, so that absence is zero.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, Literal, final

import attrs

from .._errors import ConfigError

__all__ = [
    "Compare",
    "Delete",
    "Get",
    "KeyValue",
    "Op",
    "Put",
    "Snapshot",
    "TxnResult",
    "WatchEvent",
]

CompareTarget = Literal["CREATE", "MOD", "VERSION", "VALUE", "LEASE"]
CompareResult = Literal["EQUAL", "GREATER", "LESS", "NOT_EQUAL"]


@attrs.frozen
class KeyValue:
    """A key as etcd holds it.

    Attributes:
        create_revision: the revision that created the key (0: it does not
            exist); a leader's fencing token is its role key's.
        mod_revision: the revision of its last change.
        version: how many times it was written since it was created.
        lease: the lease it lives under (0: none).
    """

    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int = 1
    lease: int = 0


@attrs.frozen
class Snapshot:
    """The keys under a prefix, as of ``revision``: watch from ``revision + 1``
    to see every change after it."""

    revision: int
    kvs: tuple[KeyValue, ...]


@final
@attrs.frozen
class Compare:
    """One condition of a transaction: ``target`` of ``key`` compared with ``value``.

    Build it with a class method: :meth:`absent`, :meth:`created`,
    :meth:`modified`, :meth:`under_lease`, :meth:`holds`.
    """

    key: str
    target: CompareTarget
    result: CompareResult
    value: int | bytes

    @classmethod
    def absent(cls, key: str) -> Compare:
        """``key`` does not exist."""
        return cls(key, "CREATE", "EQUAL", 0)

    @classmethod
    def created(cls, key: str, revision: int) -> Compare:
        """``key`` exists and was created at ``revision`` (it is still the same key)."""
        return cls(key, "CREATE", "EQUAL", revision)

    @classmethod
    def modified(cls, key: str, revision: int) -> Compare:
        """``key`` was last changed at ``revision`` (compare-and-swap)."""
        return cls(key, "MOD", "EQUAL", revision)

    @classmethod
    def under_lease(cls, key: str, lease: int) -> Compare:
        """``key`` lives under ``lease``."""
        return cls(key, "LEASE", "EQUAL", lease)

    @classmethod
    def holds(cls, key: str, value: bytes) -> Compare:
        """``key`` holds ``value``."""
        return cls(key, "VALUE", "EQUAL", value)

    def to_json(self) -> dict[str, Any]:
        check_key(self.key)
        field = {
            "CREATE": "create_revision",
            "MOD": "mod_revision",
            "VERSION": "version",
            "VALUE": "value",
            "LEASE": "lease",
        }[self.target]
        value = b64(self.value) if isinstance(self.value, bytes) else str(self.value)
        return {"key": b64(self.key), "target": self.target, "result": self.result, field: value}


@attrs.frozen
class Put:
    """Set ``key`` to ``value`` (under ``lease``, when not 0)."""

    key: str
    value: bytes
    lease: int = 0

    def to_json(self) -> dict[str, Any]:
        check_key(self.key)
        body = {"key": b64(self.key), "value": b64(self.value)}
        return {"request_put": body | ({"lease": str(self.lease)} if self.lease else {})}


@attrs.frozen
class Delete:
    """Delete ``key`` (every key under it, with ``prefix``)."""

    key: str
    prefix: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"request_delete_range": key_range(self.key, prefix=self.prefix)}


@attrs.frozen
class Get:
    """Read ``key`` (every key under it, with ``prefix``)."""

    key: str
    prefix: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"request_range": key_range(self.key, prefix=self.prefix)}


Op = Put | Delete | Get


@attrs.frozen
class TxnResult:
    """What a transaction did.

    Attributes:
        succeeded: every compare held (the ``success`` operations ran), or not
            (the ``failure`` ones did).
        revision: the store's revision after it.
        ranges: what each :class:`Get` of the branch that ran read, in order.
    """

    succeeded: bool
    revision: int
    ranges: tuple[tuple[KeyValue, ...], ...]


@attrs.frozen
class WatchEvent:
    """A change seen by a watch: ``kind`` is ``put`` or ``delete`` (a deleted
    key's value is empty, its ``mod_revision`` the revision of the delete)."""

    kind: Literal["put", "delete"]
    key: str
    value: bytes
    mod_revision: int
    lease: int = 0


def b64(data: str | bytes) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode("ascii")


def unb64(data: str) -> bytes:
    return base64.b64decode(data)


def check_key(key: str) -> None:
    """Raises:
    ConfigError: an empty key, or one that is not a str."""
    if not isinstance(key, str) or not key:
        raise ConfigError(f"etcd key: expected a non-empty str, got {key!r}")


def key_range(key: str, *, prefix: bool) -> dict[str, str]:
    """The ``key``/``range_end`` pair for one key, or for every key under ``key``."""
    if not prefix:
        check_key(key)
        return {"key": b64(key)}
    raw = key.encode()
    # The range end of a prefix is the prefix with its last byte raised by one
    # (trailing 0xff bytes dropped first); "\0" means every key.
    stripped = raw.rstrip(b"\xff")
    end = stripped[:-1] + bytes([stripped[-1] + 1]) if stripped else b"\0"
    return {"key": b64(raw or b"\0"), "range_end": b64(end)}


def number(message: Mapping[str, Any], name: str) -> int:
    """A 64-bit field (a string in proto3 JSON; absent: 0)."""
    return int(message.get(name, 0) or 0)


def revision_of(message: Mapping[str, Any]) -> int:
    """The store's revision in an answer's header."""
    return number(message.get("header", {}), "revision")


def key_value(kv: Mapping[str, Any]) -> KeyValue:
    return KeyValue(
        key=unb64(kv.get("key", "")).decode(errors="replace"),
        value=unb64(kv.get("value", "")),
        create_revision=number(kv, "create_revision"),
        mod_revision=number(kv, "mod_revision"),
        version=number(kv, "version"),
        lease=number(kv, "lease"),
    )


def watch_event(event: Mapping[str, Any]) -> WatchEvent:
    kv = key_value(event.get("kv", {}))
    kind: Literal["put", "delete"] = "delete" if event.get("type") == "DELETE" else "put"
    return WatchEvent(kind, kv.key, kv.value, kv.mod_revision, kv.lease)
