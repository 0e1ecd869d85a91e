"""A role's lease in etcd: the scheduler lease of a cluster that spans hosts.

On one host the Controller grants role leases (:mod:`._leases`). Across hosts
there is no one Controller, so the role's key in etcd is the lease: each
candidate (a beat on each node that hosts the task app) asks
:meth:`EtcdRoleLease.request` every third of the ttl; the first to create the
role's key under a lease of its own holds the role until it stops renewing
that lease, and the others are told who holds it and try again on their next
request, or at once when their watch of the key (:meth:`EtcdRoleLease.follow`)
sees it deleted (the holder's lease ended or was revoked). This is etcd's
election recipe without its blocking campaign: a beat already has its own
renewal loop, shared with the Controller's lease.

**Fencing.** The role key's create revision is the holder's fence: every new
holder's is greater. :meth:`EtcdRoleLease.record` writes the role's state
(the beat's last firings) in a transaction that holds only while the key is
still the one this holder created; a holder calls it *before* every
irreversible act (a firing) and does not act when it fails. So a holder cut
off from etcd (a partition, a stalled process) can never act after another
took the role over: its write fails, whatever its own clock says.

**State.** The role's state lives in etcd beside the key, so it survives the
loss of the host that wrote it, and a new holder starts from it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any, Final, NoReturn, final

import trio

from .._errors import ActorctlError, ConfigError
from .._log import log
from ._etcd import EtcdClient
from ._etcd_data import Compare, KeyValue, Put
from ._etcd_wire import EtcdError
from ._node_record import nodes_prefix

__all__ = ["EtcdRoleLease", "follow_holder", "role_key", "role_state_key"]

#: Seconds a resignation may take (etcd lets an unrevoked lease end by itself).
_RESIGN_TIMEOUT: Final = 2.0
#: Seconds before a broken watch of a role's holder is set up again (doubling).
_WATCH_RETRY: Final = (0.1, 5.0)


def role_key(cluster: str, role: str) -> str:
    """The key whose holder holds ``role`` in ``cluster``."""
    return f"{_cluster_prefix(cluster)}roles/{role}/holder"


def role_state_key(cluster: str, role: str) -> str:
    """The key of ``role``'s state (what its next holder starts from)."""
    return f"{_cluster_prefix(cluster)}roles/{role}/state"


def _cluster_prefix(cluster: str) -> str:
    # nodes_prefix checks the name and ends in "nodes/": the cluster's own prefix is its parent
    return nodes_prefix(cluster).removesuffix("nodes/")


