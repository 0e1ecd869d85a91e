"""A boxed worker as an actor: its front, and the child that runs both.

The front is an ordinary actor hosted on the node: messages to it are signed
and checked by the node as any actor's, and the process behind it sees only
the request (handler, arguments, deadline, trace id), never a key. By default
it is a :class:`BoxedActor`, whose handlers are those the process serves; a
task app puts a task worker in front instead, to serve a pool.
"""

from __future__ import annotations

from typing import Any, ClassVar, final

import trio

from .._errors import RemoteError
from ..actors import Actor, ActorCell
from ..mailbox import ACCEPTED, STATUS_ERROR, STATUS_OK, Envelope, Outcome
from ._boxed import Boxed, BoxedUnavailable

__all__ = ["BoxedActor", "run_boxed_child"]


@final
class BoxedActor(Actor):
    """Answers each message by the handler of its subject, run in the boxed
    worker's processes: the reply is the handler's value, or its error's type
    and message."""

    mailbox_capacity: ClassVar[int] = 1000
    concurrency: ClassVar[int] = 1000
    keeps_state = True

    def __init__(self, boxed: Boxed) -> None:
        self.boxed = boxed

    async def handle_unmatched(
        self, envelope: Envelope
    ) -> tuple[Outcome, tuple[str, Any] | None] | None:
        try:
            args, kwargs = envelope.call()
            value = await self.boxed.call(
                envelope.subject,
                args,
                kwargs,
                trace=envelope.correlation_id or envelope.message_id,
            )
        except (RemoteError, BoxedUnavailable) as exc:
            type_name = exc.type_name if isinstance(exc, RemoteError) else type(exc).__name__
            message = exc.message if isinstance(exc, RemoteError) else str(exc)
            return ACCEPTED, (STATUS_ERROR, {"type": type_name, "message": message})
        except Exception as exc:  # a body that is not [args, kwargs]
            return ACCEPTED, (STATUS_ERROR, {"type": type(exc).__name__, "message": str(exc)})
        return ACCEPTED, (STATUS_OK, value)


async def run_boxed_child(
    boxed: Boxed, cell: ActorCell, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """The child start function of a boxed worker: its processes' supervisor,
    then its front's inbox; a supervisor that gives up raises into its parent."""
    async with trio.open_nursery() as nursery:
        await nursery.start(_supervise, boxed, nursery.cancel_scope)
        await nursery.start(cell.run)
        task_status.started()


async def _supervise(
    boxed: Boxed, scope: trio.CancelScope, *, task_status: trio.TaskStatus[Any]
) -> None:
    await boxed.supervise(task_status=task_status)
    scope.cancel(reason=f"boxed worker {boxed.spec.name!r} stopped")  # and its front with it
