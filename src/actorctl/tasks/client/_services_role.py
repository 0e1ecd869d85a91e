"""The services role across hosts: which services node the pools' routers, the
scheduler of delayed tasks and the event hub are reached at.

On one host a cluster has one services node. Across hosts (``[etcd]``) it may
have several, one per host say; they take turns holding the services role in
etcd, as the beats take turns holding the scheduler role
(:mod:`actorctl.etcd._role_lease`): the first to create the role's key
under a lease of its own holds it until it stops renewing it (it stopped, or
its host was lost or cut off), and then the next candidate takes it.

Every node of the app, and every caller (``tasks/client/_connect.py``), watches the
role's key and makes its :class:`~actorctl.tasks.client._directory.Directory` follow
the holder: from then on a pool's name resolves to the holder's router. What
the node's backlog still holds for the old holder's services goes to the
holder's once the old one cannot be reached (a durable send's reroute is
``Directory.elsewhere``); a caller's send that the old one did not confirm is
sent to the holder's (``send_task``).

**No fence is needed.** A services node that lost the role (cut off, say)
goes on finishing what it had already taken on: the tasks its routers hold,
the delayed tasks its scheduler holds, the chords its barrier counts. No other
node holds those, so nothing is done twice; the role only decides where *new*
work goes. The one singleton whose act must not be repeated, the firing of a
periodic task, is fenced by the scheduler role (``tasks/services/_beat.py``).
"""

from __future__ import annotations

from typing import Any, Final, final

import trio

from ..._errors import ActorctlError
from ..._log import log
from ...actors import Actor, Address, handler
from ...etcd import EtcdClient, EtcdRoleLease, follow_holder
from ...mailbox import Outcome
from ..protocol._protocol import SERVICES_ROLE
from ..protocol._state import node_outbox
from ._directory import Directory, endpoint_of

__all__ = ["SERVICES_ROLE", "SERVICES_ROLE_NAME", "ServicesRole", "follow_services"]

#: The actor, on every node of the app across hosts.
SERVICES_ROLE_NAME: Final = "_services_role"


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
    """

    def __init__(
        self,
        directory: Directory,
        client: EtcdClient,
        cluster: str,
        ttl: float,
        candidate: str | None = None,
    ) -> None:
        self.directory = directory
        self.candidate = candidate
        self.ttl = float(ttl)
        self._client = client
        self._cluster = cluster
        self._lease = EtcdRoleLease(client, cluster, SERVICES_ROLE) if candidate else None
        self.held = False

    async def on_start(self) -> None:
        # What the node's store held for a services node before it
        # restarted may go to the holder's too.
        backlog = node_outbox(self._require_cell().outbox).backlog
        backlog.adopt(list(self.directory.movable()), self._claim)
        self.start_soon(
            follow_holder,
            self._client,
            self._cluster,
            SERVICES_ROLE,
            lambda holder: follow_services(self.directory, holder, backlog),
        )
        if self._lease is not None:
            self.start_soon(self._campaign)

    async def on_stop(self) -> None:
        """Give the role up: another services node takes it at once, not
        after the ttl."""
        if self._lease is not None:
            await self._lease.resign()

    @handler
    def statistics(self) -> dict[str, Any]:
        """Who holds the services role, as this node follows it, and whether
        this node holds it."""
        return {"holder": self.directory.holder, "held": self.held}

    def _claim(self, address: Address, message_id: str) -> tuple[Any, Any]:
        def done(outcome: Outcome) -> None:
            """The backlog logs a final refusal; nothing else to do."""

        return done, self.directory.elsewhere

    async def _campaign(self) -> None:
        """Take, then renew, the role every third of its ttl."""
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
                elif self.held and not held:
                    log("actorctl:services:standby", node=self.candidate, holder=answer["holder"])
                self.held = held
            await trio.sleep(self.ttl / 3)
