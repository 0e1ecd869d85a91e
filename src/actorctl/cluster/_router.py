"""Router: one logical name, a pool of actor instances across nodes.

A router is an actor that handles every message by forwarding it to one of its
instances: the least loaded first (fewest of its messages in flight there). It
settles the message it received only once the instance has handled the copy
(acks-late through the router), answers the caller with the instance's reply,
and sends the message to another instance when the one it chose answers
``modified`` (it could not handle it there), does not know the actor, or does
not settle it in time (its node died): at-least-once, whatever happens to one
node.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs
import trio

from .._errors import (
    AskTimeout,
    Modified,
    PeerUnavailable,
    Rejected,
    RemoteError,
    UnknownActor,
    WireFormatError,
)
from .._log import log
from ..actors import Actor, Address
from ..mailbox import (
    ACCEPTED,
    DECODE_ERROR,
    KIND_COMMAND,
    NO_INSTANCE,
    STATUS_ERROR,
    STATUS_OK,
    Envelope,
    Outcome,
)

__all__ = ["Router"]


class Router(Actor):
    """Forwards every message to one of ``instances`` (addresses of actors).

    Args:
        instances: where the work can go.
        attempt_timeout: seconds an instance gets to settle a message before the
            router sends it to another (the first may still run it later).
    """

    mailbox_capacity: ClassVar[int] = 100
    concurrency: ClassVar[int] = 100  # messages it forwards at once
    dedup_count: ClassVar[int] = 0  # the instances detect duplicates
    #: True: a command whose reply-to is a reply address (an ask) is called on
    #: the instance, and the router relays the reply. False: every message is
    #: forwarded as it is, and the instance answers the caller itself, on a
    #: reply link the caller must hold to the instance's node.
    relays_replies: ClassVar[bool] = True

    def __init__(self, instances: Sequence[Address | str], *, attempt_timeout: float = 5.0) -> None:
        if not instances:
            raise ValueError("a router needs at least one instance")
        self.instances = [Address.parse(i) if isinstance(i, str) else i for i in instances]
        self.attempt_timeout = attempt_timeout
        self.load = {address: 0 for address in self.instances}

    async def handle_unmatched(
        self, envelope: Envelope
    ) -> tuple[Outcome, tuple[str, Any] | None] | None:
        try:
            args, kwargs = envelope.call()
        except WireFormatError as exc:
            return Outcome.rejected(DECODE_ERROR, str(exc)), None
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
        tried: set[Address] = set()
        reasons: list[str] = []
        for _ in range(3 * len(self.instances)):
            fresh = [a for a in self.instances if a not in tried] or self.instances
            target = min(fresh, key=lambda a: self.load[a])
            tried.add(target)
            self.load[target] += 1
            try:
                ref = self.ref(target).with_options(timeout=self.attempt_timeout)
                with trio.fail_after(self.attempt_timeout):
                    if wants_reply:
                        result = await ref.ask(envelope.subject, *args, **kwargs)
                        return ACCEPTED, (STATUS_OK, result)
                    # The message itself, headers and all (a task's chain, its
                    # time limits, its caller), under a new id.
                    copy = attrs.evolve(
                        envelope,
                        message_id=outbox.new_message_id(),
                        to=str(target),
                        creation_time=outbox.now(),
                    )
                    await outbox.send(target, copy, presettled=False, confirm=True)
                    return ACCEPTED, None
            except RemoteError as exc:
                return ACCEPTED, (STATUS_ERROR, {"type": exc.type_name, "message": exc.message})
            except Rejected as exc:
                return Outcome.rejected(exc.condition, exc.description), None
            except (Modified, UnknownActor, AskTimeout, PeerUnavailable, trio.TooSlowError) as exc:
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
