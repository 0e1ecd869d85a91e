"""The task protocol's names and encodings (docs/protocol.md §14), defined once.

Header keys of task commands and result documents, the names of the cluster's
task services, task states, the error conditions task actors settle with, task
ids, and the wire form of chains and signatures.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import zlib
from typing import Any, Final, final

from ...mailbox import BAD_ARGUMENTS, DECODE_ERROR, UNKNOWN_HANDLER, Envelope
from ._send_options import sink_list

__all__ = [
    "BAD_ARGUMENTS",
    "BEAT_NAME",
    "CHORDS",
    "CONTROL",
    "DECODE_ERROR",
    "EVENTS",
    "FAILURE",
    "PENDING",
    "READY_STATES",
    "RELAY",
    "RESERVED_NAMES",
    "RETRY",
    "REVOKED",
    "SCHEDULER",
    "SCHEDULER_ROLE",
    "SERVICES_ROLE",
    "STARTED",
    "STATES",
    "SUCCESS",
    "UNKNOWN_HANDLER",
    "TaskIds",
    "compact",
    "envelope_retries",
    "envelope_task_id",
    "header_sinks",
    "new_task_id",
    "next_step",
    "pack_chain",
    "signature_from_wire",
    "signatures_in",
    "sink_list",
    "unpack_chain",
]

# Application-property headers of task messages (docs/protocol.md §14.2).
H_TASK_ID: Final = "task_id"
H_POOL: Final = "pool"
H_STATE: Final = "state"
H_RETRIES: Final = "retries"
H_ETA: Final = "eta"
H_CHAIN: Final = "chain"
H_LINK: Final = "link"
H_LINK_ERROR: Final = "link_error"
H_SINKS: Final = "sinks"
H_TIMELIMIT: Final = "timelimit"
H_PRIORITY: Final = "priority"
H_MAP: Final = "map"
H_TRACK: Final = "track_started"
H_GROUP: Final = "group"
H_CHORD: Final = "chord"
H_EVENT: Final = "event"
H_EVENT_ID: Final = "event_id"
H_RETRY_POLICY: Final = "retry_policy"
H_LAST_ERROR: Final = "last_error"
H_TRACE: Final = "trace"

CHAIN_SEPARATOR: Final = "\n"  # compact JSON never contains a raw newline
CHAIN_PACKED: Final = "zlib:"
CHAIN_PACK_OVER: Final = 4096
#: A packed chain is packed in parts of this many steps, joined by ``.`` (not a
#: base64 character): a step unpacks and packs only the last part again.
CHAIN_PART_STEPS: Final = 64
CHAIN_PART_SEPARATOR: Final = "."

# Where the cluster's task services are, by name in a directory, and the
# actor names they take on their nodes (no pool may take one of these).
EVENTS: Final = "$events"
SCHEDULER: Final = "$scheduler"
CHORDS: Final = "$chords"
CONTROL: Final = "_tasks"  # the per-node task control actor (revokes)
RELAY: Final = "_relay"  # on the services node: result documents for its callers
EVENT_HUB_NAME: Final = "events"
SCHEDULER_NAME: Final = "scheduler"
BEAT_NAME: Final = "beat"  # on the services node: fires the periodic tasks
#: The role of the one beat that fires a cluster's periodic tasks (a lease of
#: the Controller on one host, of etcd across hosts).
SCHEDULER_ROLE: Final = "scheduler"
#: Across hosts, the services node that the pools' routers, the scheduler of
#: delayed tasks and the event hub are reached at (tasks/client/_services_role.py).
SERVICES_ROLE: Final = "services"
CHORD_BARRIER_NAME: Final = "chords"
RESERVED_NAMES: Final = frozenset(
    {
        EVENT_HUB_NAME,
        CHORD_BARRIER_NAME,
        SCHEDULER_NAME,
        BEAT_NAME,
        CONTROL,
        RELAY,
        "_node",
        "_deadletters",
    }
)

# Task states (§14.4). PENDING is what a caller knows before any document came.
PENDING: Final = "PENDING"
STARTED: Final = "STARTED"
RETRY: Final = "RETRY"
SUCCESS: Final = "SUCCESS"
FAILURE: Final = "FAILURE"
REVOKED: Final = "REVOKED"
STATES: Final = frozenset({PENDING, STARTED, RETRY, SUCCESS, FAILURE, REVOKED})
READY_STATES: Final = frozenset({SUCCESS, FAILURE, REVOKED})

# Error conditions task actors settle with (§14.5, §14.7, §14.9); the generic
# ones (BAD_ARGUMENTS, DECODE_ERROR, UNKNOWN_HANDLER) are mailbox/_conditions.py's.
UNKNOWN_TASK: Final = "actorctl:unknown-task"
UNKNOWN_SINK: Final = "actorctl:unknown-sink"
UNKNOWN_EVENT: Final = "actorctl:unknown-event"
SINK_FAILED: Final = "actorctl:sink-failed"
NO_POOL: Final = "actorctl:no-pool"

REVOKED_MEMORY: Final = 100_000  # revoked ids a node (or the scheduler) remembers


def new_task_id() -> str:
    """A task id unique across processes: 32 random hex digits (128 bits, as
    many as a UUID4 carries). Random rather than a counter, so that no module
    holds state and any code can make one, in any process, without an owner."""
    return os.urandom(16).hex()


#: How many task ids a :class:`TaskIds` draws with one read of the system's randomness.
ID_BATCH: Final = 256


@final
class TaskIds:
    """Task ids as :func:`new_task_id` makes them, drawn ID_BATCH at a time,
    for a sender that makes many (a caller's client, in its caller's thread).

    A read of the system's randomness lets go of the GIL, and a caller's
    thread that lets go of it while its client's trio thread runs waits for
    it again (issue 30): one read per ID_BATCH ids, not per task. Any thread
    may take one (a list's pop and extend hold the GIL). Its owner is of no
    use in a forked child (a client's trio thread is not there), so neither
    are the ids it holds.
    """

    __slots__ = ("_drawn",)

    def __init__(self) -> None:
        self._drawn: list[str] = []

    def new(self) -> str:
        """A task id none had before."""
        try:
            return self._drawn.pop()
        except IndexError:
            pass
        digits = os.urandom(16 * ID_BATCH).hex()
        self._drawn.extend([digits[i : i + 32] for i in range(0, len(digits), 32)])
        return self._drawn.pop()


# Made once (``json.dumps`` with options makes an encoder per call, and every
# task's result row is written through it): its bound ``encode``, as
# mailbox/_envelope.py keeps its own; the encoder's settings never change.
_compact_encode: Final = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False
).encode


def compact(value: Any) -> str:
    """``value`` as compact JSON text (no white space; never a raw line feed)."""
    return _compact_encode(value)


def pack_chain(text: str) -> str:
    """A chain header as sent: the text itself, or, past CHAIN_PACK_OVER
    characters, ``zlib:`` and its steps in parts of CHAIN_PART_STEPS, each the
    base64 of its zlib compression, joined by ``.``. A long chain would
    otherwise cost each step time in proportion to its length (signing,
    checking, routing); parts let a step unpack and pack only the last one
    (:func:`next_step`)."""
    if len(text) <= CHAIN_PACK_OVER:
        return text
    steps = text.split(CHAIN_SEPARATOR)
    parts = [
        _deflate(CHAIN_SEPARATOR.join(steps[at : at + CHAIN_PART_STEPS]))
        for at in range(0, len(steps), CHAIN_PART_STEPS)
    ]
    return CHAIN_PACKED + CHAIN_PART_SEPARATOR.join(parts)


def unpack_chain(header: str) -> str:
    """The text of a chain header.

    Raises:
        ValueError: a packed header that does not unpack.
    """
    if not header.startswith(CHAIN_PACKED):
        return header
    parts = header[len(CHAIN_PACKED) :].split(CHAIN_PART_SEPARATOR)
    return CHAIN_SEPARATOR.join(_inflate(part) for part in parts)


def next_step(header: str) -> tuple[str, str]:
    """A chain header's next step (its last line), and the header of the rest
    ("" if none), in the same form: of a packed one only the last part is
    unpacked and packed again.

    Raises:
        ValueError: a packed header that does not unpack.
    """
    if not header.startswith(CHAIN_PACKED):
        rest, _, step = header.rpartition(CHAIN_SEPARATOR)
        return step, rest
    before, dot, last = header[len(CHAIN_PACKED) :].rpartition(CHAIN_PART_SEPARATOR)
    rest, _, step = _inflate(last).rpartition(CHAIN_SEPARATOR)
    parts = before + dot + _deflate(rest) if rest else before
    return step, CHAIN_PACKED + parts if parts else ""


def _deflate(text: str) -> str:
    return base64.b64encode(zlib.compress(text.encode(), 1)).decode()


def _inflate(part: str) -> str:
    try:
        return zlib.decompress(base64.b64decode(part, validate=True)).decode()
    except (zlib.error, binascii.Error, UnicodeDecodeError) as exc:
        raise ValueError(f"packed chain header does not unpack: {exc}") from None


def signature_from_wire(
    data: Any, pool: str
) -> tuple[str, str, list[Any], dict[str, Any], bool, dict[str, Any]]:
    """(task, pool, args, kwargs, immutable, options) of a signature in a header
    (§14.3); ``pool`` is the pool its ``p`` defaults to. Its options are as
    they came: :meth:`SendOptions.from_wire` checks them where they are sent,
    so that a bad one fails the send, not the reading of the header.

    Raises:
        ValueError: it is not a signature.
    """
    if not isinstance(data, dict) or not isinstance(data.get("t"), str):
        raise ValueError(f"not a task signature: {data!r:.80}")
    args = data.get("a", [])
    kwargs = data.get("k", {})
    options = data.get("o", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict) or not isinstance(options, dict):
        raise ValueError(f"malformed task signature: {data!r:.80}")
    return data["t"], str(data.get("p", pool)), args, kwargs, bool(data.get("i")), options


def signatures_in(text: object) -> list[Any]:
    """The signatures of a ``link`` or ``link_error`` header (none if unreadable)."""
    if not isinstance(text, str) or not text:
        return []
    try:
        sigs = json.loads(text)
    except ValueError:
        return []
    return sigs if isinstance(sigs, list) else []


def header_sinks(headers: Any) -> list[str]:
    """The data sinks a message's ``sinks`` header names."""
    sinks = headers.get(H_SINKS)
    return [s for s in sinks.split(",") if s] if isinstance(sinks, str) else []


def envelope_retries(envelope: Envelope) -> int:
    """The retry count a task command carries (its ``retries`` header; 0 if
    none, or not an integer)."""
    retries = envelope.headers.get(H_RETRIES, 0)
    return retries if isinstance(retries, int) else 0


def envelope_task_id(envelope: Envelope) -> str:
    """A task command's task id: its ``task_id`` header, else its correlation
    id, else its message id."""
    return str(envelope.headers.get(H_TASK_ID) or envelope.correlation_id or envelope.message_id)
