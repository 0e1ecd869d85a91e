"""Result documents for a caller whose reply link is on another node.

A caller that is not actorctl's task client (``actorctl call``, a client in
another language) connects to the node it sends to, which for a pool is the
services node (the pool's router): the worker that runs the task holds no reply
link of that caller. Its node then sends the document to ``_relay`` on the
services node, which sends it on the caller's reply link there, signed as that
node's own (docs/protocol.md §14.4). Only the cluster's own nodes may have a
document relayed: a client cannot make the services node answer someone else.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, final

import attrs

from ..._errors import ActorctlError
from ..._log import log
from ...actors import Actor, Address
from ...mailbox import ACCEPTED, BAD_KIND, KIND_DOCUMENT, Envelope, Outcome
from ..client._client import TaskClient
from ..protocol._protocol import H_RETRIES, H_STATE, H_TASK_ID, RELAY, SCHEDULER
from ..protocol._state import node_outbox

__all__ = ["ReplyRelay", "relay_document"]

UNAUTHORIZED: Final = "amqp:unauthorized-access"
_DOCUMENT_HEADERS: Final = (H_STATE, H_TASK_ID, H_RETRIES)


def relay_address(client: TaskClient) -> Address | None:
    """``_relay`` on the services node (where the pools' routers are), or None
    in a cluster without one (there a caller sends to the worker itself)."""
    directory = client.directory
    if SCHEDULER not in directory.addresses:
        return None
    services = directory.resolve(SCHEDULER)
    return Address(services.host, services.port, RELAY, services.scheme)


async def relay_document(client: TaskClient, document: Envelope) -> None:
    """Have the services node send ``document`` (to a reply address this node
    holds no link of) on its own link to the caller; logged and dropped if
    there is none, or it cannot be reached. Never waits for the outcome."""
    outbox = client.outbox
    relay = relay_address(client)
    if relay is None:
        outbox.reply(document)  # nobody else to ask: logged as dropped
        return
    # (Only a worker's node relays, never the services node itself; and _relay
    # never relays again: a document goes through it at most once.)
    copy = attrs.evolve(
        document,
        message_id=outbox.new_message_id(),
        to=str(relay),
        reply_to=document.to,
    )
    try:
        await outbox.send(relay, copy, presettled=False, confirm=False)
    except ActorctlError as exc:
        log(
            "actorctl:reply:dropped",
            reply_to=document.to,
            correlation_id=document.correlation_id,
            reason=f"no route to the caller here, and {relay} could not be reached: {exc}",
        )


@final
class ReplyRelay(Actor):
    """``_relay`` on the services node: sends each result document a node of
    the cluster gives it on the reply link its ``reply-to`` names."""

    name = RELAY
    takes_documents: ClassVar[bool] = True
    concurrency: ClassVar[int] = 16
    dedup_count: ClassVar[int] = 0  # a document sent twice is taken once by its caller

    async def handle_unmatched(
        self, envelope: Envelope
    ) -> tuple[Outcome, tuple[str, Any] | None] | None:
        reply_to = envelope.reply_to
        if envelope.kind != KIND_DOCUMENT or not reply_to or not reply_to.startswith("$reply/"):
            why = "_relay takes result documents whose reply-to is a caller's reply address"
            return Outcome.rejected(BAD_KIND, why), None
        outbox = self._require_cell().outbox
        # The node's keyring (None on an insecure node, which takes anyone's).
        keyring = node_outbox(outbox).settings.keyring
        if keyring is not None and envelope.sender not in keyring.members:
            why = "only the cluster's own nodes have results relayed"
            return Outcome.rejected(UNAUTHORIZED, why), None
        headers = {k: envelope.headers[k] for k in _DOCUMENT_HEADERS if k in envelope.headers}
        outbox.reply(
            Envelope(
                message_id=outbox.new_message_id(),
                to=reply_to,
                subject=envelope.subject,
                body=envelope.body,
                kind=KIND_DOCUMENT,
                correlation_id=envelope.correlation_id,
                creation_time=outbox.now(),
                headers=headers,
            )
        )
        return ACCEPTED, None
