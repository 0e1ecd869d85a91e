"""Actor: a class with handlers, a bounded mailbox and a concurrency budget."""

from __future__ import annotations

import re
from typing import ClassVar, Protocol

from .._errors import ActorctlError
from ..mailbox import Envelope
from ._address import Address
from ._background import TaskFn
from ._dedup import Handled
from ._handlers import Behaviour
from ._monitor import Monitors, Terminated
from ._ref import ActorRef, Outbox

__all__ = ["Actor", "ActorHost"]

_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


class ActorHost(Protocol):
    """What hosts a running actor (its cell, made by the node): the actor reads
    its address and outbox there and switches its behaviour there."""

    address: Address
    outbox: Outbox
    behaviour: Behaviour
    #: The node's monitors (None: the node offers none).
    monitors: Monitors | None

    @property
    def watching(self) -> set[str]:
        """Addresses this actor watches."""
        ...

    def stop(self) -> None: ...

    def start_soon(self, fn: TaskFn, *args: object) -> None: ...

    async def dispatch_with(self, behaviour: Behaviour, envelope: Envelope) -> Handled: ...


class Actor(Behaviour):
    """Subclass this and mark methods with ``@handler``.

    Class attributes tune it:

    - ``name``: the name it is reachable under on its node (default: the class
      name in snake_case).
    - ``mailbox_capacity``: the most messages it holds unsettled at once; this is
      the link credit its node grants to senders.
    - ``concurrency``: how many messages it handles at once (default 1, one at a
      time, as actors do); plain ``def`` handlers run in that many threads.
      Above 1, messages still begin in the order they arrived: each handler
      runs up to its first checkpoint (its first ``await`` that waits)
      before the next message is taken (``_runners.py``).
    - ``dedup_count``, ``dedup_seconds``: the idempotent-receiver window. A message
      whose id was handled within the last ``dedup_seconds`` (and among the last
      ``dedup_count``) is answered as the first time and not run again. The
      replies it keeps for that are bounded in bytes by the node
      (``max_kept_reply_bytes_per_actor``, ``max_kept_reply_bytes``): a copy
      whose reply was forgotten gets a ``ReplyForgotten`` error, not a second run.
    - ``keeps_state``: when its supervisor starts it again after a crash, the
      same instance carries on, state and all (Akka's "resume"). By default
      (False) a restart builds a fresh instance from the actor's spec: its class
      or factory, called again with the same arguments. An actor handed to a
      node as an *instance* has no spec to build from: it is started again as
      it is (give the class, or an ``ActorSpec``, for a fresh start).
    - ``handler_errors``: what an exception raised by a handler does
      (docs/supervision.md, "What crashes an actor"). ``"reply"`` (the
      default, request-reply as in Orleans): the caller gets the error, the
      actor keeps its state and goes on. ``"crash"`` (OTP's way, and Akka's):
      the caller gets the error, then the actor crashes and its supervisor
      restarts it fresh. An ``ActorSpec`` or ``SupervisorSpec`` may choose
      instead of the class.

    Example::

        class Greeter(Actor):
            @handler
            async def greet(self, name: str) -> str:
                return f"hello, {name}"
    """

    name: ClassVar[str | None] = None
    mailbox_capacity: ClassVar[int] = 100
    concurrency: ClassVar[int] = 1
    dedup_count: ClassVar[int] = 10_000
    dedup_seconds: ClassVar[float] = 300.0
    #: Whether it takes document messages (results): data sinks do.
    takes_documents: ClassVar[bool] = False
    keeps_state: ClassVar[bool] = False
    handler_errors: ClassVar[str] = "reply"

    _cell: ActorHost | None = None

    @classmethod
    def default_name(cls) -> str:
        return cls.name or _CAMEL.sub("_", cls.__name__).lower()

    # -- lifecycle hooks ---------------------------------------------------------

    async def on_start(self) -> None:
        """Runs before the actor takes its first message (in the task that
        starts it: its supervisor's), after each restart too."""

    async def on_stop(self) -> None:
        """Runs after the actor took its last message (in its last task, or
        its supervisor's when that stops it); at most 5 s."""

    def on_drain(self) -> None:
        """Runs when its node begins a graceful stop (in the node's task; it must
        not block). The actor takes no new message from then on: those queued
        in its mailbox are released to their senders. Its handlers that are
        running finish within the node's grace; a handler that holds a message
        it has not begun (one that waits for a slot of its own) should answer
        it ``released`` (never looked at: its sender sends it elsewhere, or
        here again after the next start) rather than begin it now."""

    async def on_terminated(self, terminated: Terminated) -> None:
        """Runs in the actor's task when an actor it watches is gone (see
        :meth:`watch`). An exception here crashes the actor."""

    # -- monitors ----------------------------------------------------------------

    async def watch(self, ref: ActorRef) -> None:
        """Hear (in :meth:`on_terminated`, once) when the actor ``ref`` points to
        stops for good, or its node is lost; a restart is not an end. The watch
        is in place when this returns; an actor that does not exist (or a node
        that cannot be reached) is reported at once as terminated."""
        cell = self._require_cell()
        if cell.monitors is None:
            raise ActorctlError(f"the node hosting {self!r} offers no monitors")
        cell.watching.add(str(ref.address))
        await cell.monitors.watch(cell.address, ref.address)

    async def unwatch(self, ref: ActorRef) -> None:
        """Stop watching; no Terminated for ``ref`` reaches the actor after this."""
        cell = self._require_cell()
        cell.watching.discard(str(ref.address))
        if cell.monitors is not None:
            await cell.monitors.unwatch(cell.address, ref.address)

    def stop(self) -> None:
        """Take no more messages and end once those being handled are done: a
        normal exit (a permanent child is started again; transient and
        temporary ones are not). Queued messages are released to their senders."""
        self._require_cell().stop()

    def start_soon(self, fn: TaskFn, *args: object) -> None:
        """Run ``await fn(*args)`` as a task of this actor, besides its handlers
        (a timer, a loop over what it holds): from ``on_start`` or a handler.
        The task belongs to this incarnation of the actor: it is cancelled
        before ``on_stop`` when the actor stops, or is stopped to be started
        again, and an exception from it crashes the actor (its supervisor
        decides what follows).

        Raises:
            ActorctlError: the actor is not running (or is stopping).
        """
        self._require_cell().start_soon(fn, *args)

    # -- behaviour ---------------------------------------------------------------

    def become(self, behaviour: Behaviour) -> None:
        """Handle the next messages with ``behaviour``'s handler table."""
        self._require_cell().behaviour = behaviour

    def unbecome(self) -> None:
        """Return to the actor's own handlers."""
        self._require_cell().behaviour = self

    async def handle_own(self, envelope: Envelope) -> Handled:
        """Handle ``envelope`` with the actor's own handlers, whatever its
        behaviour is now, exactly as its cell handles a message (roles,
        arguments, expiry, concurrency): what a behaviour that stands in for
        the actor (a circuit breaker letting a probe through) calls. Runs in
        the task of the message being handled."""
        return await self._require_cell().dispatch_with(self, envelope)

    # -- sending ---------------------------------------------------------------

    @property
    def address(self) -> Address:
        """This actor's own address."""
        return self._require_cell().address

    def ref(self, address: Address | str) -> ActorRef:
        """A ref to another actor, sent through this actor's node."""
        if isinstance(address, str):
            address = Address.parse(address)
        return ActorRef(address, self._require_cell().outbox)

    def _require_cell(self) -> ActorHost:
        if self._cell is None:
            raise ActorctlError(
                f"actor {type(self).__name__} is not running: host it on a node first"
            )
        return self._cell

    def __repr__(self) -> str:
        where = f" at {self._cell.address}" if self._cell is not None else ""
        return f"<{type(self).__name__}{where}>"
