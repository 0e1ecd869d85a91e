"""A trio client of etcd v3: keys, leases, transactions and watches.

This is what a cluster that spans hosts agrees through (docs/design,
"Beyond one machine": membership, leases and the single active scheduler come
from etcd, no home-made consensus). Built on it: a node's registration under
a lease (:mod:`actorctl.etcd._membership`) and the directory of the
registered nodes, cached and watched (:mod:`actorctl.etcd._etcd_directory`),
which a node started by ``actorctl host up`` uses (:mod:`actorctl.cluster.membership._member`:
pools' routers follow it); and the role leases of the singletons
(:mod:`actorctl.etcd._role_lease`). On one host (``cluster
up``) the Controller's :class:`~actorctl.cluster.membership._leases.LeaseTable` and
cluster.toml's addresses serve, and need no etcd.

It talks to etcd's JSON gateway over HTTP (:mod:`._etcd_wire` says why and
how), which every etcd since 3.4 serves on its client port: Debian's
etcd-server (3.4) is the etcd the tests run. It is not a general etcd client:
no auth tokens, no cluster or maintenance calls, no paging of large ranges.

Every call is bounded by the client's ``timeout`` (every endpoint tried within
it) and raises :class:`EtcdUnavailable`, naming each endpoint and why, when no
endpoint answered; a watch waits for changes as long as its caller lets it,
but not on a dead connection (:mod:`._etcd_watch`). A call whose answer was
lost may have been applied: every call here is safe to repeat (a put writes
the same value again, a delete or a revoke of what is gone does nothing,
:meth:`EtcdClient.put_if_absent` recognises its own earlier write by its lease).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, final

from .._errors import ConfigError
from ._etcd_data import (
    Compare,
    Get,
    KeyValue,
    Op,
    Put,
    Snapshot,
    TxnResult,
    check_key,
    key_range,
    key_value,
    number,
    revision_of,
)
from ._etcd_watch import Watch
from ._etcd_wire import EtcdError, Wire, tls_context

__all__ = ["DEFAULT_TIMEOUT", "EtcdClient"]

#: Seconds a call may take, every endpoint tried, before it raises EtcdUnavailable.
DEFAULT_TIMEOUT: Final = 5.0
#: Seconds a watch may hear nothing before it checks its connection by opening another.
DEFAULT_WATCH_IDLE: Final = 30.0
#: The longest lease granted, seconds (etcd's own maximum is about 9e10).
MAX_LEASE_TTL: Final = 86400
_NOT_FOUND: Final = 5  # gRPC's "not found": a lease that is gone


@final
class EtcdClient:
    """A client of the etcd cluster at ``endpoints``.

    Args:
        endpoints: client URLs of etcd members, e.g. ``["http://10.0.0.1:2379"]``;
            ``https`` ones are checked against ``ca_file`` (the system's CAs when None).
        timeout: seconds each call may take, every endpoint tried.
        connect_timeout: seconds one endpoint may take to accept a connection
            (default: a third of ``timeout``, so that three members get their turn).
        ca_file, cert_file, key_file: TLS files (a client certificate when etcd
            runs with ``--client-cert-auth``).
        user, password: an etcd user, when etcd's auth is enabled: the client
            gets a token for it, and a new one when etcd no longer takes it.

    Raises:
        ConfigError: an endpoint that is not an http(s) URL, a timeout that is
            not positive, TLS files that cannot be read.
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        connect_timeout: float | None = None,
        ca_file: Path | None = None,
        cert_file: Path | None = None,
        key_file: Path | None = None,
        user: str | None = None,
        password: str | None = None,
    ) -> None:
        for name, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
            if value is not None and not (isinstance(value, int | float) and value > 0):
                raise ConfigError(f"etcd {name}: expected positive seconds, got {value!r}")
        https = any(str(url).startswith("https:") for url in endpoints)
        context = tls_context(ca_file, cert_file, key_file) if https else None
        self.timeout = float(timeout)
        self._wire = Wire(
            endpoints,
            connect_timeout=connect_timeout or self.timeout / 3,
            ssl_context=context,
            credentials=None if user is None or password is None else (user, password),
        )

    @property
    def endpoints(self) -> tuple[str, ...]:
        return tuple(e.url for e in self._wire.endpoints)

    async def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._wire.call(path, body, self.timeout)

    # -- keys --------------------------------------------------------------------------

    async def put(self, key: str, value: bytes | str, *, lease: int = 0) -> int:
        """Set ``key`` to ``value`` (deleted with ``lease`` when it ends, if not 0).

        Returns the revision of the write.

        Raises:
            EtcdError: e.g. a lease that does not exist (any more).
        """
        body = Put(key, _bytes(value), lease).to_json()["request_put"]
        return revision_of(await self._call("/v3/kv/put", body))

    async def get(self, key: str) -> KeyValue | None:
        """``key`` as etcd holds it now, or None."""
        answer = await self._call("/v3/kv/range", key_range(key, prefix=False))
        kvs = answer.get("kvs", ())
        return key_value(kvs[0]) if kvs else None

    async def get_prefix(self, prefix: str) -> Snapshot:
        """Every key under ``prefix`` (sorted by key), and the revision they were read at."""
        answer = await self._call("/v3/kv/range", key_range(prefix, prefix=True))
        kvs = tuple(key_value(kv) for kv in answer.get("kvs", ()))
        return Snapshot(revision_of(answer), kvs)

    async def delete(self, key: str, *, prefix: bool = False) -> int:
        """Delete ``key`` (every key under it, with ``prefix``); returns how many were."""
        answer = await self._call("/v3/kv/deleterange", key_range(key, prefix=prefix))
        return number(answer, "deleted")

    async def txn(
        self, compare: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> TxnResult:
        """Run ``success`` if every compare holds, else ``failure``, atomically.

        This is how a role's holder writes only while it holds the role: the
        compare is that the role's key still has its create revision (its fence,
        :meth:`EtcdRoleLease.record <actorctl.etcd._role_lease.EtcdRoleLease.record>`).
        """
        body = {
            "compare": [c.to_json() for c in compare],
            "success": [op.to_json() for op in success],
            "failure": [op.to_json() for op in failure],
        }
        answer = await self._call("/v3/kv/txn", body)
        succeeded = bool(answer.get("succeeded", False))
        ops = success if succeeded else failure
        responses = answer.get("responses", ())
        ranges = tuple(
            tuple(key_value(kv) for kv in response.get("response_range", {}).get("kvs", ()))
            for op, response in zip(ops, responses, strict=True)
            if isinstance(op, Get)
        )
        return TxnResult(succeeded, revision_of(answer), ranges)

    async def put_if_absent(
        self, key: str, value: bytes | str, *, lease: int = 0
    ) -> tuple[bool, KeyValue]:
        """Create ``key`` with ``value`` unless it exists (one transaction).

        Returns whether this call created it, and the key as it now is: the
        one just made, or the one that was there (its holder). A key already
        holding ``value`` under the same non-zero ``lease`` counts as created
        here: it is this caller's own write, whose answer was lost and which
        was tried again.
        """
        data = _bytes(value)
        answer = await self.txn([Compare.absent(key)], [Put(key, data, lease)], [Get(key)])
        if answer.succeeded:
            return True, KeyValue(key, data, answer.revision, answer.revision, 1, lease)
        held = answer.ranges[0][0]
        return bool(lease) and held.lease == lease and held.value == data, held

    # -- leases ------------------------------------------------------------------------

    async def grant(self, ttl: int) -> int:
        """A new lease of ``ttl`` seconds (etcd may round a very short one up); its id.

        Raises:
            ConfigError: a ttl that is not a whole number of seconds in 1..86400.
        """
        if isinstance(ttl, bool) or not isinstance(ttl, int) or not 1 <= ttl <= MAX_LEASE_TTL:
            raise ConfigError(
                f"etcd lease ttl: expected whole seconds in 1..{MAX_LEASE_TTL}, got {ttl!r}"
            )
        answer = await self._call("/v3/lease/grant", {"TTL": str(ttl)})
        if answer.get("error"):
            raise EtcdError(f"etcd granted no lease: {answer['error']}")
        return number(answer, "ID")

    async def keepalive(self, lease: int) -> int:
        """Renew ``lease`` for its whole ttl; the seconds it now has (0: it is gone).

        A lease measured from when this call was *sent* is the holder's safe bound.
        """
        answer = await self._call("/v3/lease/keepalive", {"ID": str(lease)})
        return number(answer.get("result", {}), "TTL")

    async def revoke(self, lease: int) -> None:
        """End ``lease`` now: every key under it is deleted. A lease already gone is fine."""
        try:
            await self._call("/v3/lease/revoke", {"ID": str(lease)})
        except EtcdError as exc:
            if exc.code != _NOT_FOUND:
                raise

    async def time_to_live(self, lease: int) -> int:
        """The seconds ``lease`` has left (0: gone), without renewing it."""
        answer = await self._call("/v3/lease/timetolive", {"ID": str(lease)})
        return max(number(answer, "TTL"), 0)  # a lease that is gone says -1

    # -- watches -----------------------------------------------------------------------

    def watch(
        self,
        key: str,
        *,
        prefix: bool = False,
        start_revision: int | None = None,
        idle: float = DEFAULT_WATCH_IDLE,
    ) -> Watch:
        """The changes of ``key`` (or of every key under it, with ``prefix``) from
        ``start_revision`` on (None: from now), as an async context manager
        and iterator: see :class:`~actorctl.etcd._etcd_watch.Watch`."""
        if not prefix:
            check_key(key)
        if start_revision is not None and start_revision < 1:
            raise ConfigError(f"etcd watch: start_revision must be >= 1, got {start_revision}")
        if not (isinstance(idle, int | float) and math.isfinite(idle) and idle > 0):
            raise ConfigError(f"etcd watch: idle must be positive seconds, got {idle!r}")
        return Watch(
            self._wire,
            key,
            prefix=prefix,
            start_revision=start_revision,
            idle=float(idle),
            timeout=self.timeout,
        )

    def watch_prefix(
        self, prefix: str, start_revision: int | None = None, *, idle: float = DEFAULT_WATCH_IDLE
    ) -> Watch:
        """:meth:`watch` of every key under ``prefix``."""
        return self.watch(prefix, prefix=True, start_revision=start_revision, idle=idle)


def _bytes(value: bytes | str) -> bytes:
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise ConfigError(f"etcd value: expected bytes or str, got {type(value).__name__}")
