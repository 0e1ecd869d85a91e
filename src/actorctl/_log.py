"""Structured logging: thin helpers over eliot that every layer may use.

Nothing here prints: a process's composition root (the CLI) chooses where eliot
writes (JSON lines on stdout by default for a node) and how much: a one-shot
command shows warnings only, so the events below, the routine ones, are left
out unless it is asked for everything (``-v``).
"""

from __future__ import annotations

from typing import Any, Final

from eliot import log_message

__all__ = ["ROUTINE", "is_routine", "log"]

#: Events that say things went as they should (or that a caller is told about
#: anyway, as an error of its own): information, not warnings. Every other event
#: is a warning. A layer that adds a routine event names it here.
ROUTINE: Final = frozenset(
    {
        "actorctl:backlog:resumed",
        "actorctl:chord:resumed",
        "actorctl:connection:closed",
        "actorctl:controller:down",
        "actorctl:controller:stop-node",
        "actorctl:credit:reclaimed",
        "actorctl:delivery:duplicate",
        "actorctl:event:delivered",
        "actorctl:keyring:changed",
        "actorctl:node:ready",
        "actorctl:node:signal",
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
