"""The ``_node`` agent's answers, as records: who a node is
(:class:`NodeIdentity`), its actors' mailboxes (:class:`MailboxCounts`), what
following a changed cluster file changed (:class:`FollowAnswer`) and whether a
drain finished (:class:`DrainAnswer`).

The agent makes each where it knows it, and sends it as a dict (``wire()``);
the Controller and the reloader read a reply back with ``from_wire``, which
names what is wrong with a malformed one (``actors/_answers.py``): the node
may run another release.
"""

from __future__ import annotations

from typing import Any, final

import attrs

from ..actors._answers import read_answer

__all__ = ["DrainAnswer", "FollowAnswer", "MailboxCounts", "NodeIdentity", "mailbox_counts"]


@final
@attrs.frozen
class NodeIdentity:
    """Who a node is, as its ready line says it: its ``name``, ``node_id``
    (its process's boot id: a new one at each start), ``pid``, ``address``,
    the ``actors`` it hosts and ``metrics`` (its /metrics URL, or None)."""

    name: str
    node_id: str
    pid: int
    address: str
    actors: tuple[str, ...]
    metrics: str | None = None

    def wire(self) -> dict[str, Any]:
        """Its form in a reply."""
        return {
            "name": self.name,
            "node_id": self.node_id,
            "pid": self.pid,
            "address": self.address,
            "actors": list(self.actors),
            "metrics": self.metrics,
        }

    @classmethod
    def from_wire(cls, value: object, where: str) -> NodeIdentity:
        """A reply's body as the record.

        Raises:
            WireFormatError: it is not one (naming ``where`` and what is wrong).
        """
        return read_answer(value, cls, where)


@final
@attrs.frozen
class MailboxCounts:
    """One actor's mailbox, as ``statistics`` answers it: its depth, its
    capacity and the messages it received."""

    depth: int
    capacity: int
    received: int

    def wire(self) -> dict[str, Any]:
        """Its form in a reply."""
        return {"depth": self.depth, "capacity": self.capacity, "received": self.received}


def mailbox_counts(value: object, where: str) -> dict[str, MailboxCounts]:
    """A reply to ``statistics`` (each actor's mailbox, by name) as records.

    Raises:
        WireFormatError: it is not one (naming ``where`` and what is wrong).
    """
    counts: dict[str, MailboxCounts] = read_answer(value, dict[str, MailboxCounts], where)
    return counts


@final
@attrs.frozen
class FollowAnswer:
    """What a node changed in place to follow a cluster file (``changed``),
    and why it must restart to follow the rest (``restart``)."""

    changed: tuple[str, ...] = ()
    restart: tuple[str, ...] = ()

    def wire(self) -> dict[str, Any]:
        """Its form in a reply."""
        return {"changed": list(self.changed), "restart": list(self.restart)}

    @classmethod
    def from_wire(cls, value: object, where: str) -> FollowAnswer:
        """A reply's body as the record.

        Raises:
            WireFormatError: it is not one (naming ``where`` and what is wrong).
        """
        return read_answer(value, cls, where)


@final
@attrs.frozen
class DrainAnswer:
    """Whether a node finished what it held (``drained``), and what was still
    busy when its time ran out (``busy``)."""

    drained: bool
    busy: tuple[str, ...] = ()

    def wire(self) -> dict[str, Any]:
        """Its form in a reply."""
        return {"drained": self.drained, "busy": list(self.busy)}

    @classmethod
    def from_wire(cls, value: object, where: str) -> DrainAnswer:
        """A reply's body as the record.

        Raises:
            WireFormatError: it is not one (naming ``where`` and what is wrong).
        """
        return read_answer(value, cls, where)
