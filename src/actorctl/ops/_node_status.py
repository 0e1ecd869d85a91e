"""A node as the Controller's ``status`` answers it (:class:`NodeStatus`): a
record made from what the Controller knows of it (its ``NodeState``) and the
mailboxes the node reported, a dict only in the reply (``wire()``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, final

import attrs

from ..cluster._agent_answers import MailboxCounts
from ._foreman import NodeRun, NodeState

__all__ = ["NodeStatus"]


@final
@attrs.frozen
class NodeStatus:
    """One node: its name, pid, address, actors, state and restarts, and each
    actor's mailbox as the node reported it (or why it did not: ``error``)."""

    node: str
    pid: int | None
    address: str | None
    actors: tuple[str, ...]
    state: NodeRun
    restarts: int
    mailboxes: Mapping[str, MailboxCounts] = attrs.field(factory=dict)
    error: str | None = None  #: the node did not report its mailboxes: why

    @classmethod
    def of(cls, state: NodeState, mailboxes: Mapping[str, MailboxCounts] | str) -> NodeStatus:
        """The row of the node ``state`` describes, with what it reported of
        its mailboxes (a text: why it did not)."""
        error = mailboxes if isinstance(mailboxes, str) else None
        return cls(
            state.name,
            state.pid,
            state.address,
            tuple(state.actors),
            state.state,
            state.restarts,
            {} if isinstance(mailboxes, str) else dict(mailboxes),
            error,
        )

    def wire(self) -> dict[str, Any]:
        """Its form in a reply (the mailboxes ``{"error": why}`` when unreported)."""
        mailboxes = (
            {"error": self.error}
            if self.error is not None
            else {name: counts.wire() for name, counts in self.mailboxes.items()}
        )
        return {
            "node": self.node,
            "pid": self.pid,
            "address": self.address,
            "actors": list(self.actors),
            "state": self.state.value,
            "restarts": self.restarts,
            "mailboxes": mailboxes,
        }
