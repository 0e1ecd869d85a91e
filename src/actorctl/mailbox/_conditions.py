"""Every error condition actorctl puts on a refused message, defined once.

A receiver settles a message it will not run ``rejected`` (bad input, never
retried) or ``modified`` (not here: the sender may send it elsewhere) with one
of these AMQP condition names; docs/protocol.md lists what each means and what
the sender should do about it.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "AUTH_VERSION",
    "BAD_ARGUMENTS",
    "BAD_KIND",
    "BAD_SESSION",
    "BAD_SIGNATURE",
    "CRASHED",
    "DECODE_ERROR",
    "EXPIRED",
    "FOREIGN_REPLY_TO",
    "NOT_FOUND",
    "NOT_PERMITTED",
    "NO_INSTANCE",
    "OVER_CREDIT",
    "PEER_UNAVAILABLE",
    "REPLAY",
    "REVOKED_KEY",
    "STALE",
    "STOPPING",
    "UNAUTHENTICATED",
    "UNKNOWN_HANDLER",
    "UNKNOWN_KEY",
    "UNKNOWN_SESSION",
    "WRONG_NODE",
]

# AMQP's own.
NOT_FOUND: Final = "amqp:not-found"
OVER_CREDIT: Final = "amqp:link:transfer-limit-exceeded"

# Authentication (docs/protocol.md §11.7): one per reason a message is refused.
UNAUTHENTICATED: Final = "actorctl:unauthenticated"
UNKNOWN_KEY: Final = "actorctl:unknown-key"
REVOKED_KEY: Final = "actorctl:revoked-key"
UNKNOWN_SESSION: Final = "actorctl:unknown-session"
BAD_SIGNATURE: Final = "actorctl:bad-signature"
STALE: Final = "actorctl:stale"
REPLAY: Final = "actorctl:replay"
BAD_SESSION: Final = "actorctl:bad-session"
WRONG_NODE: Final = "actorctl:wrong-node"
AUTH_VERSION: Final = "actorctl:auth-version"

# What an actor (or the node in front of it) refuses.
DECODE_ERROR: Final = "actorctl:decode-error"
UNKNOWN_HANDLER: Final = "actorctl:unknown-handler"
BAD_ARGUMENTS: Final = "actorctl:bad-arguments"
BAD_KIND: Final = "actorctl:bad-kind"
EXPIRED: Final = "actorctl:expired"
STOPPING: Final = "actorctl:actor-stopping"
#: The actor crashed on this message (it ran, or began to): it is not sent
#: again, where it could crash the actor again (docs/supervision.md).
CRASHED: Final = "actorctl:actor-crashed"
NO_INSTANCE: Final = "actorctl:no-instance"
#: The node's membership may have ended (its lease in etcd, unrenewed): it
#: starts no work, and what it is handed goes elsewhere (cluster/membership/_fence.py).
FENCED: Final = "actorctl:fenced"
#: The caller's role (or identity) may not do this: docs/security.md's table.
NOT_PERMITTED: Final = "actorctl:not-permitted"
#: A request's reply-to names another key's reply address (docs/protocol.md §8).
FOREIGN_REPLY_TO: Final = "actorctl:foreign-reply-to"

# What the sending node decides itself, without an answer from the receiver.
PEER_UNAVAILABLE: Final = "actorctl:peer-unavailable"