@final
class EtcdRoleLease:
    """The lease of one role of ``cluster``, for one candidate, kept in etcd.

    Args:
        client: the etcd client.
        cluster: the cluster's name.
        role: the role (``scheduler``).
    """

    def __init__(self, client: EtcdClient, cluster: str, role: str) -> None:
        self.role = role
        self.cluster = cluster
        self.key = role_key(cluster, role)
        self.state_key = role_state_key(cluster, role)
        self._client = client
        self._lease = 0  # the lease this candidate's key lives under (0: it holds none)
        self.fence = 0  # the key's create revision while it holds the role

    @property
    def where(self) -> str:
        """Where the role is granted: for log lines and errors."""
        return f"etcd {', '.join(self._client.endpoints)}"

    async def request(self, holder: str, ttl: float) -> dict[str, Any]:
        """Take or renew the role for ``holder``, as the Controller's ``lease``
        handler answers: ``granted``, ``fence``, ``holder`` (who holds it) and,
        when it is newly granted, ``state`` (what the last holder recorded).

        Raises:
            ActorctlError: etcd could not be reached (the candidate keeps what
                it had until its own count runs out).
        """
        try:
            if self._lease:
                left = await self._client.keepalive(self._lease)
                if left > 0:
                    return {"granted": True, "fence": self.fence, "holder": holder}
                log("actorctl:role:lease-ended", role=self.role, lease=f"{self._lease:x}")
                self._lease, self.fence = 0, 0
            return await self._campaign(holder, ttl)
        except EtcdError as exc:
            raise ActorctlError(f"role {self.role!r}: {exc}") from None

    async def _campaign(self, holder: str, ttl: float) -> dict[str, Any]:
        held = await self._client.get(self.key)
        if held is not None:  # a read, not a lease granted and revoked: no raft write
            return self._refused(held)
        lease = await self._client.grant(check_role_ttl(ttl))
        try:
            won, held = await self._client.put_if_absent(self.key, holder, lease=lease)
        except BaseException:
            await self._revoke(lease)
            raise
        if not won:
            await self._revoke(lease)
            return self._refused(held)
        try:  # what the last holder recorded: a holder that cannot read it resigns
            stored = await self._client.get(self.state_key)
        except BaseException:
            await self._revoke(lease)
            raise
        self._lease, self.fence = lease, held.create_revision
        state: dict[str, Any] = {}
        if stored is not None:
            try:
                loaded = json.loads(stored.value)
            except ValueError:
                loaded = None
            if isinstance(loaded, dict):
                state = loaded
            else:
                log("actorctl:role:state-unreadable", role=self.role, key=self.state_key)
        return {"granted": True, "fence": self.fence, "holder": holder, "state": state}

    @staticmethod
    def _refused(held: KeyValue) -> dict[str, Any]:
        return {
            "granted": False,
            "fence": held.create_revision,
            "holder": held.value.decode(errors="replace"),
        }

    async def record(self, state: Mapping[str, Any]) -> bool:
        """Write ``state`` as the role's, only while this candidate still holds
        it (fenced): call it before each irreversible act, and act only when
        it returns True. False when it holds no lease, when another holds the
        role now, and when etcd cannot be reached (then: do not act)."""
        if not self._lease:
            return False
        try:
            answer = await self._client.txn(
                [Compare.created(self.key, self.fence), Compare.under_lease(self.key, self._lease)],
                [Put(self.state_key, json.dumps(dict(state)).encode())],
            )
        except EtcdError as exc:
            log("actorctl:role:record-failed", role=self.role, fence=self.fence, error=str(exc))
            return False
        if not answer.succeeded:
            log("actorctl:role:fenced-off", role=self.role, fence=self.fence)
            self._lease, self.fence = 0, 0
        return answer.succeeded

    async def holds(self) -> bool:
        """Whether this candidate holds the role now, as etcd says (a
        linearizable read of the key's fence and lease: no write). False when
        it holds no lease, when another holds the role, and when etcd cannot be
        reached: whoever asks before an act it may do only as the holder
        (confirming what a standby did not copy) does not act then."""
        if not self._lease:
            return False
        try:
            answer = await self._client.txn(
                [Compare.created(self.key, self.fence), Compare.under_lease(self.key, self._lease)],
                [],
            )
        except EtcdError as exc:
            log("actorctl:role:check-failed", role=self.role, fence=self.fence, error=str(exc))
            return False
        return answer.succeeded

    async def follow(self, tell: Callable[[str | None], None]) -> NoReturn:
        """Tell ``tell`` who holds the role now and at every change (None: the
        key is gone, its holder's lease ended or was revoked), as
        :func:`follow_holder` does: a candidate that asks again at once when
        told None takes the role as soon as etcd frees it, not at its next
        renewal (a third of the ttl later)."""
        await follow_holder(self._client, self.cluster, self.role, tell)

    async def resign(self) -> None:
        """Give the role up now (its lease revoked: the next candidate takes it
        at once), within a bound even when cancelled."""
        lease, self._lease, self.fence = self._lease, 0, 0
        if lease:
            await self._revoke(lease)

    async def _revoke(self, lease: int) -> None:
        with trio.CancelScope(shield=True), trio.move_on_after(_RESIGN_TIMEOUT):
            try:
                await self._client.revoke(lease)
            except EtcdError as exc:
                log("actorctl:role:revoke-failed", role=self.role, error=str(exc))


def check_role_ttl(ttl: float) -> int:
    """``ttl`` as etcd's whole seconds.

    Raises:
        ConfigError: not a positive number of seconds.
    """
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not ttl > 0:
        raise ConfigError(f"role lease ttl: expected positive seconds, got {ttl!r}")
    return max(1, math.ceil(ttl))


async def follow_holder(
    client: EtcdClient, cluster: str, role: str, tell: Callable[[str | None], None]
) -> NoReturn:
    """Tell ``tell`` who holds ``role`` now (None: nobody), and again at every
    change, until cancelled. etcd not answering, or answering what cannot be
    read: the watch is set up again, waiting longer each time (up to 5 s),
    and ``tell`` is not called meanwhile (whoever follows keeps the holder it
    was last told). Raises nothing but cancellation."""
    key = role_key(cluster, role)
    first, longest = _WATCH_RETRY
    delay = first
    while True:
        since = trio.current_time()
        try:
            async with client.watch(key) as watch:
                # Read once the watch is set up: a change in between is seen twice, never missed.
                held = await client.get(key)
                tell(None if held is None else held.value.decode(errors="replace"))
                async for event in watch:
                    put = event.kind == "put"
                    tell(event.value.decode(errors="replace") if put else None)
        except Exception as exc:  # any failure: logged, and the watch set up again
            if trio.current_time() - since > longest:
                delay = first  # it had been following for a while: a new break
            if delay == first:  # said once a break, not at every retry
                log("actorctl:role:watch-broken", role=role, error=f"{type(exc).__name__}: {exc}")
            await trio.sleep(delay)
            delay = min(delay * 2, longest)
