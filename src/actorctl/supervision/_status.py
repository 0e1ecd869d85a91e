"""What a node says of its health checks and breakers, as records.

A breaker's state (``BreakerStatus``, beside the breaker), a check's last result
(:class:`CheckStatus`) and the health agent's whole report
(:class:`HealthReport`) are made where they are known (the breaker, the
``_health`` agent) and read as records by ``cluster status``. Each is a dict
only on the wire (``wire()``, in the agent's reply); ``from_wire`` reads a
reply back, and names what is wrong with a malformed one
(``actors/_answers.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, final

import attrs

from ..actors._answers import read_answer
from ._breaker import BreakerStatus, Health

__all__ = ["CheckStatus", "HealthReport"]


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
