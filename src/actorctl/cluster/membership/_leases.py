"""Role leases: how a cluster on one host has exactly one holder of a role
(an application's singleton, such as the task layer's one beat).

The Controller keeps a :class:`LeaseTable` and grants leases through its
``lease`` handler. A lease is held for ``ttl`` seconds from when the Controller
granted it; its holder renews it (every third of the TTL) to keep it. Another
candidate is refused while the lease runs and granted it once it has expired.
Each new holder gets a **fencing number** one higher than the last, so that
what a former holder did can be told from what the current one does.

A holder measures its lease on its own clock from when it *sent* the request,
so that the time a grant spends on the wire only shortens the lease it counts
on: it never acts on a lease the Controller considers expired (clocks of one
host run at the same rate; a holder also keeps a margin).

A lease carries a small ``state`` (JSON values), handed to the next holder
(the task layer's beat reports its last firings with every renewal, and a
beat that takes over starts from there: docs/scheduling.md). Leases live in the
Controller's memory: a Controller that restarts grants anew, after the TTL.
Across hosts there is no Controller: etcd grants the role instead
(:mod:`._role_lease`; docs/design: no home-made consensus).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, final

import attrs

from ..._errors import ActorctlError

__all__ = ["MAX_LEASE_TTL", "LeaseTable"]

#: The longest lease granted, seconds.
MAX_LEASE_TTL: Final = 3600.0


@attrs.define
class _Lease:
    holder: str
    fence: int
    expires: float
    state: dict[str, Any] = attrs.field(factory=dict)


@final
class LeaseTable:
    """The leases of a cluster's roles.

    Args:
        clock: monotonic seconds (the Controller's ``trio.current_time``).
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._leases: dict[str, _Lease] = {}
        self._fences: dict[str, int] = {}

    def request(
        self, role: str, holder: str, ttl: float, state: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Acquire or renew ``role`` for ``holder`` for ``ttl`` seconds.

        ``state`` (the holder's report, when it holds the role) replaces the
        role's state. Returns ``granted`` (bool), ``fence``, ``holder`` (who
        holds it now), ``ttl`` and ``state`` (the role's state: for a new holder,
        what the last one reported).

        Raises:
            ActorctlError: a TTL that is not a positive number of seconds.
        """
        number = isinstance(ttl, int | float) and not isinstance(ttl, bool)
        if not number or not 0 < ttl <= MAX_LEASE_TTL:
            raise ActorctlError(
                f"lease ttl: expected seconds in (0, {MAX_LEASE_TTL:g}], got {ttl!r}"
            )
        now = self._clock()
        lease = self._leases.get(role)
        if lease is not None and lease.holder != holder and lease.expires > now:
            return self._answer(lease, granted=False, ttl=lease.expires - now)
        if lease is None or lease.holder != holder or lease.expires <= now:
            fence = self._fences.get(role, 0) + 1
            self._fences[role] = fence
            kept = dict(lease.state) if lease is not None else {}
            lease = self._leases[role] = _Lease(holder, fence, now + ttl, kept)
        else:
            lease.expires = now + ttl
            if state is not None:
                lease.state = dict(state)
        return self._answer(lease, granted=True, ttl=float(ttl))

    def holder(self, role: str) -> str | None:
        """Who holds ``role`` now (None: nobody, or the lease expired)."""
        lease = self._leases.get(role)
        if lease is None or lease.expires <= self._clock():
            return None
        return lease.holder

    def last_holder(self, role: str) -> str | None:
        """Who held ``role`` last (expired or not)."""
        lease = self._leases.get(role)
        return None if lease is None else lease.holder

    @staticmethod
    def _answer(lease: _Lease, *, granted: bool, ttl: float) -> dict[str, Any]:
        return {
            "granted": granted,
            "fence": lease.fence,
            "holder": lease.holder,
            "ttl": ttl,
            "state": dict(lease.state),
        }
