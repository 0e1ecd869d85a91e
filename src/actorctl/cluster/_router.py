"""Router: one logical name, a pool of actor instances across nodes.

A router is an actor that handles every message by forwarding it to one of its
instances: the least loaded first (fewest of its messages in flight there).

- An ask (a command whose reply-to is a reply link back to this node, with
  ``relays_replies``) is asked of the instance, and the router relays the reply;
  it tries another instance when the one it chose answers ``modified`` (it could
  not handle it there), does not know the actor, or does not answer in time.
- Every other message is forwarded as it is: the same message id, correlation
  id, headers and reply-to, so that a copy the sender sends again (after a
  reconnect) is known for the same message downstream. The router signs the
  copy as itself and asserts whom it came from (``origin-key``: the sender's
  key id), so that the instance's duplicate detection knows it as the
  sender's, not the router's (docs/protocol.md §5.1). By default the router
  settles it once the instance has handled the copy (acks-late through the
  router) and tries another instance as for an ask.
- A router that ``hands_over`` (a task pool's) gives every other message,
  as it is, to the node's backlog for the chosen instance, and settles it once
  the backlog holds it (in the node's store, when durable): to its sender, the
  pool has accepted it. The backlog sends it until the instance settles it, and
  moves it to another instance when that one refuses it (``modified``, unknown
  actor) or its node cannot be reached: at-least-once, whatever happens to one
  node.
- A message that carries the ``at_most_once`` header (a task sent with
  ``acks_late=False``) is forwarded pre-settled and settled at once, whatever
  the router's kind: no backlog holds it, nothing sends it again, so an
  instance that dies while it runs it never gets it a second time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Final

import attrs
import trio

from .._errors import (
    ActorctlError,
    AskTimeout,
    Modified,
    PeerUnavailable,
    Rejected,
    RemoteError,
    UnknownActor,
    WireFormatError,
)
from .._log import log
from ..actors import Actor, Address, Outbox
from ..mailbox import (
    ACCEPTED,
    DECODE_ERROR,
    KIND_COMMAND,
    NO_INSTANCE,
    NOT_FOUND,
    ORIGIN_KEY,
    STATUS_ERROR,
    STATUS_OK,
    Envelope,
    Outcome,
)
from ._reload import Shift
from .config._config import ClusterConfig, NodeConfig
from .outbox._backlog import Backlog, Done, Reroute
from .outbox._outbox import NodeOutbox

__all__ = ["AT_MOST_ONCE", "Router"]

#: The header that asks every hop to send a message pre-settled (at-most-once):
#: a true value, on a task sent with ``acks_late=False`` (docs/protocol.md §14.2).
AT_MOST_ONCE: Final = "at_most_once"


class Router(Actor):
    """Forwards every message to one of ``instances`` (addresses of actors).

    Args:
        instances: where the work can go.
        attempt_timeout: seconds an instance gets to settle a message before the
            router sends it to another (the first may still run it later).
    """

    mailbox_capacity: ClassVar[int] = 100
    concurrency: ClassVar[int] = 100  # messages it forwards at once
    # A message its sender sends again (after a reconnect) is taken once: the
    # router answers the copy as it answered the first, and hands over nothing.
    dedup_count: ClassVar[int] = 100_000
    #: True: a command whose reply-to is a reply address (an ask) is called on
    #: the instance, and the router relays the reply. False: every message is
    #: forwarded as it is, and the instance answers the caller itself, on a
    #: reply link the caller must hold to the instance's node.
    relays_replies: ClassVar[bool] = True
    #: True: a message that is not an ask is handed to the node's backlog and
    #: settled once it is held there (the backlog moves it to another instance
    #: when one refuses it). False: it is settled once an instance handled it.
    hands_over: ClassVar[bool] = False
    #: The pool whose workers it routes to, as a cluster that spans hosts lists
    #: them in etcd (``_member_routing.py``); None: it routes to its instances only.
    follows_pool: str | None = None

    def __init__(self, instances: Sequence[Address | str], *, attempt_timeout: float = 5.0) -> None:
        if not instances:
            raise ValueError("a router needs at least one instance")
        self.instances = [Address.parse(i) if isinstance(i, str) else i for i in instances]
        self.attempt_timeout = attempt_timeout
        self.load = {address: 0 for address in self.instances}
        self._turn = 0  # where the next pre-settled message starts looking

    def retarget(
        self, instances: Sequence[Address | str], why: str = "cluster reload"
    ) -> tuple[list[str], list[str], int]:
        """Route to ``instances`` from now on (``cluster reload``, or ``why``
        else: a node left the cluster's membership): what waits in the node's
        backlog for an instance no longer among them moves to the others; what
        is already on its way there stays (the backlog sends it elsewhere if
        that instance's node cannot be reached). Returns the instances added,
        those removed, and how many messages moved.

        Raises:
            ValueError: no instances.
        """
        if not instances:
            raise ValueError(f"router {self.address.name!r} needs at least one instance")
        new = [Address.parse(i) if isinstance(i, str) else i for i in instances]
        added = [a for a in new if a not in self.instances]
        removed = [a for a in self.instances if a not in new]
        self.instances = new
        for address in new:
            self.load.setdefault(address, 0)  # a removed one's count stays until settled
        moved = 0
        outbox = self._require_cell().outbox
        if removed and isinstance(outbox, NodeOutbox):
            moved = outbox.backlog.evacuate(
                removed, f"router {self.address.name!r} no longer routes to it ({why})"
            )
        if added or removed:
            log(
                "actorctl:router:retargeted",
                router=self.address.name,
                added=[str(a) for a in added],
                removed=[str(a) for a in removed],
                moved=moved,
                why=why,
            )
        return [str(a) for a in added], [str(a) for a in removed], moved

    def follow_cluster(self, config: ClusterConfig, node: NodeConfig, shift: Shift) -> list[str]:
        """Follow a reloaded cluster file: its ``[[router]]`` table's instances,
        as ``shift`` says for the nodes a reload changes. What changed, in lines."""
        wanted = dict(config.routes(node)).get(self.address.name)
        if wanted is None:  # gone from the file: its node restarts without it
            return []
        return self.route_to(config, wanted, shift)

    def route_to(self, config: ClusterConfig, wanted: Sequence[str], shift: Shift) -> list[str]:
        """Retarget to ``wanted``, less what runs on a node ``shift`` keeps away,
        with what runs on a node it keeps pending as it is now; unchanged if
        that leaves none. What changed, in lines."""
        away = {(n.host, n.port) for n in config.nodes if n.name in shift.away}
        pending = {(n.host, n.port) for n in config.nodes if n.name in shift.pending}
        present = [a for a in wanted if Address.parse(a).endpoint not in away | pending]
        present += [str(a) for a in self.instances if a.endpoint in pending - away]
        if not present:
            return []
        added, removed, moved = self.retarget(present)
        if not (added or removed):
            return []
        line = f"router {self.address.name}: instances {len(present)}"
        for what, which in (("added", added), ("removed", removed)):
            if which:
                line += f"; {what} {', '.join(which)}"
        return [line + (f"; {moved} waiting messages moved" if moved else "")]

    async def handle_unmatched(
        self, envelope: Envelope
    ) -> tuple[Outcome, tuple[str, Any] | None] | None:
        try:
            envelope.call()  # a body that is not [args, kwargs] is refused here
        except WireFormatError as exc:
            return Outcome.rejected(DECODE_ERROR, str(exc)), None
        if envelope.headers.get(AT_MOST_ONCE):
            return await self._forward_settled(envelope), None
        # A reply-to that is an actor's address (a task's caller) gets the result
        # from the instance itself; one that is a reply link back to this node
        # (an ask) gets it through the router.
        reply_to = envelope.reply_to
        wants_reply = (
            self.relays_replies
            and reply_to is not None
            and envelope.kind == KIND_COMMAND
            and "://" not in reply_to
        )
        outbox = self._require_cell().outbox
        if not wants_reply and self.hands_over and isinstance(outbox, NodeOutbox):
            await self._hand_over(outbox, envelope)
            return ACCEPTED, None
        tried: set[Address] = set()
        # The instances that answered modified (a circuit breaker open, say):
        # made at the first such answer, not for every message.
        refusing: set[Address] | None = None
        reasons: list[str] = []
        for _ in range(3 * len(self.instances)):
            if refusing is not None and len(refusing) == len(self.instances):
                break  # every instance refuses it: the sender's backlog tries again later
            fresh = [a for a in self.instances if a not in tried] or self.instances
            target = min(fresh, key=lambda a: self.load[a])
            tried.add(target)
            self.load[target] += 1
            try:
                with trio.fail_after(self.attempt_timeout):
                    if wants_reply:
                        # Asked on the caller's behalf: the instance checks the
                        # caller's role, never the router's (docs/security.md).
                        ask = asked(
                            envelope, to=target, outbox=outbox, timeout=self.attempt_timeout
                        )
                        reply = await outbox.request(target, ask, self.attempt_timeout)
                        return ACCEPTED, _answer(reply)
                    # The message itself, ids, headers and all (a task's chain,
                    # its time limits, its caller), signed afresh.
                    copy = forwarded(envelope, to=str(target), creation_time=outbox.now())
                    await outbox.send(target, copy, presettled=False, confirm=True)
                    return ACCEPTED, None
            except RemoteError as exc:
                return ACCEPTED, (STATUS_ERROR, {"type": exc.type_name, "message": exc.message})
            except Rejected as exc:
                return Outcome.rejected(exc.condition, exc.description), None
            except (Modified, UnknownActor, AskTimeout, PeerUnavailable, trio.TooSlowError) as exc:
                if isinstance(exc, Modified):
                    if refusing is None:
                        refusing = set()
                    refusing.add(target)
                reason = f"{target}: {type(exc).__name__} {exc}".strip()
                reasons.append(reason)
                log(
                    "actorctl:router:rerouted",
                    router=self.address.name,
                    message_id=envelope.message_id,
                    reason=reason,
                )
            finally:
                self.load[target] -= 1
        return Outcome.modified(
            NO_INSTANCE, f"no instance took message {envelope.message_id}: {'; '.join(reasons)}"
        ), None

    async def _forward_settled(self, envelope: Envelope) -> Outcome:
        """Send an at-most-once message on pre-settled, to the least loaded
        instance (taking turns among equals): it is never sent again, so an
        instance that dies while it handles it is not given it a second time.
        Its sender sent it pre-settled too: the outcome is only logged."""
        outbox = self._require_cell().outbox
        turn = self._turn = (self._turn + 1) % len(self.instances)
        order = self.instances[turn:] + self.instances[:turn]
        reasons: list[str] = []
        for target in sorted(order, key=lambda a: self.load[a]):
            copy = forwarded(envelope, to=str(target), creation_time=outbox.now())
            try:
                await outbox.send(target, copy, presettled=True, confirm=False)
            except (UnknownActor, PeerUnavailable) as exc:
                reasons.append(f"{target}: {type(exc).__name__} {exc}".strip())
                continue
            return ACCEPTED
        return Outcome.modified(
            NO_INSTANCE, f"no instance took message {envelope.message_id}: {'; '.join(reasons)}"
        )

    async def on_start(self) -> None:
        """Take back what this router's node held for its instances when it
        stopped (its backlog, read back from the store): those tasks count as in
        flight again, and move to another instance as new ones do."""
        outbox = self._require_cell().outbox
        if self.hands_over and isinstance(outbox, NodeOutbox):
            backlog = outbox.backlog
            self._adopt(backlog)
            # ... and what its node takes over from another node's store later
            backlog.on_resume(self.address.name, lambda: self._adopt(backlog))

    def _adopt(self, backlog: Backlog) -> None:
        adopted = backlog.adopt(set(self.instances), self._track)
        if adopted:
            log("actorctl:router:adopted", router=self.address.name, messages=adopted)

    async def pass_on(self, envelope: Envelope, target: Address | None = None) -> None:
        """Hand ``envelope`` to the node's backlog for ``target`` (by default the
        least loaded instance), as a router that ``hands_over`` does with what
        it takes: for a subclass that held it back first. Returns once the
        backlog holds it."""
        outbox = self._require_cell().outbox
        if not isinstance(outbox, NodeOutbox):
            raise ActorctlError(f"router {self.address.name!r} hands over only on a node")
        await self._hand_over(outbox, envelope, target)

    async def _hand_over(
        self, outbox: NodeOutbox, envelope: Envelope, target: Address | None = None
    ) -> None:
        """Give the message to the node's backlog for ``target`` or the least
        loaded instance; it counts as in flight there until the instance
        settles it."""
        if target is None:
            turn = self._turn = (self._turn + 1) % len(self.instances)
            order = self.instances[turn:] + self.instances[:turn]
            target = min(order, key=lambda a: self.load[a])  # taking turns among equals
        done, reroute = self._track(target, envelope.message_id)
        copy = forwarded(envelope, to=str(target))
        await outbox.hand_over(target, copy, on_done=done, reroute=reroute)

    def _track(self, target: Address, message_id: str) -> tuple[Done, Reroute]:
        """Count one message in flight at ``target``: how its final outcome and
        its refusals (moving it to another instance) are told to this router."""
        self.load[target] += 1
        where = [target]

        def reroute(failed: Address, outcome: Outcome) -> Address | None:
            if outcome.state == "rejected" and outcome.condition != NOT_FOUND:
                return None  # bad input: no other instance takes it either
            others = [a for a in self.instances if a != failed] or self.instances
            elsewhere = min(others, key=lambda a: self.load[a])
            self.load[failed] -= 1
            self.load[elsewhere] += 1
            where[0] = elsewhere
            log(
                "actorctl:router:rerouted",
                router=self.address.name,
                message_id=message_id,
                reason=f"{failed}: {outcome.condition or outcome.state}",
                description=outcome.description,
                to=str(elsewhere),
            )
            return elsewhere

        def done(outcome: Outcome) -> None:
            self.load[where[0]] -= 1

        return done, reroute


def asked(envelope: Envelope, *, to: Address, outbox: Outbox, timeout: float) -> Envelope:
    """The copy of an ask a router sends on as an ask of its own: the caller's
    message asserting the caller's identity (:func:`forwarded`: the receiver
    checks the caller's role, not the router's), with a fresh id and this
    node's reply address (the answer comes back here), due by the caller's
    deadline or within ``timeout``."""
    now = outbox.now()
    copy = forwarded(envelope, to=str(to), creation_time=now)
    message_id = outbox.new_message_id()
    expiry = envelope.expiry_time
    return attrs.evolve(
        copy,
        message_id=message_id,
        correlation_id=message_id,
        reply_to=outbox.reply_address(to),
        expiry_time=expiry if expiry is not None else now + timeout,
    )


def _answer(reply: Envelope) -> tuple[str, Any]:
    """What the caller is answered: the instance's reply, as it gave it."""
    if reply.headers.get("status") == STATUS_ERROR:
        body = reply.body if isinstance(reply.body, dict) else {}
        error = {"type": str(body.get("type", "Error")), "message": str(body.get("message", ""))}
        return STATUS_ERROR, error
    return STATUS_OK, reply.body


def forwarded(envelope: Envelope, *, to: str, creation_time: float | None = None) -> Envelope:
    """The copy of ``envelope`` a router sends on: the same message, asserting the
    identity it came from (``origin-key``, honoured from a cluster member only),
    or no origin at all if it came unauthenticated."""
    headers = dict(envelope.headers)
    if envelope.sender:
        headers[ORIGIN_KEY] = envelope.sender
    else:
        headers.pop(ORIGIN_KEY, None)
    created = envelope.creation_time if creation_time is None else creation_time
    return attrs.evolve(envelope, to=to, creation_time=created, headers=headers)
