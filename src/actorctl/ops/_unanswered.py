"""A node that did not answer a question asked of every node, as a record.

The Controller's ``broadcast`` and ``deadletters`` (and, across hosts,
:func:`~actorctl.ops.hosts_broadcast`) answer with each node's answer by its
name. A node that did not answer in time, or whose handler raised, has in its
place the marker ``{"unanswered": why}`` (with ``"refused": true`` when it did
answer, with an error). The marker is a dict only on the wire, and in the
``--json`` a command prints as it came; where it is made and where it is read
it is an :class:`Unanswered`: :meth:`Unanswered.wire` makes the marker,
:meth:`Unanswered.of` reads a node's answer (None: the node answered).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, final

import attrs

__all__ = ["REFUSED", "UNANSWERED", "Unanswered", "answered", "unanswered"]

#: The key of a node's answer that says why it did not answer.
UNANSWERED: Final = "unanswered"
#: Beside it, true when the node did answer, with an error (its handler raised).
REFUSED: Final = "refused"


@final
@attrs.frozen
class Unanswered:
    """Why a node's answer is missing: ``why`` (the error), and ``refused``:
    it answered, with an error (a misspelt task, an unknown pool), rather than
    not at all (it did not answer in time, or could not be reached)."""

    why: str
    refused: bool = False

    def wire(self) -> dict[str, Any]:
        """The marker in a node's place in the answers (``refused`` only when true)."""
        return {UNANSWERED: self.why, REFUSED: True} if self.refused else {UNANSWERED: self.why}

    @classmethod
    def of(cls, answer: object) -> Unanswered | None:
        """A node's answer as this record if it is the marker; None if the
        node answered (its answer, whatever it is, is its own)."""
        if not isinstance(answer, Mapping) or UNANSWERED not in answer:
            return None
        return cls(str(answer[UNANSWERED]), answer.get(REFUSED) is True)


def answered(by_node: Mapping[str, Any]) -> dict[str, Any]:
    """The answers of the nodes that answered, by node."""
    return {node: answer for node, answer in by_node.items() if Unanswered.of(answer) is None}


def unanswered(by_node: Mapping[str, Any]) -> dict[str, Unanswered]:
    """Why each node that did not answer did not, by node."""
    found = {node: Unanswered.of(answer) for node, answer in by_node.items()}
    return {node: why for node, why in found.items() if why is not None}
