"""Structured logging: thin helpers over eliot that every layer may use.

Nothing here prints: a process's composition root (the CLI) chooses where eliot
writes (JSON lines on stdout by default for a node) and how much: a one-shot
command shows warnings only, so the events below, the routine ones, are left
out unless it is asked for everything (``-v``).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Final

from eliot import Action, current_action, log_message

# eliot's own (stable since 0.x) level type; ``Action.continue_task`` would
# log a start and an end message per message handled (docs/protocol.md §6.2).
from eliot._action import TaskLevel

__all__ = ["ROUTINE", "TRACE", "continue_trace", "is_routine", "log", "trace_here"]

#: The application property that carries the eliot trace id (``UUID@/LEVEL``).
TRACE: Final = "trace"
#: What a message with no trace runs in (a nullcontext can be entered again and again).
_UNTRACED: Final = contextlib.nullcontext()
#: The deepest a trace nests before a hop joins it at its root (``trace_here``).
MAX_TRACE_DEPTH: Final = 32

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


def log(message_type: str, **fields: Any) -> None:
    """Write one structured log line of type ``message_type``."""
    log_message(message_type=message_type, **fields)


def trace_here() -> str | None:
    """The trace id a message sent now carries (``UUID@/LEVEL``: a new child
    level of the current eliot action, so that what its receiver logs nests
    under it), or None outside any action.

    A trace nests one level deeper at each hop, so a chain of thousands of
    steps would carry (and log) thousands of levels: past ``MAX_TRACE_DEPTH``
    the next hop joins the trace at its root instead, at a level made of the
    time in microseconds (siblings in the order they came)."""
    action = current_action()
    if action is None:
        return None
    trace = str(action.serialize_task_id().decode("ascii"))
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
    uuid, _, level = trace.partition("@")
    try:
        task_level = TaskLevel.fromString(level)
    except ValueError:
        return contextlib.nullcontext()
    if not uuid or not level.startswith("/"):
        return contextlib.nullcontext()
    context: contextlib.AbstractContextManager[Any] = Action(
        None, uuid, task_level, "actorctl:message"
    ).context()
    return context
