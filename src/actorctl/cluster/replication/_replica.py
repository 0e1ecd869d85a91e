"""The replica keeper: a standby's copies of other nodes' stores.

``_replica`` on a node that may take a role over (:mod:`._shipper` says
how batches come to it). For each node that ships to it, it keeps a copy of
that node's store in a SQLite file of its own (``DIRECTORY/NODE.sqlite``: a
:class:`~actorctl.store.Store`, so committed the same way), and answers a
part only once the part is committed there.

It keeps, per role, the newest revision (fence) it has seen, from the parts
themselves and from its own node (:meth:`ReplicaKeeper.seen`, when that node
takes the role): a part under an older one is refused (``fenced``), so a node
that lost the role can have nothing more confirmed. A part out of order, or
from another run of its node (epoch), is answered with a request for a
snapshot (``restore``). What it keeps for a node, :meth:`ReplicaKeeper.rows`
hands to whoever takes that node's work over, who then has it
:meth:`ReplicaKeeper.forget` it; a node that stops on purpose has it forget
its copy too (``release``: its work stays on its own disk). A copy's
:meth:`ReplicaKeeper.position` says how far it went; a new holder's first
snapshot says how far the copies it took over went, and a copy kept here
of the same node that goes no further is forgotten then (``superseded``:
with three services nodes, the third does not keep a stale copy of the lost
holder's store, to run again what the new holder has run since).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, ClassVar, Final, final

import attrs
import trio

from ..._errors import ConfigError
from ..._log import log
from ...actors import Actor, handler
from ...mailbox import Role
from ...store import Store, Write
from ._parts import decode_writes
from ._shipper import REPLICA

__all__ = ["ReplicaKeeper"]

#: The table of a replica's own bookkeeping (never a source's row).
META_TABLE: Final = "\x00replica"
_META_KEY: Final = "meta"
_NAME: Final = re.compile(r"[A-Za-z0-9_.-]{1,100}")
_MEMBERS: Final = (Role.MEMBER, Role.OPERATOR)


@attrs.define
class _Copy:
    """One node's store, as copied here."""

    store: Store
    opened: trio.Event
    epoch: str = ""
    seq: int = 0  # the number of the next part it takes
    restoring: bool = False  # a snapshot is coming in (its first part was taken)


