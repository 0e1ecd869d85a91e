"""How a node answers what a peer sent it: a delivery settled with the outcome
its actor gave (accepted, rejected with a condition, modified, released), a
delivery refused before any actor saw it (logged, and counted against the
actor), and a link refused with a condition. The incoming side
(``_inbound.py``) decides; these write the answer into proton's state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proton import Condition, Delivery, Link, symbol

from ..._log import log
from ...actors import ActorCell
from ...mailbox import Outcome
from ._engine import Engine
from ._raw import ACCEPTED, REJECTED, RELEASED, lib, set_condition

__all__ = ["refuse", "refuse_delivery", "settle"]

_update = lib.pn_delivery_update
_settle_delivery = lib.pn_delivery_settle


def refuse(link: Link, condition: str, description: str) -> None:
    link.condition = Condition(condition, description)
    link.close()


def settle(engine: Engine, delivery: Any, outcome: Outcome) -> None:
    """Answer the sender: runs when the actor is done with the message."""
    try:
        if engine.closed:
            return  # the sender is gone; it will send the message again
        state = outcome.state
        if state == "accepted":
            _update(delivery, ACCEPTED)
        elif state == "rejected":
            set_condition(delivery, outcome.condition or "amqp:internal-error", outcome.description)
            _update(delivery, REJECTED)
        elif state == "modified":
            wrapped = Delivery.wrap(delivery)  # type: ignore[no-untyped-call]
            local = wrapped.local
            local.failed = True
            local.undeliverable = True
            local.annotations = {
                symbol("actorctl-condition"): outcome.condition or "",
                symbol("actorctl-description"): outcome.description or "",
            }
            wrapped.update(Delivery.MODIFIED)
        else:
            _update(delivery, RELEASED)
        _settle_delivery(delivery)
        # Written at this loop turn's end while the writer is idle (no task
        # switch for it), else by the writer: ``EngineOutput.emit``.
        engine.emit()
    finally:
        lib.pn_decref(delivery)


def refuse_delivery(
    engine: Engine,
    actor: ActorCell | str,
    settle: Callable[[Outcome], None] | None,
    condition: str,
    description: str,
    message_id: str | None = None,
    key_id: str | None = None,
) -> None:
    if not isinstance(actor, str):  # an actor's inbox, not the session address
        actor.refused("rejected", condition)
        actor = actor.name
    log(
        "actorctl:delivery:rejected",
        peer=engine.peer,
        actor=actor,
        condition=condition,
        description=description,
        message_id=message_id,
        key=key_id,
    )
    if settle is not None:
        settle(Outcome.rejected(condition, description))
