"""Who may call a handler: the roles a handler admits (``@handler(roles=...)``),
checked before it runs, and the caller of the message being handled, for a
handler that decides per call (dead letters: an operator, or the letter's own
sender)."""

from __future__ import annotations

import contextvars
from typing import Final, final

import attrs

from .._errors import ActorctlError
from ..mailbox import NOT_PERMITTED, Envelope, Outcome, Role
from ._dedup import Handled
from ._handlers import HandlerSpec

__all__ = ["Caller", "NotPermitted", "admit", "caller", "not_permitted"]


class NotPermitted(ActorctlError):
    """Raised by a handler that decides per call (see :func:`caller`): the
    message is rejected with ``actorctl:not-permitted`` and this text, as if
    its role had not been admitted."""


@final
@attrs.frozen
class Caller:
    """Who sent the message a handler runs for.

    Attributes:
        key: the key id it counts as (``Envelope.sender``; empty when made here
            or unauthenticated).
        role: its role, or None when nothing is checked (the node itself, or a
            node without a keyring).
    """

    key: str
    role: Role | None

    def is_operator(self) -> bool:
        """Whether it may do what an operator may (the node itself may too)."""
        return self.role is None or self.role is Role.OPERATOR


_NOBODY: Final = Caller("", None)
_current: contextvars.ContextVar[Caller] = contextvars.ContextVar(
    "actorctl_caller", default=_NOBODY
)


def caller() -> Caller:
    """The caller of the message this handler runs for (task-local)."""
    return _current.get()


def admit(actor: str, spec: HandlerSpec, envelope: Envelope) -> Handled | None:
    """Check the caller's role against the roles ``spec`` admits: the refusal
    to answer with (logged), or None, the caller now :func:`caller`'s."""
    role = envelope.role
    if role is not None and spec.roles is not None and role not in spec.roles:
        return not_permitted(actor, spec.name, envelope, spec.roles)
    sender = envelope.sender
    if sender or role is not None:
        # The caller as last seen, when it is the same (per message: a Caller
        # is frozen, so one serves every message of its key and role).
        callers = _callers
        if sender in callers and callers[sender].role is role:  # in and []: no call
            _current.set(callers[sender])
        else:
            _current.set(_caller(sender, role))
    else:
        _current.set(_NOBODY)  # nobody to name (made here, or no keyring)
    return None


#: The caller of each key's last message, by key id: at most ``_MAX_CALLERS``.
#: A full one is replaced, never emptied (another thread's reader keeps the
#: dict it began with).
_callers: dict[str, Caller] = {}
_MAX_CALLERS: Final = 4096


def _caller(key: str, role: Role | None) -> Caller:
    global _callers
    made = Caller(key, role)
    if len(_callers) >= _MAX_CALLERS:
        _callers = {}
    _callers[key] = made
    return made


def not_permitted(actor: str, name: str, envelope: Envelope, needed: frozenset[Role]) -> Handled:
    """The refusal of a call the caller's role may not make: rejected with
    ``actorctl:not-permitted``, naming the handler, the caller's role and the
    roles it needs (the cell logs the refusal, and never runs the handler)."""
    roles = " or ".join(r.value for r in Role if r in needed)
    role = envelope.role.value if envelope.role is not None else "none"
    description = (
        f"handler {name!r} of actor {actor!r} needs the {roles} role; the caller's key "
        f"{envelope.sender} has the {role} role (an operator grants one with "
        "`actorctl keys add NAME.pub --role ROLE`)"
    )
    return Handled(Outcome.rejected(NOT_PERMITTED, description), None)