@final
class ReplicaKeeper(Actor):
    """``_replica``: keeps copies of other nodes' stores (see the module's text).

    Args:
        directory: where the copies' files go; None keeps them in memory
            (a node with ``durable = false``).
    """

    name = REPLICA
    concurrency: ClassVar[int] = 1  # parts are taken in the order they come
    mailbox_capacity: ClassVar[int] = 100
    dedup_count: ClassVar[int] = 0

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._copies: dict[str, _Copy] = {}
        self._fences: dict[str, int] = {}  # role -> the newest revision seen

    async def on_start(self) -> None:
        """Open the copies its directory holds (they keep their fences)."""
        if self.directory is None or not self.directory.is_dir():
            return
        for path in sorted(self.directory.glob("*.sqlite")):
            if _NAME.fullmatch(path.stem):
                await self._open(path.stem)

    # -- what its own node asks ----------------------------------------------------------

    def seen(self, role: str, fence: int) -> None:
        """``role``'s revision ``fence`` exists (its own node took the role): a
        part under an older one is refused from now on."""
        if fence > self._fences.get(role, 0):
            self._fences[role] = fence
            for copy in self._copies.values():
                self._save_meta(copy)

    def sources(self) -> list[str]:
        """The nodes it keeps a copy of."""
        return sorted(self._copies)

    def holds(self, table: str, key: str) -> bool:
        """Whether a copy kept here (not yet taken over) holds that row."""
        return any(copy.store.get(table, key) is not None for copy in self._copies.values())

    def position(self, source: str) -> tuple[str, int] | None:
        """How far the copy of ``source``'s store goes: its run (epoch) and
        the number of the next part it takes; None when there is no whole
        copy (none, forgotten, or a snapshot coming in)."""
        copy = self._copies.get(source)
        if copy is None or copy.restoring or not copy.epoch:
            return None
        return copy.epoch, copy.seq

    def rows(self, source: str) -> list[Write]:
        """The rows of ``source``'s store as copied here, oldest first."""
        copy = self._copies.get(source)
        if copy is None:
            return []
        return [row for row in copy.store.snapshot() if row[0] != META_TABLE]

    def forget(self, source: str) -> None:
        """Drop the copy of ``source``'s store (its rows were taken over): a
        part from it after this asks for a snapshot."""
        copy = self._copies.get(source)
        if copy is None:
            return
        for table, key, _, _ in copy.store.snapshot():
            if table != META_TABLE:
                copy.store.delete(table, key)
        copy.epoch, copy.seq, copy.restoring = "", 0, False
        self._save_meta(copy)

    # -- what the primaries send -----------------------------------------------------------

    @handler(roles=_MEMBERS)
    async def apply(
        self, source: str, role: str, fence: int, epoch: str, seq: int, part: list[Any]
    ) -> dict[str, Any]:
        """Take part ``seq`` of ``source``'s batches; answered once committed here."""
        refused = self._check_fence(role, fence)
        if refused is not None:
            return refused
        copy = await self._copy(source)
        if copy.restoring or copy.epoch != epoch or copy.seq != seq:
            return {"ok": False, "resync": True}
        self._write(copy, decode_writes(part))
        copy.seq += 1
        self._save_meta(copy)
        await copy.store.sync()
        return {"ok": True}

    @handler(roles=_MEMBERS)
    async def restore(
        self,
        source: str,
        role: str,
        fence: int,
        epoch: str,
        part: list[Any],
        first: bool,
        last: bool,
        upto: int = 0,
        taken: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Take a part of ``source``'s snapshot: the ``first`` drops what was
        kept; after the ``last``, its parts numbered from ``upto`` follow.
        ``taken``: the copies of other primaries' stores ``source`` took over,
        each as far as it went (``[epoch, number]``): a copy kept here that
        goes no further is forgotten (its rows are ``source``'s own now).
        Both may be left out, as the release before them did (a holder of
        that release numbers its parts from 0 after a snapshot, and took
        over nothing it says): its standby may run this release."""
        refused = self._check_fence(role, fence)
        if refused is not None:
            return refused
        copy = await self._copy(source)
        if first:
            await self._supersede(source, _taken(taken or {}))
            for table, key, _, _ in copy.store.snapshot():
                if table != META_TABLE:
                    copy.store.delete(table, key)
            copy.restoring, copy.epoch = True, epoch
        elif not copy.restoring or copy.epoch != epoch:
            return {"ok": False, "resync": True}
        self._write(copy, decode_writes(part))
        if last:
            copy.restoring, copy.seq = False, int(upto)
            log("actorctl:replica:restored", source=source, rows=len(self.rows(source)))
        self._save_meta(copy)
        await copy.store.sync()
        return {"ok": True}

    @handler(roles=_MEMBERS)
    async def release(self, source: str, role: str, fence: int, epoch: str) -> dict[str, Any]:
        """``source`` stops on purpose and keeps its work: forget its copy."""
        refused = self._check_fence(role, fence)
        if refused is not None:
            return refused
        if source in self._copies:
            copy = await self._copy(source)
            if copy.epoch == epoch:
                self.forget(source)
                await copy.store.sync()
                log("actorctl:replica:released", source=source)
        return {"ok": True}

    @handler
    def statistics(self) -> dict[str, Any]:
        """Per primary: its rows kept here and the next part's number; the fences seen."""
        return {
            "primaries": {
                name: {"rows": len(self.rows(name)), "seq": copy.seq, "epoch": copy.epoch}
                for name, copy in self._copies.items()
            },
            "fences": dict(self._fences),
        }

    def _check_fence(self, role: str, fence: int) -> dict[str, Any] | None:
        seen = self._fences.get(role, 0)
        if fence < seen:
            log("actorctl:replica:fenced", role=role, fence=fence, seen=seen)
            return {"ok": False, "fenced": True, "seen": seen}
        if fence > seen:
            self.seen(role, fence)
        return None

    async def _supersede(self, holder: str, taken: dict[str, tuple[str, int]]) -> None:
        """``holder`` took over its copies of ``taken``'s stores: forget each
        copy kept here that goes no further than the one it took over."""
        for source, (epoch, seq) in taken.items():
            copy = self._copies.get(source)
            if source == holder or copy is None or not self.rows(source):
                continue
            if copy.epoch == epoch and not copy.restoring and copy.seq <= seq:
                log("actorctl:replica:superseded", source=source, holder=holder, seq=copy.seq)
                self.forget(source)
                await copy.store.sync()
                continue
            log(
                "actorctl:replica:kept",
                source=source,
                holder=holder,
                epoch=copy.epoch,
                seq=copy.seq,
                restoring=copy.restoring,
                taken=[epoch, seq],
                why="this copy goes further than the one the holder took over (or is of "
                "another run of its node): kept, and run if this node takes the role "
                "(what both hold may run twice)",
            )

    @staticmethod
    def _write(copy: _Copy, writes: list[Write]) -> None:
        for table, key, value, expires in writes:
            if table == META_TABLE:
                continue
            if value is None:
                copy.store.delete(table, key)
            else:
                copy.store.put(table, key, value, expires=expires)

    # -- the copies' stores --------------------------------------------------------------

    async def _copy(self, source: str) -> _Copy:
        copy = self._copies.get(source)
        if copy is None:
            copy = await self._open(source)
        await copy.opened.wait()
        return copy

    async def _open(self, source: str) -> _Copy:
        if not _NAME.fullmatch(source):
            raise ConfigError(f"replica: {source!r} is not a node name (letters, digits, _.-)")
        path = None if self.directory is None else self.directory / f"{source}.sqlite"
        copy = self._copies[source] = _Copy(Store(path, name=f"replica-{source}"), trio.Event())
        self.start_soon(self._serve_store, copy)
        await copy.opened.wait()
        meta = copy.store.get(META_TABLE, _META_KEY)
        if meta is not None:
            kept = json.loads(meta)
            copy.epoch, copy.seq = str(kept.get("epoch", "")), int(kept.get("seq", 0))
            copy.restoring = bool(kept.get("restoring", False))
            for role, fence in dict(kept.get("fences", {})).items():
                self._fences[role] = max(self._fences.get(role, 0), int(fence))
        return copy

    @staticmethod
    async def _serve_store(copy: _Copy) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(copy.store.run)
            copy.opened.set()

    def _save_meta(self, copy: _Copy) -> None:
        meta = {
            "epoch": copy.epoch,
            "seq": copy.seq,
            "restoring": copy.restoring,
            "fences": self._fences,
        }
        copy.store.put(META_TABLE, _META_KEY, json.dumps(meta).encode())


def _taken(wire: object) -> dict[str, tuple[str, int]]:
    """A snapshot's ``taken`` (``{source: [epoch, number]}``), read.

    Raises:
        ValueError: not that.
    """
    if not isinstance(wire, dict):
        raise ValueError(f"expected {{source: [epoch, number]}}, got {type(wire).__name__}")
    taken: dict[str, tuple[str, int]] = {}
    for source, at in wire.items():
        if not (isinstance(at, list) and len(at) == 2):
            raise ValueError(f"expected [epoch, number] for {source!r:.40}, got {at!r:.80}")
        epoch, seq = at
        if not (isinstance(epoch, str) and isinstance(seq, int) and not isinstance(seq, bool)):
            raise ValueError(f"expected [epoch, number] for {source!r:.40}, got {at!r:.80}")
        taken[str(source)] = (epoch, seq)
    return taken
