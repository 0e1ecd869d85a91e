"""What the task layer keeps in its node's store: the tables, and their rows.

Each node has a store (``store/_store.py``: durable, or in memory with
``durable = false``). The task layer keeps there what must outlive the node's
process (docs/guarantees.md):

- ``delayed``: the scheduler's held tasks, by message id (the encoded message);
- ``revoked``: revoked task ids, for ``REVOKE_EXPIRES`` seconds;
- ``chords``: each chord barrier, by chord id (JSON);
- ``results``: each task's final state, by task id, for ``RESULT_EXPIRES``
  seconds (JSON), which ``_tasks`` answers to any caller (``result``).

Code reaches a node's store through :func:`store_of` (and the node's outbox
through :func:`node_outbox`), typed: an outbox that is not a node's is a
``ConfigError``, never a store in memory that would forget what it keeps.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from json.encoder import encode_basestring
from types import MappingProxyType
from typing import Any, Final, final

from ..._errors import ConfigError
from ..._log import log
from ...actors import Address, Outbox, Reroute
from ...cluster import NodeOutbox
from ...mailbox import Envelope
from ...store import Store
from ._protocol import H_CHORD, H_RETRIES, H_STATE, H_TASK_ID, READY_STATES, compact

__all__ = [
    "CHORDS_TABLE",
    "DELAYED",
    "RESULTS",
    "RESULT_EXPIRES",
    "REVOKED_TABLE",
    "REVOKE_EXPIRES",
    "DurableOutbox",
    "StoredResult",
    "json_row",
    "keep_result",
    "record_revokes",
    "result_keys",
    "store_of",
    "stored_result",
    "stored_revokes",
]

DELAYED: Final = "delayed"
REVOKED_TABLE: Final = "revoked"
CHORDS_TABLE: Final = "chords"
RESULTS: Final = "results"

#: Seconds a final result stays fetchable by id (Celery's ``result_expires``).
RESULT_EXPIRES: Final = 86400.0
#: Seconds a node remembers a revoke (Celery's ``REVOKES_MAX`` age).
REVOKE_EXPIRES: Final = 86400.0

#: A stored result as ``_tasks`` answers it: ``[state, body, headers]``.
StoredResult = list[Any]


def node_outbox(outbox: Outbox) -> NodeOutbox:
    """The outbox of the node that ``outbox`` sends through (itself, or the one a
    :class:`DurableOutbox` wraps).

    Raises:
        ConfigError: ``outbox`` is no node's: the task layer keeps its state in
            its node's store, so its actors and clients run on a node. Never a
            store in memory instead: durability must not vanish without a word.
    """
    if isinstance(outbox, DurableOutbox):
        return outbox.node
    if isinstance(outbox, NodeOutbox):
        return outbox
    raise ConfigError(
        f"{type(outbox).__name__} is not a node's outbox: task actors and clients keep "
        "their state in their node's store, so they run on a node (open_node, app.connect)"
    )


def store_of(outbox: Outbox) -> Store:
    """The store of the node ``outbox`` belongs to (see :func:`node_outbox`)."""
    return node_outbox(outbox).store


# -- results ---------------------------------------------------------------------------


def result_keys(request: Envelope) -> list[str]:
    """The ids a final document about ``request`` is kept under: its task id,
    and the id its caller holds (the correlation id: a chain's id for its last
    step) unless that is the chord a header task reports to."""
    headers = request.headers
    keys = [str(headers[H_TASK_ID])] if headers.get(H_TASK_ID) else []
    held = request.correlation_id
    if held and held not in keys and headers.get(H_CHORD) != held:
        keys.append(held)
    return keys


def keep_result(
    store: Store,
    now: float,
    request: Envelope,
    state: str,
    body: Any,
    expires: float = RESULT_EXPIRES,
) -> bool:
    """Put the final ``state`` of the task ``request`` in ``store`` (its node's,
    :func:`store_of`: the caller has it already, and syncs it), for ``expires``
    seconds from ``now`` (``app.conf.result_expires``); False if there was
    nothing to keep it under, or it is not JSON (logged)."""
    headers = request.headers
    task_id = headers.get(H_TASK_ID)
    if type(task_id) is str and task_id and task_id == request.correlation_id:
        keys = [task_id]  # the usual call: result_keys' answer, without the call
    else:
        keys = result_keys(request)
    if not keys:
        return False
    try:
        value = _result_row(state, body, request.subject, headers).encode()
    except (TypeError, ValueError) as exc:
        log("actorctl:result:unstorable", message_id=request.message_id, error=str(exc))
        return False
    until = now + expires
    for key in keys:
        store.put(RESULTS, key, value, expires=until)
    return True


def _result_row(state: str, body: Any, task: str, headers: Mapping[str, Any]) -> str:
    """A kept result's row: the JSON text of ``{"state", "body", "task"}`` and
    ``"retries"`` if the command's headers have an integer one, as
    :func:`compact` writes that object (the same text), written here for the
    usual values (an integer, null or text body, integer retries) with one
    call, the task name's quoting (and a text body's).

    Raises:
        TypeError, ValueError: the body is not JSON (as ``compact`` says).
    """
    if type(body) is int:
        text = "%d" % body  # noqa: UP031 (as json writes an int)
    elif body is None:
        text = "null"
    elif type(body) is str:
        text = _quote(body)
    else:
        text = compact(body)
    states = _QUOTED_STATES
    name = states[state] if state in states else compact(state)
    task_text = _quote(task)
    retries = headers.get(H_RETRIES)
    if type(retries) is int:
        return f'{{"state":{name},"body":{text},"task":{task_text},"retries":{retries}}}'
    if isinstance(retries, int):  # a subclass (a bool): as compact writes it
        return f'{{"state":{name},"body":{text},"task":{task_text},"retries":{compact(retries)}}}'
    return f'{{"state":{name},"body":{text},"task":{task_text}}}'


#: The final states as JSON text, each quoted once.
_QUOTED_STATES: Final = MappingProxyType({state: compact(state) for state in READY_STATES})
#: A text as JSON text, as ``compact`` quotes it (its encoder's ``ensure_ascii=False``).
_quote: Final = encode_basestring


def stored_result(store: Store, task_id: str) -> StoredResult | None:
    """The kept result of ``task_id`` as ``[state, body, headers]``, or None."""
    value = store.get(RESULTS, task_id)
    if value is None:
        return None
    try:
        row = json.loads(value)
        headers: dict[str, Any] = {H_STATE: str(row["state"]), H_TASK_ID: task_id}
    except (ValueError, TypeError, KeyError) as exc:
        log("actorctl:result:unreadable", task_id=task_id, error=str(exc))
        return None
    if isinstance(row.get("retries"), int):
        headers[H_RETRIES] = row["retries"]
    return [headers[H_STATE], row.get("body"), headers]


# -- revokes ---------------------------------------------------------------------------


def record_revokes(store: Store, ids: Iterable[str], terminate: bool, now: float) -> None:
    """Keep revoked ``ids`` for REVOKE_EXPIRES seconds. The caller syncs."""
    value = b"terminate" if terminate else b""
    for task_id in ids:
        store.put(REVOKED_TABLE, task_id, value, expires=now + REVOKE_EXPIRES)


def stored_revokes(store: Store) -> list[tuple[str, bool]]:
    """Every revoke the store keeps, oldest first: ``(task id, terminate)``."""
    return [(key, value == b"terminate") for key, value in store.items(REVOKED_TABLE)]


# -- durable sends -----------------------------------------------------------------------


@final
class DurableOutbox:
    """An ``Outbox`` whose every send goes to the node's backlog (durable), with
    message ids from ``message_id``: for ``send_task`` of a message that must
    not be lost, whose id stays the same when it is sent again after a restart
    (so its receiver takes it once)."""

    def __init__(self, outbox: Outbox, message_id: Callable[[], str]) -> None:
        self._outbox = outbox
        self._message_id = message_id
        #: The node's own outbox.
        self.node = node_outbox(outbox)
        self.store = self.node.store

    def new_message_id(self) -> str:
        return self._message_id()

    def now(self) -> float:
        return self._outbox.now()

    async def send(
        self,
        address: Address,
        envelope: Envelope,
        *,
        presettled: bool,
        confirm: bool,
        durable: bool = False,
        reroute: Reroute | None = None,
    ) -> None:
        await self._outbox.send(
            address, envelope, presettled=False, confirm=False, durable=True, reroute=reroute
        )

    def reply_address(self, address: Address) -> str:
        return self._outbox.reply_address(address)

    async def request(self, address: Address, envelope: Envelope, timeout: float) -> Envelope:
        return await self._outbox.request(address, envelope, timeout)

    def reply(self, envelope: Envelope, *, quiet: bool = False) -> int:
        return self._outbox.reply(envelope, quiet=quiet)

    def expect(
        self,
        correlation_id: str,
        take: Callable[[Envelope], None],
        *,
        peer: str | None = None,
    ) -> None:
        self._outbox.expect(correlation_id, take, peer=peer)

    def unexpect(self, correlation_id: str) -> None:
        self._outbox.unexpect(correlation_id)


def json_row(value: Mapping[str, Any]) -> bytes:
    """``value`` as a store row (compact JSON)."""
    return compact(value).encode()
