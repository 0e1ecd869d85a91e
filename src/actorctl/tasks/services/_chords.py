"""The chord barrier: counts a chord header's results, then sends its body.

``chords`` on the services node. A caller opens a barrier (``open``) before it
sends the header's tasks, whose results come to the barrier as documents (its
address is their ``reply-to``); when the last is in, the barrier sends the body
with the list of results, answering the chord's caller in its place
(docs/protocol.md §14.10).

Each barrier (its tasks, body, caller and the results so far) is kept in the
node's store (table ``chords``, by chord id): written and committed before the
barrier accepts the message that changed it, reloaded when the barrier starts,
deleted once the body is handed to the node's backlog (a durable send, under a
message id made from the chord id, so that a body sent again after a restart is
taken once). A barrier found complete when it starts sends its body then.

Across hosts, a result is counted only once its commit is confirmed, which
includes the services role's standbys (docs/deploy.md, "Replication"), and
the body is sent only after that: a holder deposed without knowing it (cut
off) cannot count a result (its commit is refused, ``ShipRefused``), so it
gives the result back (``modified``) instead of completing the chord on its
side while the new holder's copy of the barrier waits for that result.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any, ClassVar, Final

import attrs

from ..._errors import ActorctlError
from ..._log import log
from ...actors import Actor, handler
from ...mailbox import ACCEPTED, KIND_DOCUMENT, Envelope, Outcome
from ...store import ShipRefused, Store
from ..client._client import Directory, TaskClient, send_task
from ..protocol._protocol import (
    CHORD_BARRIER_NAME,
    FAILURE,
    H_STATE,
    H_TASK_ID,
    READY_STATES,
    SUCCESS,
    signature_from_wire,
)
from ..protocol._send_options import SendOptions
from ..protocol._state import CHORDS_TABLE, DurableOutbox, json_row, store_of
from ..protocol._task_errors import TaskError
from ..worker._documents import send_document

__all__ = ["ChordBarrier"]

BODY_SUFFIX: Final = "/body"


@attrs.define
class _Chord:
    tasks: list[str]
    body: dict[str, Any]
    reply_to: str | None
    results: dict[str, Any] = attrs.field(factory=dict)

    @property
    def complete(self) -> bool:
        return all(task in self.results for task in self.tasks)

    def row(self) -> bytes:
        return json_row(attrs.asdict(self))

    @classmethod
    def from_row(cls, value: bytes) -> _Chord:
        """Raises ValueError for a row that is not a chord."""
        try:
            data = json.loads(value)
            chord = cls(list(data["tasks"]), dict(data["body"]), data.get("reply_to"))
            chord.results.update(data.get("results") or {})
        except (TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"not a chord: {exc}") from None
        return chord


#: A result for a chord whose barrier this node is taking over: send it again.
TAKING_OVER: Final = "actorctl:taking-over"
#: The ``modified`` reason for a result this node may not count: it no longer
#: holds the services role (across hosts).
NOT_HOLDER: Final = "actorctl:not-holder"


class ChordBarrier(Actor):
    """``chords``: holds each chord's barrier. It counts the header's results as
    they arrive and, when the last is in, sends the body with the list of them."""

    name = CHORD_BARRIER_NAME
    takes_documents: ClassVar[bool] = True
    mailbox_capacity: ClassVar[int] = 1000
    # Each result waits for a commit: many at once share one. (A chord's state
    # changes only between awaits, so concurrent results cannot lose one.)
    concurrency: ClassVar[int] = 16
    dedup_count: ClassVar[int] = 0

    def __init__(self, directory: Directory) -> None:
        self.directory = directory
        self.chords: dict[str, _Chord] = {}
        self._client: TaskClient | None = None
        self._store: Store | None = None
        self._copied: Callable[[str, str], bool] | None = None

    def defer_while_copied(self, copied: Callable[[str, str], bool]) -> None:
        """Across hosts: ``copied(table, key)`` says whether a copy of another
        services node's store, which this node takes over when it takes the
        services role, still holds that row. A result for a chord no barrier
        here has yet, but such a copy holds, is refused for now (``modified``,
        TAKING_OVER): its sender sends it again once the barrier is taken over.
        Workers send results here as soon as etcd names this node the holder,
        which may be before it has taken the lost holder's barriers on."""
        self._copied = copied

    async def on_start(self) -> None:
        """Runs in the task that starts it: reload the barriers its node's store
        keeps; a complete one sends its body (in a task of the barrier's own)."""
        outbox = self._require_cell().outbox
        self._client = TaskClient(outbox, self.directory)
        store = self._store = store_of(outbox)
        self.chords.clear()  # started again as it was: what it held is in the store
        for chord_id, value in store.items(CHORDS_TABLE):
            try:
                self.chords[chord_id] = _Chord.from_row(value)
            except ValueError as exc:
                log("actorctl:chord:unreadable", chord_id=chord_id, error=str(exc))
                store.delete(CHORDS_TABLE, chord_id)
        if self.chords:
            log("actorctl:chord:resumed", chords=len(self.chords))
        complete = [chord_id for chord_id, chord in self.chords.items() if chord.complete]
        if complete:
            self.start_soon(self._complete_all, complete)

    def adopt(self, chord_ids: list[str]) -> int:
        """Take on the barriers put in its node's store under ``chord_ids``
        while it runs (taken over from another services node's store, a
        replica's), as it reloads what the store held when it started; a
        complete one sends its body. Returns how many."""
        store = self.store
        taken: list[str] = []
        for chord_id in chord_ids:
            value = store.get(CHORDS_TABLE, chord_id)
            if value is None or chord_id in self.chords:
                continue
            try:
                self.chords[chord_id] = _Chord.from_row(value)
            except ValueError as exc:
                log("actorctl:chord:unreadable", chord_id=chord_id, error=str(exc))
                store.delete(CHORDS_TABLE, chord_id)
                continue
            taken.append(chord_id)
        if taken:
            log("actorctl:chord:resumed", chords=len(taken), taken_over=True)
        complete = [chord_id for chord_id in taken if self.chords[chord_id].complete]
        if complete:
            self.start_soon(self._complete_all, complete)
        return len(taken)

    @property
    def client(self) -> TaskClient:
        if self._client is None:
            raise ActorctlError("the chord barrier is not running: host it on a node")
        return self._client

    @property
    def store(self) -> Store:
        if self._store is None:
            raise ActorctlError("the chord barrier is not running: host it on a node")
        return self._store

    @handler
    async def open(
        self, chord_id: str, tasks: list[str], body: dict[str, Any], reply_to: str | None = None
    ) -> None:
        """Open a barrier; answered once the store keeps it. Opened again (its
        caller sent it again), it keeps the results it has."""
        chord = self.chords.get(chord_id)
        if chord is None:
            chord = self.chords[chord_id] = _Chord(list(tasks), body, reply_to)
        self.store.put(CHORDS_TABLE, chord_id, chord.row())
        await self.store.sync()

    async def handle_unmatched(
        self, envelope: Envelope
    ) -> tuple[Outcome, tuple[str, Any] | None] | None:
        if envelope.kind != KIND_DOCUMENT:
            return None
        chord_id = str(envelope.correlation_id)
        chord = self.chords.get(chord_id)
        state = envelope.headers.get(H_STATE)
        member = str(envelope.headers.get(H_TASK_ID))
        if state not in READY_STATES:
            return ACCEPTED, None  # STARTED, RETRY: the barrier waits for the final one
        # (the copy is forgotten only once its barriers are adopted here)
        if chord is None and self._copied is not None and self._copied(CHORDS_TABLE, chord_id):
            why = f"chord {chord_id}: its barrier is being taken over here; send it again"
            return Outcome.modified(TAKING_OVER, why), None
        if chord is None or member not in chord.tasks:
            # Not (or no longer) one of a chord's results: a copy that came again
            # after the chord ended, or a result for a barrier never opened here.
            log(
                "actorctl:chord:unexpected-result",
                chord_id=chord_id,
                task_id=member,
                message_id=envelope.message_id,
                reason="no open barrier has this task" if chord else "no barrier open",
            )
            return ACCEPTED, None
        if state != SUCCESS:
            return await self._failed(chord_id, chord, member, state, envelope.body), None
        if member in chord.results:
            return ACCEPTED, None  # sent again
        chord.results[member] = envelope.body
        self.store.put(CHORDS_TABLE, chord_id, chord.row())
        try:  # counted once committed (across hosts: on the standbys too), and only then acted on
            await self.store.sync()
        except ShipRefused as exc:
            return self._not_holder(chord_id, chord, member, exc), None
        if chord.complete:
            await self._complete(chord_id, chord)
        return ACCEPTED, None

    async def _failed(
        self, chord_id: str, chord: _Chord, member: str, state: str, body: object
    ) -> Outcome:
        """A header task failed: the chord fails (its caller is told), once a
        commit proves this node may still act (across hosts: it was not
        deposed; else the result is given back, for the holder's barrier)."""
        self.store.put(CHORDS_TABLE, chord_id, chord.row())  # unchanged: the proof
        try:
            await self.store.sync()
        except ShipRefused as exc:
            return self._not_holder(chord_id, chord, member, exc)
        del self.chords[chord_id]
        error = body if isinstance(body, dict) else {}  # as it came
        why = f"{error.get('type', '')} {error.get('message', error.get('reason', ''))}"
        message = f"task {member} of the chord ended {state}: {why}".strip()
        try:
            await self._fail_chord(chord_id, chord, TaskError("ChordError", message))
        except ShipRefused as exc:  # deposed since the proof: its caller may hear twice
            log("actorctl:chord:failure-unconfirmed", chord_id=chord_id, error=str(exc))
            return Outcome.modified(NOT_HOLDER, f"chord {chord_id}: {exc}")
        return ACCEPTED

    def _not_holder(
        self, chord_id: str, chord: _Chord, member: str, refused: ShipRefused
    ) -> Outcome:
        """Across hosts: the result could not be counted here (this node was
        deposed: the services role is another's, whose barrier took this
        chord over from its copy): not counted, and given back to its sender,
        whose backlog sends it again, to the holder's barrier once its
        directory follows the role."""
        chord.results.pop(member, None)
        self.store.put(CHORDS_TABLE, chord_id, chord.row())  # as it was, in memory too
        log(
            "actorctl:chord:not-counted",
            chord_id=chord_id,
            task_id=member,
            error=str(refused),
            why="this node no longer holds the services role: the result goes to the "
            "holder's barrier, and the body is not sent from here",
        )
        return Outcome.modified(NOT_HOLDER, f"chord {chord_id}: {refused}")

    async def _complete_all(self, chord_ids: list[str]) -> None:
        """Send the bodies of the complete barriers found at start."""
        for chord_id in chord_ids:
            chord = self.chords.get(chord_id)
            if chord is not None and chord.complete:
                await self._complete(chord_id, chord)

    async def _complete(self, chord_id: str, chord: _Chord) -> None:
        """Every result is in: send the body (durably), then delete the barrier."""
        self.chords.pop(chord_id, None)
        values = [chord.results[t] for t in chord.tasks]
        client = TaskClient(
            DurableOutbox(self.client.outbox, lambda: chord_id + BODY_SUFFIX), self.directory
        )
        try:
            name, pool, args, kwargs, immutable, options = signature_from_wire(chord.body, "")
            await send_task(
                client,
                task=name,
                pool=pool,
                args=args if immutable else [values, *args],
                kwargs=kwargs,
                task_id=chord_id,
                reply_to=chord.reply_to,
                options=SendOptions.from_wire(options, f"task {name}"),
            )
        except ShipRefused as exc:  # deposed since the last result was counted
            log(
                "actorctl:chord:body-unconfirmed",
                chord_id=chord_id,
                error=str(exc),
                why="the body left this node's backlog; the node that holds the services "
                "role has the complete barrier in its copy and sends it too (the same "
                "message id: at least once)",
            )
            return
        except Exception as exc:  # the body cannot be sent: its caller must hear of it
            log("actorctl:chord:unsendable", chord_id=chord_id, error=str(exc))
            await self._fail_chord(
                chord_id, chord, TaskError(type(exc).__name__, f"chord body: {exc}")
            )
            return
        self.store.delete(CHORDS_TABLE, chord_id)
        with contextlib.suppress(ShipRefused):  # deposed meanwhile: the store logs it
            await self.store.sync()

    async def _fail_chord(self, chord_id: str, chord: _Chord, failure: TaskError) -> None:
        """Tell the chord's caller (if any) that it failed, under the chord's id
        (kept as the chord's result either way), then delete the barrier."""
        outbox = self.client.outbox
        request = Envelope(
            message_id=outbox.new_message_id(),
            to=chord.reply_to or f"/{CHORD_BARRIER_NAME}",
            subject=str(chord.body.get("t")),
            body=None,
            correlation_id=chord_id,
            reply_to=chord.reply_to,
            creation_time=outbox.now(),
            headers={H_TASK_ID: chord_id},
        )
        targets = [chord.reply_to] if chord.reply_to else []
        await send_document(self.client, request, FAILURE, failure.wire(), targets)
        self.store.delete(CHORDS_TABLE, chord_id)
        await self.store.sync()
