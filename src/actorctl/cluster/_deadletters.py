"""Dead letters: the messages a node gave up on, kept for a person to look at.

A message goes here when it cannot be done: a task that ran out of retries, or
failed with a poisonous error (the task layer sends those to the node's
``_deadletters`` actor), or a message whose ``absolute-expiry-time`` passed
while it waited in the node's backlog (every instance refused it, or its peer
was down). Each dead letter keeps the reason, the last error, the retry count,
the message id and trace id, where the message was going, and the message
itself (its headers as they were, signature included), so that it can be sent
again as it was.

The letters are a table of the node's store (durable with a durable store),
bounded by a count and a time to live: past the count the oldest goes; a
letter older than the TTL is gone. Letters taken over from another node's
store (a services node taking the role over, with its copy of the lost
holder's) come under the same bounds at once (:meth:`DeadLetters.adopt`).
When the table is 80 % full an error line is logged, once, until it drains
below that again.

``_deadletters`` on every node answers ``list``, ``show``, ``retry`` and
``purge`` (what ``actorctl deadletters`` sends, through the Controller, or
directly across hosts), and
``fill`` (how many it holds, and whether 80 % full: what ``cluster status``
shows).
"""

from __future__ import annotations

import base64
import json
import os
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from typing import Any, Final, final

import attrs

from .._errors import ConfigError
from .._log import log
from ..actors import REDRIVE, Actor, Address, NotPermitted, caller, handler
from ..actors._answers import read_answer
from ..mailbox import (
    ACCEPTED,
    BAD_ARGUMENTS,
    NOT_PERMITTED,
    Envelope,
    IdentityKey,
    Outcome,
    Role,
    decode,
    encode,
)
from ..store._store import Store

__all__ = [
    "AGENT",
    "BOUND_WORDS",
    "DEAD_LETTERS",
    "DEAD_LETTERS_TABLE",
    "REASONS",
    "REASON_EXPIRED",
    "REASON_NOT_RETRIED",
    "REASON_OUT_OF_RETRIES",
    "REASON_POISON",
    "DeadLetterAgent",
    "DeadLetterBounds",
    "DeadLetterFill",
    "DeadLetters",
    "bound_error",
]

AGENT: Final = "_deadletters"
DEAD_LETTERS: Final = AGENT
TABLE: Final = "deadletters"
#: The store table of the dead letters (for whoever takes another store's over).
DEAD_LETTERS_TABLE: Final = TABLE
#: Why a message is a dead letter.
REASON_OUT_OF_RETRIES: Final = "out-of-retries"
REASON_POISON: Final = "poison"
REASON_EXPIRED: Final = "expired"
#: A retry the cluster could not make (no scheduler to delay it).
REASON_NOT_RETRIED: Final = "not-retried"
REASONS: Final = frozenset(
    {REASON_OUT_OF_RETRIES, REASON_POISON, REASON_EXPIRED, REASON_NOT_RETRIED}
)
#: How full (a fraction of ``max``) the table is when an error line is logged.
ALARM_AT: Final = 0.8
#: The condition an ``add`` from another identity than the node's is rejected with.
#: The header a task message carries its trace id in (docs/protocol.md §6.2).
TRACE: Final = "trace"


@attrs.frozen
class DeadLetterBounds:
    """How many dead letters a node keeps (``max``), and for how many seconds (``ttl``)."""

    max: int = 10_000
    ttl: float = 7 * 86_400.0

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.max, int) or isinstance(self.max, bool) or self.max < 1:
            raise ConfigError(bound_error("max", self.max))
        if type(self.ttl) not in (int, float) or self.ttl <= 0:
            raise ConfigError(bound_error("ttl", self.ttl))


#: What each of :class:`DeadLetterBounds`' bounds must be, in its errors'
#: words (cluster.toml's ``[node.deadletters]`` is read with them too).
BOUND_WORDS: Final = {"max": "an integer >= 1", "ttl": "seconds > 0"}


def bound_error(name: str, value: object) -> str:
    """The error for a bound ``name`` of the dead letters that is ``value``."""
    return f"dead letters: {name} = {value!r} must be {BOUND_WORDS[name]}"


