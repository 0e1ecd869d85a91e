"""``actorctl schedule list``: the periodic tasks of a running cluster, asked of
the beat that holds the ``scheduler`` role, wherever it runs.

On one host the Controller grants the role (a lease: its ``holder`` handler
says who holds it); across hosts, etcd does (the role's key). Either way the
holder's beat answers ``schedules``: each periodic task with its schedule,
timezone, last and next firing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..._errors import ActorctlError, AskTimeout, PeerUnavailable
from ...actors import ActorRef
from ...etcd import EtcdClient
from ...etcd._role_lease import role_key
from ..protocol._protocol import SCHEDULER_ROLE

__all__ = ["cluster_schedules", "hosts_schedules"]


async def cluster_schedules(
    controller: ActorRef, ref: Callable[[str], ActorRef]
) -> list[dict[str, Any]]:
    """The schedules of the beat that holds the Controller's ``scheduler``
    lease, asked of it through ``ref`` (an address to a ref).

    Raises:
        ActorctlError: no beat holds the lease (saying why), or it did not answer.
    """
    held: dict[str, str | None] = await controller.ask("holder", SCHEDULER_ROLE)
    holder = held.get("holder")
    if holder is None:
        last = held.get("last")
        why = (
            f"its last holder, {last}, has not renewed it (its node is down or restarting)"
            if last is not None
            else "no node of this cluster runs a beat: periodic tasks need a task app "
            "node with services = true"
        )
        raise ActorctlError(f"no beat holds the scheduler lease: {why}")
    return await _ask_beat(ref, holder)


async def hosts_schedules(
    cluster: str, client: EtcdClient, ref: Callable[[str], ActorRef]
) -> list[dict[str, Any]]:
    """The schedules of the beat that holds the ``scheduler`` role in etcd, for
    a cluster that spans hosts (``host up``, no Controller), asked of it.

    Raises:
        ActorctlError: no beat holds the role, or the one that does did not answer.
        EtcdError: etcd could not be reached (naming each endpoint).
    """
    held = await client.get(role_key(cluster, SCHEDULER_ROLE))
    if held is None:
        raise ActorctlError(
            f"cluster {cluster!r}: no beat holds the scheduler role in etcd: no node "
            "that runs one is registered (periodic tasks need a task app node with "
            "services = true, or one that serves a pool of the app)"
        )
    return await _ask_beat(ref, held.value.decode(errors="replace"))


async def _ask_beat(ref: Callable[[str], ActorRef], holder: str) -> list[dict[str, Any]]:
    """The schedules the beat at ``holder`` answers; one that does not answer
    is named (not taken for the Controller or the cluster being down)."""
    try:
        rows: list[dict[str, Any]] = await ref(holder).ask("schedules")
    except (AskTimeout, PeerUnavailable) as exc:
        raise ActorctlError(
            f"the beat that holds the scheduler role, {holder}, did not answer: {exc} "
            "(its node is busy, restarting or cut off: try again, or see `cluster status`)"
        ) from None
    return rows
