"""The services role across hosts: which services node the pools' routers, the
scheduler of delayed tasks and the event hub are reached at.

On one host a cluster has one services node. Across hosts (``[etcd]``) it may
have several, one per host say; they take turns holding the services role in
etcd, as the beats take turns holding the scheduler role
(:mod:`actorctl.etcd._role_lease`): the first to create the role's key
under a lease of its own holds it until it stops renewing it (it stopped, or
its host was lost or cut off), and then the next candidate takes it, at
once: its watch of the key sees it deleted when etcd ends that lease.

Every node of the app, and every caller (``tasks/client/_connect.py``), watches the
role's key and makes its :class:`~actorctl.tasks.client._directory.Directory` follow
the holder: from then on a pool's name resolves to the holder's router. What
the node's backlog still holds for the old holder's services goes to the
holder's once the old one cannot be reached (a durable send's reroute is
``Directory.elsewhere``); a caller's send that the old one did not confirm is
sent to the holder's (``send_task``).

**Replication.** A services node's store holds what it confirmed to senders
(the tasks its routers took, delayed tasks, chord barriers, dead letters).
With several services nodes, the holder's store ships every commit batch to
the others' replica keepers (``_replica``: ``cluster/replication/``) before
it confirms anything, each batch under the role's revision in etcd (its
fence); a node that takes the role over tells its own keeper the new
revision, so the one it took it from gets nothing more confirmed. A standby
that does not answer is left behind, loudly, and confirmations go on without
it only while etcd says the holder still holds the role.

**Taking over.** A services node that takes the role takes over, before it
counts as the holder, what its keeper copied of the others' stores: the rows
go into its own store (those it has already stay its own), it commits them,
and then its backlog sends the tasks the lost holder's routers held (its own
routers adopt those for their instances, and hold back again what the old
ones held back for a rate limit), its scheduler arms the delayed tasks and
its barrier counts on the chords; the copy is then forgotten. So
a holder lost with its disk loses nothing it confirmed while its standby
was in sync. With three services nodes or more, every other one is a
standby too; the new holder's first snapshot to each tells it how far the
copy it took over went, and a standby forgets its own copy of the lost
holder's store if it goes no further (``Replication.took``): what the new
holder has run since is not run again by the next one. The new holder makes
that first snapshot at once (a commit of its own), not at its first new work.

**Finishing work needs no fence.** A services node that lost the role (cut
off, say) goes on finishing what it had already taken on: the tasks its
routers hold, the delayed tasks its scheduler holds, the chords its barrier
counts. The node that took the role over took those over too, from its
copy: such work may run twice (at least once, as ever), never not at all.
A deposed node that does not know it yet (cut off from etcd) can confirm
no new work: its batches are refused by the keeper that has seen the newer
revision (and its chord barrier gives back a result it cannot commit, so no
chord completes on its side then: ``tasks/services/_chords.py``). One that
knows it (its renewal was refused) ships nothing and confirms from its own
disk: new work that still reaches it (a sender whose
watch of the role has not caught up) is on its host alone. The
one singleton whose act must not be repeated, the firing of a periodic
task, is fenced by the scheduler role (``tasks/services/_beat.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, final

import trio

from ..._errors import ActorctlError
from ..._log import log
from ...actors import Actor, Address, handler
from ...cluster import BACKLOG_TABLE, DEAD_LETTERS_TABLE, REPLICA, ReplicaKeeper, Replication
from ...etcd import EtcdClient, EtcdRoleLease, follow_holder
from ...mailbox import Outcome
from ..protocol._protocol import SERVICES_ROLE
from ..protocol._state import node_outbox, store_of
from ._directory import Directory, endpoint_of

__all__ = ["SERVICES_ROLE", "SERVICES_ROLE_NAME", "ServicesRole", "follow_services"]

#: The actor, on every node of the app across hosts.
SERVICES_ROLE_NAME: Final = "_services_role"
#: The store table of the commit a new holder makes to bring its standbys in
#: (a row put and deleted in one batch: it holds nothing).
TERM_TABLE: Final = "services_term"
#: Seconds a standby has to acknowledge a batch, at most (a third of the ttl
#: when that is shorter): past it, the holder confirms without it.
REPLICATION_TIMEOUT: Final = 2.0


def follow_services(directory: Directory, holder: str | None, backlog: Any = None) -> None:
    """Make ``directory`` follow ``holder`` (the services role's, as etcd
    says), and let what ``backlog`` (a node's) holds for the old holder be
    sent to the new one. None, or a name that is not one of the file's
    services nodes (another file's cluster?), changes nothing: logged."""
    if holder is None:
        return
    was = directory.holder
    if holder not in directory.services:
        log(
            "actorctl:services:unknown-holder",
            holder=holder,
            known=sorted(directory.services),
            why="the services role is held by a node this cluster file does not name as a "
            "services node: the directory stays as it was",
        )
        return
    if not directory.follow(holder):
        return
    log("actorctl:services:following", holder=holder, was=was)
    if backlog is not None:  # what waits for any other services node may go now
        for name, url in directory.services.items():
            if name != holder:
                backlog.reconsider(endpoint_of(url))


@final
class ServicesRole(Actor):
    """On every node that hosts the task app across hosts, when the file names
    several services nodes: follows the services role's holder; on a services
    node, also a candidate for it.

    Args:
        directory: the node's directory (shared with its workers and services).
        client: the etcd client.
        cluster: the cluster's name.
        ttl: the role lease's ttl (the ``[etcd] ttl``).
        candidate: this node's name, if it is a services node (it runs for
            the role); None on a worker node (it only follows).
        replica: the node's replica keeper (a services node's): while it
            holds the role its store is replicated to the other services
            nodes' keepers; None replicates nothing.
        adopters: by store table, who takes on the rows of that table taken
            over (the scheduler's delayed tasks, the barrier's chords), told
            their keys; the backlog's are the node's backlog's, the dead
            letters' its dead letters'.
    """

    def __init__(
        self,
        directory: Directory,
        client: EtcdClient,
        cluster: str,
        ttl: float,
        candidate: str | None = None,
        replica: ReplicaKeeper | None = None,
        adopters: Mapping[str, Callable[[list[str]], int]] | None = None,
    ) -> None:
        self.directory = directory
        self.replica = replica
        self.replication: Replication | None = None
        self.adopters = dict(adopters or {})
        self.candidate = candidate
        self.ttl = float(ttl)
        self._client = client
        self._cluster = cluster
        self._lease = EtcdRoleLease(client, cluster, SERVICES_ROLE) if candidate else None
        self.held = False
        self._vacant = trio.Event()  # the role's key is gone: ask now
        self._standby = False  # refused the role, and said so

    async def on_start(self) -> None:
        # What the node's store held for a services node before it
        # restarted may go to the holder's too.
        outbox = node_outbox(self._require_cell().outbox)
        backlog = outbox.backlog
        backlog.adopt(list(self.directory.movable()), self._claim)
        if outbox.dead_letters is not None:  # letters taken over: under its bounds at once
            self.adopters.setdefault(DEAD_LETTERS_TABLE, outbox.dead_letters.adopt)
        self.start_soon(follow_holder, self._client, self._cluster, SERVICES_ROLE, self._followed)
        if self._lease is not None:
            if self.replica is not None:
                self._replicate()
            self.start_soon(self._campaign)

    def _replicate(self) -> None:
        """Ship the node's store to the other services nodes' keepers while it
        holds the role (see the module's text)."""
        assert self._lease is not None
        assert self.candidate is not None
        lease = self._lease
        others = [
            Address.parse(f"{url}/{REPLICA}")
            for name, url in self.directory.services.items()
            if name != self.candidate
        ]

        async def still_holder(in_sync: object) -> bool:
            return await lease.holds()

        store = store_of(self._require_cell().outbox)
        self.replication = Replication(
            self.candidate,
            SERVICES_ROLE,
            self._require_cell().outbox,
            store,
            standbys=lambda: others,
            fence=lambda: lease.fence if self.held else 0,
            still_holder=still_holder,
            timeout=min(REPLICATION_TIMEOUT, self.ttl / 3),
        )
        self.start_soon(self.replication.run)
        store.ship_to(self.replication)

    def on_drain(self) -> None:
        """The node begins a graceful stop: it keeps what it holds (on its own
        disk, for when it starts again), so its standbys forget their copies
        now, while its links are up, and the next holder does not run that
        work too (in a task of its own)."""
        if self.replication is not None:
            self.start_soon(self.replication.release)

    async def on_stop(self) -> None:
        """Give the role up: another services node takes it at once, not
        after the ttl (the standbys released first, if the drain did not)."""
        if self.replication is not None:
            await self.replication.release()
        if self._lease is not None:
            await self._lease.resign()

    @handler
    def statistics(self) -> dict[str, Any]:
        """Who holds the services role, as this node follows it, whether
        this node holds it, and its store's replication (None: none)."""
        replication = self.replication.statistics().wire() if self.replication else None
        return {"holder": self.directory.holder, "held": self.held, "replication": replication}

    async def _take_over(self, keeper: ReplicaKeeper) -> None:
        """Take on what ``keeper`` copied of the other services nodes' stores
        (see the module's text)."""
        cell = self._require_cell()
        store = store_of(cell.outbox)
        backlog = node_outbox(cell.outbox).backlog
        for source in keeper.sources():
            if source == self.candidate:
                continue
            rows = keeper.rows(source)
            position = keeper.position(source)
            taken = store.absorb(rows)
            await store.sync()  # ours before the copy is forgotten
            keys: dict[str, list[str]] = {}
            for table, key, _, _ in taken:
                keys.setdefault(table, []).append(key)
            backlog.resume(keys.get(BACKLOG_TABLE, []))
            backlog.adopt(list(self.directory.movable()), self._claim)
            adopted = {t: self.adopters[t](k) for t, k in keys.items() if t in self.adopters}
            keeper.forget(source)
            if self.replication is not None and position is not None:
                self.replication.took(source, *position)  # the other standbys forget theirs
            log(
                "actorctl:services:taken-over",
                node=self.candidate,
                source=source,
                rows=len(rows),
                taken=len(taken),
                tables={table: len(k) for table, k in keys.items()},
                adopted=adopted,
            )

    def _followed(self, holder: str | None) -> None:
        """The role's key changed: the directory follows it; gone (None),
        the role is free, and a candidate asks at once."""
        backlog = node_outbox(self._require_cell().outbox).backlog
        follow_services(self.directory, holder, backlog)
        if holder is None:
            self._vacant.set()

    async def _bring_in(self, fence: int) -> None:
        """A commit of its own under the new fence (a row put and deleted in
        one batch): every standby is brought in now, told how far the copies
        taken over went, not at the first new work."""
        store = store_of(self._require_cell().outbox)
        store.put(TERM_TABLE, SERVICES_ROLE, str(fence).encode())
        store.delete(TERM_TABLE, SERVICES_ROLE)
        try:
            await store.sync()
        except ActorctlError as exc:  # ShipRefused: deposed already; logged by the store
            log("actorctl:services:not-brought-in", node=self.candidate, error=str(exc))

    def _claim(self, address: Address, message_id: str) -> tuple[Any, Any]:
        def done(outcome: Outcome) -> None:
            """The backlog logs a final refusal; nothing else to do."""

        return done, self.directory.elsewhere

    async def _campaign(self) -> None:
        """Take, then renew, the role every third of its ttl, and at once
        when the role's key is gone (its holder's lease ended in etcd)."""
        assert self._lease is not None
        assert self.candidate is not None
        while True:
            try:
                answer = await self._lease.request(self.candidate, self.ttl)
            except ActorctlError as exc:
                if self.held:  # it may lose the role: another takes over, nothing is lost
                    log("actorctl:services:unrenewed", node=self.candidate, error=str(exc))
            else:
                held = bool(answer.get("granted"))
                if held and not self.held:
                    log("actorctl:services:leader", node=self.candidate, fence=answer["fence"])
                    if self.replica is not None:  # the one before can confirm nothing more
                        self.replica.seen(SERVICES_ROLE, int(answer["fence"]))
                        await self._take_over(self.replica)
                elif not held and (self.held or not self._standby):  # said once per change
                    log("actorctl:services:standby", node=self.candidate, holder=answer["holder"])
                self._standby = not held
                became, self.held = held and not self.held, held
                if became and self.replication is not None:
                    self.start_soon(self._bring_in, int(answer["fence"]))
            with trio.move_on_after(self.ttl / 3):  # or at once, once the role is free
                await self._vacant.wait()
            self._vacant = trio.Event()
