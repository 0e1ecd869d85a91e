"""The event hub: fans each published event out to every subscribing task.

An event (``@app.event``) is published as one event message to the cluster's
hub (``events`` on the services node), which sends one task command per
subscribing task (once per subscribing pool) and settles the event message once
all were sent (docs/protocol.md §14.9).
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..._errors import ActorctlError, WireFormatError
from ..._log import log
from ...actors import Actor, BadArguments
from ...mailbox import ACCEPTED, Envelope, Outcome
from ..app._registry import TaskRegistry
from ..client._client import Directory, TaskClient, send_task
from ..client._validate import check_fields
from ..protocol._protocol import (
    BAD_ARGUMENTS,
    DECODE_ERROR,
    EVENT_HUB_NAME,
    H_EVENT,
    H_EVENT_ID,
    UNKNOWN_EVENT,
    header_sinks,
    new_task_id,
)
from ..protocol._send_options import SendOptions

__all__ = ["EventHub"]


class EventHub(Actor):
    """``events``: takes each published event and delivers it to every task that
    subscribes to it, once per subscribing pool; settles it once all took it."""

    name = EVENT_HUB_NAME
    concurrency: ClassVar[int] = 100
    dedup_count: ClassVar[int] = 10_000

    def __init__(self, apps: list[TaskRegistry], directory: Directory) -> None:
        self.apps = apps
        self.directory = directory

    async def handle_unmatched(
        self, envelope: Envelope
    ) -> tuple[Outcome, tuple[str, Any] | None] | None:
        event_name = envelope.subject
        subscribers = [task for app in self.apps for task in app.subscriptions.get(event_name, [])]
        if not any(event_name in app.events for app in self.apps):
            return Outcome.rejected(
                UNKNOWN_EVENT, f"no event named {event_name!r} is defined"
            ), None
        try:
            _, fields = envelope.call()
            for app in self.apps:
                if event_name in app.events:
                    check_fields(fields, event_name, app.events[event_name])
        except WireFormatError as exc:
            return Outcome.rejected(DECODE_ERROR, str(exc)), None
        except BadArguments as exc:  # the publisher hears it, not each subscriber's log
            return Outcome.rejected(BAD_ARGUMENTS, str(exc)), None
        client = TaskClient(self._require_cell().outbox, self.directory)
        sinks = header_sinks(envelope.headers)
        for task in subscribers:
            try:
                await send_task(
                    client,
                    task=task.name,
                    pool=task.pool,
                    args=[fields],
                    kwargs={},
                    task_id=new_task_id(),
                    reply_to=None,
                    options=SendOptions(sinks=(*task.sinks, *sinks), acks_late=task.acks_late),
                    headers={H_EVENT: event_name, H_EVENT_ID: envelope.message_id},
                    durable=True,
                )
            except ActorctlError as exc:  # one subscriber's pool must not cost the others
                log(
                    "actorctl:event:undeliverable",
                    event=event_name,
                    task=task.name,
                    message_id=envelope.message_id,
                    error=str(exc),
                )
        log("actorctl:event:delivered", event=event_name, subscribers=[t.name for t in subscribers])
        return ACCEPTED, None
