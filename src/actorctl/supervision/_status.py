"""What a node says of its supervision tree, health checks and breakers, as records.

A row of a supervision tree (:class:`TreeRow`: a supervisor, an actor, a
process, and above them the nodes and hosts ``cluster status`` shows), a
breaker's state (``BreakerStatus``, beside the breaker), a check's last result
(:class:`CheckStatus`) and the health agent's whole report
(:class:`HealthReport`) are made where they are known (the supervisor, the
breaker, the ``_health`` agent) and read as records by ``cluster status``. Each is a dict
only on the wire (``wire()``, in the agent's reply); ``from_wire`` reads a
reply back, and names what is wrong with a malformed one
(``actors/_answers.py``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Final, Literal, final

import attrs
import cattrs

from .._errors import WireFormatError
from ..actors._answers import answer_converter, explain, read_answer
from ._breaker import BreakerStatus, Health

__all__ = ["ABSENT", "CheckStatus", "HealthReport", "MailboxFill", "TreeRow"]


class _Absent(enum.Enum):
    ABSENT = "absent"


#: A field of a row that its kind does not show (not in its wire form), as
#: against None: shown, and not known (a node of another host's restarts).
ABSENT: Final = _Absent.ABSENT
Absent = Literal[_Absent.ABSENT]


@final
@attrs.frozen
class MailboxFill:
    """An actor's mailbox as a tree row shows it: its depth and capacity."""

    depth: int
    capacity: int

    def wire(self) -> dict[str, Any]:
        """Its form in a reply."""
        return {"depth": self.depth, "capacity": self.capacity}


@final
@attrs.frozen
class TreeRow:  # each field past state: ABSENT, or its "wire" type
    """One row of a supervision tree as ``cluster status`` and the web page
    show it: its ``name``, ``kind`` (supervisor, actor, process, boxed, node,
    host, membership, health-check, breaker, dead-letters) and ``state`` (the
    word of its kind's states: a child's ``ChildState``, a node's, a check's
    ``Health``), and what its kind adds. A field its kind does not show is
    ABSENT (and not in its wire form); None is shown as null.
    """

    name: str
    kind: str
    state: str
    cluster: str | Absent = attrs.field(default=ABSENT, metadata={"wire": str})
    restarts: int | Absent | None = attrs.field(default=ABSENT, metadata={"wire": int | None})
    mailbox: MailboxFill | Absent = attrs.field(default=ABSENT, metadata={"wire": MailboxFill})
    command: tuple[str, ...] | Absent = attrs.field(
        default=ABSENT, metadata={"wire": tuple[str, ...]}
    )
    queued: int | Absent = attrs.field(default=ABSENT, metadata={"wire": int})
    in_flight: int | Absent = attrs.field(default=ABSENT, metadata={"wire": int})
    pid: int | Absent | None = attrs.field(default=ABSENT, metadata={"wire": int | None})
    address: str | Absent | None = attrs.field(default=ABSENT, metadata={"wire": str | None})
    detail: str | Absent | None = attrs.field(default=ABSENT, metadata={"wire": str | None})
    error: str | Absent = attrs.field(default=ABSENT, metadata={"wire": str})
    children: tuple[TreeRow, ...] | Absent = attrs.field(default=ABSENT, metadata={"wire": None})

    def wire(self) -> dict[str, Any]:
        """Its form in a reply: the fields its kind shows, children nested."""
        wire: dict[str, Any] = {}
        for field in attrs.fields(TreeRow):
            value = getattr(self, field.name)
            if value is ABSENT:
                continue
            if isinstance(value, enum.Enum):  # a state given as its enum: its word
                value = value.value
            elif isinstance(value, MailboxFill):
                value = value.wire()
            elif field.name == "children":
                value = [child.wire() for child in value]
            elif isinstance(value, tuple):
                value = list(value)
            wire[field.name] = value
        return wire

    @classmethod
    def from_wire(cls, value: object, where: str) -> TreeRow:
        """A reply's body as the row, its children nested.

        Raises:
            WireFormatError: it is not one (naming ``where``, the path of what
                is wrong and what was expected).
        """
        try:
            return _read_row(value, "$")
        except ValueError as exc:
            raise WireFormatError(f"{where} is malformed: {exc}") from None


def _read_row(value: object, path: str) -> TreeRow:
    if not isinstance(value, Mapping):
        raise ValueError(f"expected an object, got {value!r:.60} @ {path}")
    given: dict[str, Any] = {}
    for field in attrs.fields(TreeRow):
        if field.name not in value:
            if field.default is attrs.NOTHING:
                raise ValueError(f"missing @ {path}.{field.name}")
            continue
        found = value[field.name]
        if field.name == "children":
            if not isinstance(found, list | tuple):
                raise ValueError(f"expected a list, got {found!r:.60} @ {path}.children")
            given["children"] = tuple(
                _read_row(child, f"{path}.children[{index}]") for index, child in enumerate(found)
            )
            continue
        kind = field.metadata.get("wire", str)
        try:
            given[field.name] = answer_converter.structure(found, kind)
        except (ValueError, TypeError, cattrs.BaseValidationError) as exc:
            raise ValueError(explain(exc, f"{path}.{field.name}")) from None
    return TreeRow(**given)


@final
@attrs.frozen
class CheckStatus:
    """A health check's last result: its state, what it said, when (seconds
    since the epoch) and the breakers it feeds."""

    state: Health
    detail: str
    at: float
    breakers: tuple[str, ...] = ()

    def wire(self) -> dict[str, Any]:
        """Its form in a reply."""
        return {
            "state": self.state.value,
            "detail": self.detail,
            "at": self.at,
            "breakers": list(self.breakers),
        }


@final
@attrs.frozen
class HealthReport:
    """The ``_health`` agent's answer to ``report``: each check's last result,
    and each breaker on the node by name (several actors may each have one of
    the same name)."""

    checks: Mapping[str, CheckStatus]
    breakers: Mapping[str, tuple[BreakerStatus, ...]]

    def wire(self) -> dict[str, Any]:
        """Its form in a reply."""
        return {
            "checks": {name: check.wire() for name, check in self.checks.items()},
            "breakers": {
                name: [breaker.wire() for breaker in states]
                for name, states in self.breakers.items()
            },
        }

    @classmethod
    def from_wire(cls, value: object, where: str) -> HealthReport:
        """A reply's body as the report.

        Raises:
            WireFormatError: it is not one (naming ``where`` and what is wrong).
        """
        return read_answer(value, cls, where)