@final
@attrs.frozen
class DeadLetterFill:
    """How full a node's dead letters are: how many it keeps (``held``), at
    most (``max``), and whether that is 80 % of ``max`` or more (the state
    ``cluster status`` reports)."""

    held: int
    max: int
    nearly_full: bool

    def wire(self) -> dict[str, Any]:
        """Its form in a reply (``_deadletters``' ``fill``)."""
        return {"held": self.held, "max": self.max, "nearly_full": self.nearly_full}

    @classmethod
    def from_wire(cls, value: object, where: str) -> DeadLetterFill:
        """A reply's body as the record.

        Raises:
            WireFormatError: it is not one (naming ``where`` and what is wrong).
        """
        return read_answer(value, cls, where)


@final
class DeadLetters:
    """A node's dead letters, in its store.

    Args:
        node: the node's name, for logs.
        store: the node's store.
        clock: wall-clock seconds (the store's clock).
        bounds: how many, and for how long.
    """

    def __init__(
        self, node: str, store: Store, clock: Callable[[], float], bounds: DeadLetterBounds
    ) -> None:
        self.node = node
        self.bounds = bounds
        self._store = store
        self._clock = clock
        self._alarmed = False
        # Letter id to expiry time, oldest first (the count bound and the TTL
        # evict from the front): read from the store at first use, after the
        # node's store has loaded what it kept.
        self._index: OrderedDict[str, float] | None = None
        #: Letters added since the node started, by (reason, target actor).
        self.added: dict[tuple[str, str], int] = {}

    def __len__(self) -> int:
        return len(self._held())

    def _held(self) -> OrderedDict[str, float]:
        """The index of the letters held, less those past their TTL."""
        index = self._index
        if index is None:
            rows = [json.loads(value) for _, value in self._store.items(TABLE)]
            rows.sort(key=lambda r: r["time"])
            index = self._index = OrderedDict((r["id"], r["time"] + self.bounds.ttl) for r in rows)
        now = self._clock()
        while index and next(iter(index.values())) <= now:
            index.popitem(last=False)  # the store has let its row expire
        return index

    def add(
        self,
        *,
        reason: str,
        target: str,
        envelope: Envelope,
        error: Mapping[str, Any] | None = None,
        retries: int = 0,
        reset: tuple[str, ...] = (),
        sender: str = "",
    ) -> str:
        """Keep ``envelope`` (which was going to ``target``) as a dead letter;
        returns its id. ``reset``: headers a re-drive leaves out (what made it
        a dead letter: the task layer names its retry count). ``sender``: the
        key id that authenticated it where it was given up on ("" for this
        node's own message, or on a node without keys)."""
        now = self._clock()
        letter_id = f"{int(now * 1000):013d}-{os.urandom(4).hex()}"
        record = {
            "id": letter_id,
            "node": self.node,
            "reason": reason,
            "time": now,
            "error": dict(error) if error else None,
            "retries": retries,
            "message_id": envelope.message_id,
            "sender": sender,
            # The task id first: `actorctl logs --task` finds the eliot trace from it.
            "trace_id": str(envelope.correlation_id or envelope.headers.get(TRACE) or ""),
            "subject": envelope.subject,
            "target": target,
            "reset": list(reset),
            "message": base64.b64encode(bytes(encode(envelope))).decode(),
        }
        expires = now + self.bounds.ttl
        key = (reason, target.rpartition("/")[2])  # by reason and actor, for the metrics
        self.added[key] = self.added.get(key, 0) + 1
        self._held()[letter_id] = expires
        self._store.put(TABLE, letter_id, json.dumps(record).encode(), expires=expires)
        log(
            "actorctl:deadletter:added",
            node=self.node,
            id=letter_id,
            reason=reason,
            message_id=envelope.message_id,
            trace_id=record["trace_id"],
            target=target,
            retries=retries,
            error=record["error"],
        )
        self._bound()
        return letter_id

    def adopt(self, keys: Collection[str]) -> int:
        """Count the letters under ``keys``, put into the store while the
        node runs (taken over from another node's store: a replica's): they
        are held from now on, by the time each was given up on, under the
        count bound (the oldest go past it) and the TTL at once, not after a
        restart. Returns how many of them it holds."""
        self._index = None  # read again from the store, which holds them now
        index = self._held()
        self._bound()
        return sum(key in index for key in keys)

    def _bound(self) -> None:
        index = self._held()
        while len(index) > self.bounds.max:
            key, _ = index.popitem(last=False)
            self._store.delete(TABLE, key)
            log("actorctl:deadletter:evicted", node=self.node, id=key, max=self.bounds.max)
        held = len(index)
        if held >= ALARM_AT * self.bounds.max:
            if not self._alarmed:
                self._alarmed = True
                log(
                    "actorctl:deadletter:nearly-full",
                    node=self.node,
                    held=held,
                    max=self.bounds.max,
                    error="the dead letters are 80 % full: the oldest go when they are full "
                    "(`actorctl deadletters list`, then retry or purge them)",
                )
        else:
            self._alarmed = False

    def fullness(self) -> DeadLetterFill:
        """How full the table is (80 % of ``max`` or more: the state the error
        line reports)."""
        held = len(self._held())
        return DeadLetterFill(held, self.bounds.max, held >= ALARM_AT * self.bounds.max)

    def fill(self) -> dict[str, Any]:
        """:meth:`fullness` in its wire form (``DeadLetterFill.wire``)."""
        return self.fullness().wire()

    def records(self, reason: str | None = None) -> list[dict[str, Any]]:
        """Every letter (oldest first), or those of one ``reason``."""
        found = [json.loads(value) for _, value in self._store.items(TABLE)]
        return [r for r in found if reason is None or r["reason"] == reason]

    def get(self, letter_id: str) -> dict[str, Any] | None:
        value = self._store.get(TABLE, letter_id)
        return None if value is None else dict(json.loads(value))

    def take(self, letter_id: str) -> dict[str, Any] | None:
        """Remove a letter and return it (None if there is none by that id)."""
        record = self.get(letter_id)
        if record is not None:
            self._store.delete(TABLE, letter_id)
            self._held().pop(letter_id, None)
        self._bound()
        return record

    def purge(self, reason: str | None = None) -> int:
        """Remove every letter (of ``reason``); how many."""
        gone = self.records(reason)
        index = self._held()
        for record in gone:
            self._store.delete(TABLE, record["id"])
            index.pop(record["id"], None)
        self._bound()
        return len(gone)


