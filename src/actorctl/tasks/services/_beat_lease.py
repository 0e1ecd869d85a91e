"""The beat's scheduler lease: what lets one beat of a cluster fire.

**One beat fires in a cluster.** With a lease grantor (the Controller, under
``cluster up``) the beat fires only while it holds the ``scheduler`` lease
(``cluster/membership/_leases.py``), which its :class:`BeatLease` keeps: it renews it
every third of the TTL, counts it from when it sent the request, on its own
clock, is checked before every firing with a margin, and lets the lease go
when it cannot renew (the beat stops firing once the lease runs out). Every
renewal reports the beat's last firings to the grantor (those its store
holds: committed), and a renewal follows each firing at once; a beat that
takes the lease over starts from what the last holder reported (and its own
store). A node with no grantor (in-process nodes, tests) fires without a
lease.

**Across hosts** the grantor is the scheduler role's lease in etcd
(``etcd/_role_lease.py``): the same renewals, with the etcd ttl; what the beat
records there before each firing is the beat's own (``_beat.py``). A beat
that does not hold the role watches its key and asks at once when etcd
deletes it (the holder's lease ended), so a lost holder's role moves when its
lease ends in etcd, not up to a third of the ttl later.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Final, final

import trio

from ..._errors import ActorctlError, ConfigError
from ..._log import log
from ...actors import Actor
from ...etcd import EtcdRoleLease
from ..protocol._protocol import SCHEDULER_ROLE

__all__ = ["LEASE_TTL", "BeatLease"]

#: Seconds a scheduler lease lasts unless renewed.
LEASE_TTL: Final = 30.0


@final
class BeatLease:
    """The scheduler lease of one beat: asked for, renewed, let go.

    Args:
        grantor: the address of the lease grantor (the Controller), or the
            scheduler role's lease in etcd; None: it holds no lease, and the
            beat fires without one.
        ttl: seconds a lease lasts unless renewed.
        actor: the beat that owns it: the role is held as its address, and the
            Controller is asked through its node.
        firings: the beat's last firings that its store holds (committed),
            reported to the Controller at each renewal.
        resume: called when it takes the lease, with what the last holder
            reported (the beat fires from there).
        wake: called after each renewal (the beat's timer looks again).
    """

    def __init__(
        self,
        grantor: str | EtcdRoleLease | None,
        ttl: float,
        *,
        actor: Actor,
        firings: Callable[[], Mapping[str, float]],
        resume: Callable[[dict[str, Any]], None],
        wake: Callable[[], None],
    ) -> None:
        if not ttl > 0:
            raise ConfigError(f"beat lease_ttl: expected seconds > 0, got {ttl!r}")
        self.address = grantor if isinstance(grantor, str) else None
        self.role = grantor if isinstance(grantor, EtcdRoleLease) else None
        self.ttl = float(ttl)
        self.margin = self.ttl / 10
        #: The fencing number of the lease it last took.
        self.fence = 0
        self._actor = actor
        self._firings = firings
        self._resume = resume
        self._wake = wake
        self._valid_until = -math.inf  # trio time until which its lease holds
        self._report = trio.Event()
        self._standby = False
        self._unreached = False  # the grantor did not answer, and that was said
        self._held = trio.Event()  # set while it holds a lease (or has no grantor)

    @property
    def leased(self) -> bool:
        """Whether the beat fires only under a lease (a grantor is set)."""
        return self.address is not None or self.role is not None

    def begin(self) -> None:
        """The beat starts (again): it holds no lease yet; with no grantor, it
        may fire at once."""
        self._valid_until = -math.inf
        self._held = trio.Event()
        if not self.leased:
            self._held.set()

    def holder(self) -> str:
        """The address it holds the scheduler role as (its beat's)."""
        return str(self._actor.address)

    def holding(self) -> bool:
        """Whether it may fire now: no grantor, or a lease that holds for more
        than the margin yet, on its own clock."""
        if not self.leased:
            return True
        return trio.current_time() < self._valid_until - self.margin

    def holds_until(self) -> float:
        """The trio time after which it may not fire unless renewed (its
        lease's end, less the margin)."""
        return self._valid_until - self.margin

    def granted(self) -> bool:
        """Whether it took the lease and has not let it go (always, with no
        grantor); unlike :meth:`holding`, the margin is not counted."""
        return self._held.is_set()

    async def wait_holding(self) -> None:
        """Wait until it holds the scheduler lease (at once without a grantor)."""
        await self._held.wait()

    def report(self) -> None:
        """A firing was committed: renew at once, to report it."""
        self._report.set()

    def lost(self) -> None:
        """The role is another's (a firing could not be recorded as the
        role's): it holds nothing, and asks again at once."""
        self._valid_until = -math.inf
        self._let_go()
        self._report.set()

    async def resign(self) -> None:
        """Across hosts, give the scheduler role up: another node's beat takes
        it at once instead of after the lease's ttl."""
        if self.role is not None:
            await self.role.resign()

    async def keep(self) -> None:
        """Acquire, then renew the lease every third of its TTL (and after each
        firing, to report it); a task of the beat. Across hosts it also
        watches the role's key, and asks at once when the key is gone (the
        holder's lease ended in etcd): the role moves as soon as etcd frees
        it, not up to a third of the TTL later."""
        async with trio.open_nursery() as nursery:
            if self.role is not None:
                nursery.start_soon(self.role.follow, self._followed)
            while True:
                self._report = trio.Event()  # before the renewal: a wake meanwhile counts
                await self._renew()
                with trio.move_on_after(self.ttl / 3):
                    await self._report.wait()

    def _followed(self, holder: str | None) -> None:
        """The role's key changed: gone (None), it is free: ask at once."""
        if holder is None and not self.granted():
            self._report.set()

    async def _renew(self) -> None:
        holder = self.holder()
        held = self.holding()
        sent = trio.current_time()  # the lease counts from here, on its own clock
        try:
            answer = await self._ask_lease(holder, held)
        except ActorctlError as exc:
            grantor = self.role.where if self.role else self.address
            if held:
                log("actorctl:beat:lease-unrenewed", grantor=grantor, error=str(exc))
            elif not self._unreached:  # said once, until a grant
                self._unreached = True
                log(
                    "actorctl:beat:no-lease",
                    grantor=grantor,
                    error=str(exc),
                    why=f"no {'etcd' if self.role else 'Controller'} answers: "
                    "nothing fires until one grants the lease",
                )
            if not self.holding():
                self._let_go()
            return  # it stops firing once the lease it has runs out
        if not answer.get("granted"):
            self._valid_until = -math.inf
            self._let_go()
            if held or not self._standby:  # said once per change
                log("actorctl:beat:standby", holder=answer.get("holder"), fence=answer.get("fence"))
                self._standby = True
            return
        self._standby = self._unreached = False
        self._valid_until = sent + self.ttl
        if not held:
            self.fence = int(answer["fence"])
            log("actorctl:beat:leader", fence=self.fence, holder=holder)
            self._resume(dict(answer.get("state") or {}))
        self._held.set()
        self._wake()

    async def _ask_lease(self, holder: str, held: bool) -> dict[str, Any]:
        """Ask the grantor for the scheduler lease: etcd across hosts, else the
        Controller (told the last firings, while it holds the lease)."""
        if self.role is not None:
            return await self.role.request(holder, self.ttl)
        assert self.address is not None
        # Only what its store holds: a firing under way may not outlive it.
        state = dict(self._firings()) if held else None
        ref = self._actor.ref(self.address).with_options(timeout=min(5.0, self.ttl / 3))
        answer: dict[str, Any] = await ref.ask("lease", SCHEDULER_ROLE, holder, self.ttl, state)
        return answer

    def _let_go(self) -> None:
        """It no longer holds the lease: :meth:`wait_holding` waits again."""
        if self._held.is_set():
            self._held = trio.Event()
