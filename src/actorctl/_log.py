"""Structured logging: thin helpers over eliot that every layer may use.

Nothing here prints: a process's composition root (the CLI) chooses where eliot
writes (JSON lines on stdout by default for a node) and how much: a one-shot
command shows warnings only, so the events below, the routine ones, are left
out unless it is asked for everything (``-v``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
import uuid
from types import TracebackType
from typing import Any, Final, final

from eliot import Action

# eliot's own level type and the context variable that holds the current
# action (private names, as of eliot 1.18: tests/cluster/test_trace.py checks
# that the lines written with them are eliot's own, so an eliot that changes
# them fails there):
# ``Action.continue_task`` would log a start and an end message per message
# handled (docs/protocol.md §6.2), and ``Traced`` writes an action's two lines
# without eliot's generic path.
from eliot._action import _ACTION_CONTEXT, TaskLevel

__all__ = [
    "ROUTINE",
    "TRACE",
    "Traced",
    "continue_trace",
    "is_routine",
    "log",
    "new_trace_uuid",
    "trace_here",
]

#: The application property that carries the eliot trace id (``UUID@/LEVEL``).
TRACE: Final = "trace"
#: What a message with no trace runs in (a nullcontext can be entered again and again).
_UNTRACED: Final = contextlib.nullcontext()
#: The deepest a trace nests before a hop joins it at its root (``trace_here``).
MAX_TRACE_DEPTH: Final = 32
#: The level of a trace's root (eliot never changes a ``TaskLevel`` in place).
_ROOT: Final = TaskLevel(level=[])

#: Events that say things went as they should (or that a caller is told about
#: anyway, as an error of its own): information, not warnings. Every other event
#: is a warning. A layer that adds a routine event names it here.
ROUTINE: Final = frozenset(
    {
        "actorctl:backlog:resumed",
        "actorctl:task",  # a task's run, as an eliot action (its start and end)
        "actorctl:chord:resumed",
        "actorctl:connection:closed",
        "actorctl:connection:peer-closed",  # it went without closing: no news
        "actorctl:controller:down",
        "actorctl:controller:stop-node",
        "actorctl:credit:reclaimed",
        "actorctl:delivery:duplicate",
        "actorctl:event:delivered",
        "actorctl:foreman:exited",  # a death is said again, as the supervisor's
        "actorctl:keyring:changed",
        "actorctl:leader:elected",
        "actorctl:membership:back",
        "actorctl:membership:deregistered",
        "actorctl:membership:join",
        "actorctl:membership:leave",
        "actorctl:membership:registered",
        "actorctl:membership:reregistered",
        "actorctl:membership:resynced",
        "actorctl:membership:update",
        "actorctl:membership:watching",
        "actorctl:node:ready",
        "actorctl:node:signal",
        "actorctl:node:stopping",
        "actorctl:node:stopped",
        "actorctl:peer:pruned",
        "actorctl:peer:reconnected",
        "actorctl:peer:resending",
        "actorctl:peer:session",
        "actorctl:peer:session-refused",  # what it sends is refused too, saying why
        "actorctl:peer:unreachable",  # a send that waits for it fails, saying why
        "actorctl:process:exited",
        "actorctl:process:started",
        "actorctl:replay:loaded",
        "actorctl:router:adopted",
        "actorctl:scheduler:resumed",
        "actorctl:session:opened",
        "actorctl:store:opened",
        "actorctl:supervisor:child-ended",
        "actorctl:supervisor:stopped-child",
    }
)


def is_routine(message_type: object) -> bool:
    """Whether an event of this type is information rather than a warning."""
    return message_type in ROUTINE


def _draw_prefix() -> str:
    """The first 24 characters of a uuid4 (``8-4-4-4-``): this process's
    trace uuids begin with them."""
    return str(uuid.uuid4())[:24]


#: This process's trace uuids: a uuid4's first 24 characters, drawn once (and
#: again in a forked child), then a count in the last 12 hex digits: unique as
#: a uuid4 is, in a uuid4's shape, without a draw (a system call) per trace.
_prefix = _draw_prefix()
_count = itertools.count(1)


def _redraw() -> None:
    """In a forked child: its own prefix, so that parent and child never make
    the same trace uuid."""
    global _prefix  # reset once per fork, read on every trace
    _prefix = _draw_prefix()


os.register_at_fork(after_in_child=_redraw)


def new_trace_uuid() -> str:
    """A trace uuid that no other trace of any process has (eliot's
    ``task_uuid``)."""
    return f"{_prefix}{next(_count) & 0xFFFF_FFFF_FFFF:012x}"


def log(message_type: str, **fields: Any) -> None:
    """Write one structured log line of type ``message_type`` (within the
    current action, else as a trace of its own, as eliot's ``log_message``)."""
    action = _ACTION_CONTEXT.get(None)
    if action is None:
        action = Action(None, new_trace_uuid(), _ROOT, "")
    action.log(message_type, **fields)


@final
class Traced:
    """An eliot action: its start line is written when it is made, its end
    line when the ``with`` block it is entered in ends, and what is logged or
    sent within the block nests under it (``trace_here``).

    The lines are eliot's own, field for field (those given, then
    ``action_status``, ``timestamp``, ``task_uuid``, ``action_type``,
    ``task_level``), and go to eliot's destinations as its own do; what
    ``start_action`` spends on its generic path is not spent here: a trace
    of its own takes a uuid from ``new_trace_uuid`` (no uuid4 per action),
    and each line is one dict built in place. An action ended by an
    exception is ended by eliot itself (``failed``, with the exception)."""

    __slots__ = ("_action", "_token", "_type", "_uuid")

    def __init__(self, action_type: str, fields: dict[str, Any]) -> None:
        """Start an action of ``action_type`` within the current one (a trace
        of its own outside any); ``fields`` (taken, not copied) go on its start line."""
        parent = _ACTION_CONTEXT.get(None)
        if parent is None:
            task_uuid = new_trace_uuid()
            action = Action(None, task_uuid, _ROOT, action_type)
            first = [1]
        else:
            task_uuid = parent.task_uuid
            level = parent._nextTaskLevel().as_list()
            action = Action(None, task_uuid, TaskLevel(level), action_type)
            first = [*level, 1]
        action._last_child = TaskLevel(first)  # what it logs comes after its start
        fields["action_status"] = "started"
        fields["timestamp"] = time.time()
        fields["task_uuid"] = task_uuid
        fields["action_type"] = action_type
        fields["task_level"] = first[:]
        action._logger.write(fields)
        self._action = action
        self._uuid = task_uuid
        self._type = action_type
        self._token: Any = None

    def __enter__(self) -> Any:
        """The eliot action, current until the block ends."""
        self._token = _ACTION_CONTEXT.set(self._action)
        return self._action

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        action = self._action
        _ACTION_CONTEXT.reset(self._token)
        if exc is not None:
            action.finish(exc)
            return
        action._finished = True
        action._logger.write(
            {
                "action_status": "succeeded",
                "timestamp": time.time(),
                "task_uuid": self._uuid,
                "action_type": self._type,
                "task_level": action._nextTaskLevel().as_list(),
            }
        )


def trace_here() -> str | None:
    """The trace id a message sent now carries (``UUID@/LEVEL``: a new child
    level of the current eliot action, so that what its receiver logs nests
    under it), or None outside any action.

    A trace nests one level deeper at each hop, so a chain of thousands of
    steps would carry (and log) thousands of levels: past ``MAX_TRACE_DEPTH``
    the next hop joins the trace at its root instead, at a level made of the
    time in microseconds (siblings in the order they came)."""
    action = _ACTION_CONTEXT.get(None)
    if action is None:
        return None
    trace = f"{action.task_uuid}@{action._nextTaskLevel().toString()}"
    if trace.count("/") > MAX_TRACE_DEPTH:
        return f"{trace.partition('@')[0]}@/{time.time_ns() // 1000}"
    return trace


def continue_trace(trace: object) -> contextlib.AbstractContextManager[Any]:
    """Run within the trace a message's ``trace`` header names, logging nothing
    of its own: what is logged or sent inside joins that trace's tree. A
    missing or malformed header (it is informative only) changes nothing."""
    if trace is None:
        return _UNTRACED  # most messages: nothing made, nothing to enter
    if not isinstance(trace, str) or trace.count("@") != 1:
        return contextlib.nullcontext()
    trace_uuid, _, level = trace.partition("@")
    try:
        task_level = TaskLevel.fromString(level)
    except ValueError:
        return contextlib.nullcontext()
    if not trace_uuid or not level.startswith("/"):
        return contextlib.nullcontext()
    return _Within(Action(None, trace_uuid, task_level, "actorctl:message"))


@final
class _Within:
    """Within the block, ``action`` is the current eliot action (what eliot's
    ``Action.context`` does, without a generator's frames)."""

    __slots__ = ("_action", "_token")

    def __init__(self, action: Any) -> None:
        self._action = action
        self._token: Any = None

    def __enter__(self) -> Any:
        self._token = _ACTION_CONTEXT.set(self._action)
        return self._action

    def __exit__(self, *exc_info: object) -> None:
        _ACTION_CONTEXT.reset(self._token)
