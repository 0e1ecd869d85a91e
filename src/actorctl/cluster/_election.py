"""Leadership of a role, elected through etcd and fenced by its revision.

A role (the scheduler, the event hub, the Controller's own role on several
hosts) is held by whoever holds its key in etcd. A candidate takes a fresh
lease and creates the key under it in one transaction, "create if absent"; the
candidate that created it leads, the others watch the key and try again when
it is deleted: when the leader resigns (revokes its lease), or stops renewing
it and etcd lets the lease expire. This is etcd's own election recipe
(``concurrency.Election``), written for trio over :class:`EtcdClient`.

**Fencing.** The key's create revision is the leadership's **fence**: it grows
with every new leader, so a write tagged with it, or a transaction guarded by
:meth:`Leadership.guard`, tells the current leader's acts from a former one's.

**Stopping in time.** A leader renews its lease every third of its ttl, and
counts the lease from when it *sent* the last renewal that succeeded, on its
own clock: etcd counts from a later moment, so the leader's count runs out
first. It considers itself deposed ``margin`` seconds before its count runs
out (the margin covers clocks that run at slightly different rates, and the
time the leader's work takes to stop): at that moment, or when etcd says its
lease has ended, the block it leads in is cancelled and
:class:`Deposed` is raised. So a leader cut off from etcd stops before etcd
could grant its role to another; :meth:`Leadership.still_leader` asks etcd
itself, for the act that must never be done twice.

Not yet used by the runtime, which elects the scheduler with
:mod:`._role_lease` (the same key-under-a-lease recipe, asked again on each of
the beat's renewals instead of a block that waits): this block form suits a
singleton that runs only while it leads.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import final

import trio

from .._errors import ActorctlError, ConfigError
from .._log import log
from ._etcd import EtcdClient
from ._etcd_data import Compare, KeyValue
from ._etcd_wire import EtcdCompacted, EtcdError

__all__ = ["Deposed", "Leadership", "open_leadership"]


class Deposed(ActorctlError):
    """A leader lost its role: its lease could not be renewed in time, or ended.

    The block it led in has been cancelled; campaign again to lead again.
    """


@final
class Leadership:
    """The role held by this candidate, inside :func:`open_leadership`'s block.

    Attributes:
        key: the role's key in etcd.
        lease: the lease the key lives under.
        fence: the leadership revision (the key's create revision): greater
            than every former leader's.
        ttl: the lease's ttl, seconds.
        margin: how many seconds before its lease could end it stops leading.
    """

    def __init__(
        self, client: EtcdClient, held: KeyValue, *, ttl: int, margin: float, since: float
    ) -> None:
        self.key = held.key
        self.lease = held.lease
        self.fence = held.create_revision
        self.ttl = ttl
        self.margin = margin
        self._client = client
        self._renewed = since  # when the last renewal that succeeded was sent
        self._ended: str | None = None

    @property
    def _deadline(self) -> float:
        return self._renewed + self.ttl - self.margin

    @property
    def deposed(self) -> bool:
        """Whether this leader must stop acting now (a local check, no etcd call)."""
        return self._ended is not None or trio.current_time() >= self._deadline

    def guard(self) -> Compare:
        """A compare that holds only while this leadership lasts: put it in a
        :meth:`EtcdClient.txn` to write only as the leader."""
        return Compare.created(self.key, self.fence)

    async def still_leader(self) -> bool:
        """Ask etcd whether this candidate still leads: call it before an
        irreversible act. False when deposed, when the key is no longer this
        leadership's, and when etcd cannot say so in time (then: do not act)."""
        if self.deposed:
            return False
        with trio.move_on_at(self._deadline):
            try:
                answer = await self._client.txn([self.guard()], [])
            except EtcdError:
                return False
            return answer.succeeded and not self.deposed
        return False

    async def keep(self) -> None:
        """Renew the lease every third of its ttl until cancelled.

        Raises:
            Deposed: no renewal succeeded before the deadline, or the lease ended.
        """
        retry = self.ttl / 12
        due = self._renewed + self.ttl / 3
        failure = "none"
        while True:
            with trio.move_on_at(self._deadline) as scope:
                await trio.sleep_until(due)
                sent = trio.current_time()
                try:
                    left = await self._client.keepalive(self.lease)
                except EtcdError as exc:
                    failure = str(exc)
                    log("actorctl:leader:keepalive-failed", role=self.key, error=failure)
                    due = trio.current_time() + retry
                    continue
                if left <= 0:
                    raise self._depose(f"etcd says lease {self.lease:x} has ended")
                self._renewed = sent
                due = sent + self.ttl / 3
            if scope.cancelled_caught:
                raise self._depose(
                    f"no renewal of lease {self.lease:x} succeeded for "
                    f"{self.ttl - self.margin:g} s (last error: {failure})"
                )

    def _depose(self, why: str) -> Deposed:
        self._ended = why
        log("actorctl:leader:deposed", role=self.key, fence=self.fence, reason=why)
        return Deposed(
            f"no longer the leader of {self.key!r} (fence {self.fence}): {why}; "
            "what it was doing has been cancelled"
        )


@asynccontextmanager
async def open_leadership(
    client: EtcdClient,
    key: str,
    value: bytes | str,
    *,
    ttl: int,
    margin: float | None = None,
) -> AsyncIterator[Leadership]:
    """Campaign for ``key`` (waiting while another leads), lead for the
    duration of the block, then resign (the lease is revoked: the next
    candidate takes over at once).

    Args:
        client: the etcd client.
        key: the role's key, e.g. ``/actorctl/CLUSTER/leader/scheduler``.
        value: what the key says while this candidate leads (its node's name).
        ttl: the lease's ttl, whole seconds: how long a dead leader holds the role.
        margin: seconds before the lease could end that the leader stops
            (default a quarter of ``ttl``); less than two thirds of ``ttl``.

    Raises:
        Deposed: (in an exception group, from the block) the role was lost.
        EtcdUnavailable: etcd could not be reached while campaigning.
        ConfigError: a ttl or margin out of range.
    """
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 1:
        raise ConfigError(f"leadership of {key!r}: ttl must be whole seconds >= 1, got {ttl!r}")
    margin = ttl / 4 if margin is None else margin
    if not 0 < margin < ttl * 2 / 3:
        raise ConfigError(
            f"leadership of {key!r}: margin must be in (0, {ttl * 2 / 3:g}) s "
            f"for a ttl of {ttl} s, got {margin!r}"
        )
    lease, held, since = await _campaign(client, key, value, ttl)
    leadership = Leadership(client, held, ttl=ttl, margin=margin, since=since)
    log("actorctl:leader:elected", role=key, fence=leadership.fence, lease=f"{lease:x}")
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(leadership.keep)
            yield leadership
            nursery.cancel_scope.cancel(reason="the leader's block ended")
    finally:
        await _revoke(client, lease)


async def _campaign(
    client: EtcdClient, key: str, value: bytes | str, ttl: int
) -> tuple[int, KeyValue, float]:
    """Wait until this candidate creates ``key``: its lease, the key, and when
    the lease's grant was sent (its count starts there)."""
    while True:
        since = trio.current_time()
        lease = await client.grant(ttl)
        try:
            won, held = await client.put_if_absent(key, value, lease=lease)
        except BaseException:
            await _revoke(client, lease)
            raise
        if won:
            return lease, held, since
        await _revoke(client, lease)  # a fresh one for the next try: this one would run out
        # From the revision after the holder's last write, so that a delete
        # between the transaction and the watch is seen too.
        try:
            async with client.watch(key, start_revision=held.mod_revision + 1) as watch:
                async for event in watch:
                    if event.kind == "delete":
                        break
        except EtcdCompacted:
            pass  # history compacted since the transaction: try it again


async def _revoke(client: EtcdClient, lease: int) -> None:
    """Revoke ``lease`` even when cancelled, within the client's timeout; if
    etcd cannot be reached, the lease ends by itself after its ttl."""
    with trio.CancelScope(shield=True), trio.move_on_after(client.timeout):
        try:
            await client.revoke(lease)
        except EtcdError as exc:
            log("actorctl:leader:revoke-failed", lease=f"{lease:x}", error=str(exc))
