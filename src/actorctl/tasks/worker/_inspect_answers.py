"""The ``_tasks`` actor's answers to ``inspect`` and ``ping``, as records.

A task a worker holds (or the scheduler delays) is a :class:`HeldRow`; a
node's counts (``inspect stats``) are :class:`NodeStats`, with a
:class:`WorkerStats` per worker; Celery's ``ping`` is :class:`Pong`. The
node makes each where it knows it (``_inspect.py``, ``_control.py``); the
CLI and the web page read them as records. Each is a dict only on the wire
(``wire()``), and ``from_wire`` reads a reply back, naming what is wrong with
a malformed one (``actors/_answers.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, final

import attrs

from ...actors._answers import read_answer

__all__ = ["HeldRow", "NodeStats", "Pong", "WorkerStats", "held_rows"]


@final
@attrs.frozen
class HeldRow:
    """A task held on a node, as ``inspect active|reserved|scheduled`` shows
    it: its id, name, arguments (as they came, or their text cut short when
    long), the worker (or scheduler) and pool, when it was received and
    started (None: not yet), and for a delayed task its ``eta`` (seconds since
    the epoch)."""

    id: str
    name: str
    args: Any
    kwargs: Any
    worker: str
    pool: str
    received: float
    started: float | None = None
    eta: float | None = None

    def wire(self) -> dict[str, Any]:
        """Its form in a reply (``eta`` only for a delayed task)."""
        wire = {
            "id": self.id,
            "name": self.name,
            "args": self.args,
            "kwargs": self.kwargs,
            "worker": self.worker,
            "pool": self.pool,
            "received": self.received,
            "started": self.started,
        }
        if self.eta is not None:
            wire["eta"] = self.eta
        return wire


def held_rows(value: object, where: str) -> tuple[HeldRow, ...]:
    """A reply's body (a list of held tasks) as records.

    Raises:
        WireFormatError: it is not such a list (naming ``where`` and what is wrong).
    """
    rows: tuple[HeldRow, ...] = read_answer(value, tuple[HeldRow, ...], where)
    return rows


@final
@attrs.frozen
class WorkerStats:
    """One worker's counts: its pool, its active and reserved tasks, and its
    budget (None: its gate is not known here)."""

    pool: str
    active: int
    reserved: int
    budget: int | None

    def wire(self) -> dict[str, Any]:
        """Its form in a reply."""
        return {
            "pool": self.pool,
            "active": self.active,
            "reserved": self.reserved,
            "budget": self.budget,
        }


@final
@attrs.frozen
class NodeStats:
    """A node's answer to ``stats`` (Celery's ``inspect stats``): its name,
    pid and uptime (seconds), each worker's counts, and how many runs of each
    task ended there."""

    node: str
    pid: int
    uptime: float
    workers: Mapping[str, WorkerStats]
    total: Mapping[str, int]

    def wire(self) -> dict[str, Any]:
        """Its form in a reply."""
        return {
            "node": self.node,
            "pid": self.pid,
            "uptime": self.uptime,
            "workers": {name: worker.wire() for name, worker in self.workers.items()},
            "total": dict(self.total),
        }

    @classmethod
    def from_wire(cls, value: object, where: str) -> NodeStats:
        """A reply's body as the record.

        Raises:
            WireFormatError: it is not one (naming ``where`` and what is wrong).
        """
        return read_answer(value, cls, where)


@final
@attrs.frozen
class Pong:
    """Celery's answer to ``ping``: ``{"ok": "pong"}``."""

    ok: str = "pong"

    def wire(self) -> dict[str, Any]:
        """Its form in a reply."""
        return {"ok": self.ok}
