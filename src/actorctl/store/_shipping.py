"""What a store hands a replicator: each commit batch, before its writers are told it is kept.

A :class:`~actorctl.store.Store` given a :class:`Shipper` (``Store.ship_to``)
hands it every batch it commits, at the same time as it commits the batch to
its own disk; whoever awaits ``Store.sync`` for a write of that batch returns
only once both are done. The store knows nothing of where a batch goes: the
node's replication (``cluster/replication/``) ships it to standbys on
other hosts. A shipper that may not replicate a batch (its role was taken
over: a newer fence) raises :class:`ShipRefused`; the writers of that batch
are told so by ``sync`` raising it, and confirm nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .._errors import ActorctlError

__all__ = ["ShipRefused", "Shipper", "Write"]

#: One write: (table, key, value, expires); a value of None deletes the row.
Write = tuple[str, str, bytes | None, float | None]


class ShipRefused(ActorctlError):
    """A batch was not replicated and must not be confirmed: the node no longer
    holds the role it replicates for (a standby has seen a newer fence), or it
    could not prove it still holds it. The writes stay in its own store."""


class Shipper(Protocol):
    """Replicates a store's commit batches (see the module's text)."""

    async def ship(self, batch: Sequence[Write]) -> None:
        """Return once ``batch`` is as replicated as the shipper's rule asks.

        Raises:
            ShipRefused: the batch must not be confirmed to its writers.
        """
        ...