def summary(record: Mapping[str, Any]) -> dict[str, Any]:
    """A letter without its message (what ``list`` shows)."""
    return {k: v for k, v in record.items() if k not in ("message", "reset")}


def redrive_envelope(record: Mapping[str, Any], clock: Callable[[], float]) -> Envelope:
    """The message of a letter as it is sent again: the same message id,
    with a ``redrive`` header one more than it had (receivers that saw the
    original know the copy by it: their duplicate detection folds it into its
    key, docs/protocol.md §5.1), a fresh ``creation-time`` and no
    ``absolute-expiry-time`` (it is being done now, by hand), without the
    signature and the headers the letter resets."""
    envelope = decode(base64.b64decode(record["message"]))
    dropped = {*record.get("reset", ()), "sig", "sig_alg", "sig_key", "sig_node", "origin-key"}
    headers = {k: v for k, v in envelope.headers.items() if k not in dropped}
    before = headers.get(REDRIVE)
    headers[REDRIVE] = (before if isinstance(before, int) and before > 0 else 0) + 1
    return attrs.evolve(
        envelope,
        creation_time=clock(),
        expiry_time=None,
        headers=headers,
    )


@final
class DeadLetterAgent(Actor):
    """Hosted on every node as ``_deadletters``: takes the node's dead letters
    (``add``, from the node's own task workers) and answers for them.

    Args:
        letters: the node's dead letters.
        identity: the node's key: only a message it signed may ``add`` (a
            letter is sent again under the node's signature, so no other
            identity may plant one). None (an insecure node): anyone may.
    """

    name = AGENT

    def __init__(self, letters: DeadLetters, identity: IdentityKey | None = None) -> None:
        self._letters = letters
        self._own_key = identity.key_id if identity is not None else None

    async def handle_unmatched(
        self, envelope: Envelope
    ) -> tuple[Outcome, tuple[str, Any] | None] | None:
        """``add``: keep the message a letter carries (its fields as keyword
        arguments: ``reason``, ``target``, ``message`` (base64 of its encoded
        form), ``error``, ``retries``, ``reset``)."""
        if envelope.subject != "add":
            return None
        if self._own_key is not None and envelope.sender != self._own_key:
            why = f"only node {self._letters.node!r} itself adds its dead letters"
            return Outcome.rejected(NOT_PERMITTED, why), None
        try:
            _, fields = envelope.call()
            reason, target = fields["reason"], fields["target"]
            if reason not in REASONS:
                raise ValueError(f"no dead-letter reason {reason!r} (known: {sorted(REASONS)})")
            letter = decode(base64.b64decode(fields["message"]))
            retries = int(fields.get("retries") or 0)
            reset = tuple(str(key) for key in fields.get("reset") or ())
            sender = str(fields.get("sender") or "")
        except Exception as exc:
            return Outcome.rejected(BAD_ARGUMENTS, f"not a dead letter: {exc}"), None
        self._letters.add(
            reason=reason,
            target=str(target),
            envelope=letter,
            error=fields.get("error"),
            retries=retries,
            reset=reset,
            sender=sender,
        )
        return ACCEPTED, None

    @handler
    async def list(self, reason: str | None = None, limit: int = 100) -> dict[str, Any]:
        """The newest ``limit`` letters of this node (or of one reason), oldest
        first, without their messages, and how many there are in all. An
        operator sees every letter; any other caller only those it sent."""
        found = self._letters.records(reason)
        asking = caller()
        if not asking.is_operator():
            found = [record for record in found if record.get("sender") == asking.key]
        shown = found[-limit:] if limit > 0 else []
        return {"total": len(found), "letters": [summary(r) for r in shown]}

    @handler
    async def fill(self) -> dict[str, Any]:
        """How full the table is (``DeadLetters.fill``): what ``cluster status`` shows."""
        return self._letters.fill()

    @handler
    async def show(self, letter_id: str) -> dict[str, Any] | None:
        """One letter, its message decoded (None if it has none by that id).
        Only the operator role, or the key that sent the letter's message, may
        read it: anyone else is refused (``NotPermitted``)."""
        record = self._letters.get(letter_id)
        if record is None:
            return None
        asking = caller()
        if not asking.is_operator() and record.get("sender") != asking.key:
            role = asking.role.value if asking.role is not None else "none"
            raise NotPermitted(
                f"handler 'show' of actor {AGENT!r}: dead letter {letter_id} was sent by "
                f"another key; only its sender or the operator role may read it (the "
                f"caller's key {asking.key} has the {role} role)"
            )
        envelope = decode(base64.b64decode(record["message"]))
        shown = summary(record)
        shown["headers"] = dict(envelope.headers)
        shown["body"] = envelope.body
        shown["correlation_id"] = envelope.correlation_id
        shown["reply_to"] = envelope.reply_to
        return shown

    @handler(roles=Role.OPERATOR)
    async def retry(self, letter_id: str) -> dict[str, Any] | None:
        """Send a letter again to its target, once: the letter leaves the table
        once its node's backlog holds the message (a second ``retry`` finds
        nothing: None). A letter that cannot be sent stays."""
        record = self._letters.get(letter_id)
        if record is None:
            return None
        cell = self._require_cell()
        envelope = redrive_envelope(record, cell.outbox.now)
        target = Address.parse(record["target"])
        await cell.outbox.send(target, envelope, presettled=False, confirm=False, durable=True)
        self._letters.take(letter_id)
        log(
            "actorctl:deadletter:redriven",
            node=self._letters.node,
            id=letter_id,
            message_id=envelope.message_id,
            trace_id=record["trace_id"],
            target=str(target),
        )
        return {
            "id": letter_id,
            "message_id": envelope.message_id,
            "target": str(target),
            "redrive": envelope.headers[REDRIVE],
        }

    @handler(roles=Role.OPERATOR)
    async def purge(self, reason: str | None = None) -> int:
        """Remove every letter (of one reason); how many."""
        return self._letters.purge(reason)
