"""The chord barrier: counts a chord header's results, then sends its body.

``chords`` on the services node. A caller opens a barrier (``open``) before it
sends the header's tasks, whose results come to the barrier as documents (its
address is their ``reply-to``); when the last is in, the barrier sends the body
with the list of results, answering the chord's caller in its place
(docs/protocol.md §14.10).
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from .._log import log
from ..actors import Actor, handler
from ..mailbox import ACCEPTED, KIND_DOCUMENT, Envelope, Outcome
from ._client import Directory, TaskClient, send_task
from ._documents import send_document
from ._protocol import (
    CHORD_BARRIER_NAME,
    FAILURE,
    H_STATE,
    H_TASK_ID,
    READY_STATES,
    SUCCESS,
    signature_from_wire,
)

__all__ = ["ChordBarrier"]


@attrs.define
class _Chord:
    tasks: list[str]
    body: dict[str, Any]
    reply_to: str | None
    results: dict[str, Any] = attrs.field(factory=dict)
    failed: bool = False


class ChordBarrier(Actor):
    """``chords``: holds each chord's barrier. It counts the header's results as
    they arrive and, when the last is in, sends the body with the list of them."""

    name = CHORD_BARRIER_NAME
    takes_documents: ClassVar[bool] = True
    mailbox_capacity: ClassVar[int] = 1000
    dedup_count: ClassVar[int] = 0

    def __init__(self, directory: Directory) -> None:
        self.directory = directory
        self.chords: dict[str, _Chord] = {}

    @handler
    async def open(
        self, chord_id: str, tasks: list[str], body: dict[str, Any], reply_to: str | None = None
    ) -> None:
        self.chords[chord_id] = _Chord(list(tasks), body, reply_to)

    async def handle_unmatched(
        self, envelope: Envelope
    ) -> tuple[Outcome, tuple[str, Any] | None] | None:
        if envelope.kind != KIND_DOCUMENT:
            return None
        chord = self.chords.get(str(envelope.correlation_id))
        state = envelope.headers.get(H_STATE)
        if chord is None or chord.failed or state not in READY_STATES:
            return ACCEPTED, None
        chord_id = str(envelope.correlation_id)
        client = TaskClient(self._require_cell().outbox, self.directory)
        member = str(envelope.headers.get(H_TASK_ID))
        if member not in chord.tasks:
            return ACCEPTED, None  # not one of this chord's tasks
        if state != SUCCESS:
            chord.failed = True
            del self.chords[chord_id]
            error = envelope.body if isinstance(envelope.body, dict) else {}
            failure = {
                "type": "ChordError",
                "message": f"task {envelope.headers.get(H_TASK_ID)} of the chord ended {state}: "
                f"{error.get('type', '')} {error.get('message', error.get('reason', ''))}".strip(),
            }
            await self._fail_chord(client, envelope, chord, chord_id, failure)
            return ACCEPTED, None
        chord.results[member] = envelope.body
        if len(chord.results) < len(chord.tasks):
            return ACCEPTED, None
        del self.chords[chord_id]
        values = [chord.results[t] for t in chord.tasks]
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
                options=options,
            )
        except Exception as exc:  # the body cannot be sent: its caller must hear of it
            log(
                "actorctl:chord:unsendable",
                message_id=envelope.message_id,
                chord_id=chord_id,
                error=str(exc),
            )
            failure = {"type": type(exc).__name__, "message": f"chord body: {exc}"}
            await self._fail_chord(client, envelope, chord, chord_id, failure)
        return ACCEPTED, None

    async def _fail_chord(
        self,
        client: TaskClient,
        envelope: Envelope,
        chord: _Chord,
        chord_id: str,
        failure: dict[str, Any],
    ) -> None:
        """Tell the chord's caller (if any) that it failed, under the chord's id."""
        if chord.reply_to:
            request = attrs.evolve(
                envelope,
                subject=str(chord.body.get("t")),
                reply_to=chord.reply_to,
                headers={H_TASK_ID: chord_id},
            )
            await send_document(client, request, FAILURE, failure, [chord.reply_to])
