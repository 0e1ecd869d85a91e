"""Handlers and behaviours: the tables an actor dispatches messages through.

A behaviour is a class whose ``@handler`` methods make up a handler table. An
actor is a behaviour too (its default table); ``Actor.become(other)`` swaps the
table, as Akka's ``become`` does, and a circuit breaker is such a behaviour.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import sys
import typing
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, TypeVar, final, overload

import attrs
import cattrs
import trio

from .._errors import ActorctlError
from .._threads import run_sync
from ..mailbox import Envelope, Outcome, Role

__all__ = ["BadArguments", "Behaviour", "HandlerSpec", "converter", "handler", "run_in_thread"]

F = TypeVar("F", bound=Callable[..., Any])

#: The one converter for typed payloads (attrs classes and dataclasses).
converter = cattrs.Converter()

_MARK = "__actorctl_handler__"
_ROLES = "__actorctl_roles__"
_PRIMITIVES: dict[type, tuple[type, ...]] = {
    int: (int,),
    float: (int, float),
    str: (str,),
    bool: (bool,),
    list: (list,),
    dict: (dict,),
}


class BadArguments(ActorctlError):
    """The arguments of a message do not fit the handler's signature."""


@overload
def handler(fn: F, /) -> F: ...


@overload
def handler(*, roles: Role | Iterable[Role]) -> Callable[[F], F]: ...


def handler(
    fn: F | None = None, /, *, roles: Role | Iterable[Role] | None = None
) -> F | Callable[[F], F]:
    """Mark a method as a message handler, reachable under its own name.

    ``async def`` handlers run as trio tasks; plain ``def`` handlers run in a
    worker thread under the actor's concurrency limit.

    ``@handler(roles=Role.OPERATOR)`` (or a collection of roles) admits only
    callers whose key has one of those roles (docs/security.md); another
    caller's message is rejected (``actorctl:not-permitted``) and never run.
    Without ``roles`` every trusted key may call it. Messages from the node
    itself, and every message on a node without a keyring, are not checked.
    """
    admitted = None if roles is None else _roles(roles)

    def mark(fn: F) -> F:
        setattr(fn, _MARK, True)
        setattr(fn, _ROLES, admitted)
        return fn

    return mark if fn is None else mark(fn)


def _roles(roles: Role | Iterable[Role]) -> frozenset[Role]:
    given = [roles] if isinstance(roles, str) else list(roles)
    try:
        admitted = frozenset(Role(role) for role in given)
    except ValueError:
        raise ValueError(
            f"@handler(roles={roles!r}): give operator, member or client (Role.OPERATOR, ...)"
        ) from None
    if not admitted:
        raise ValueError("@handler(roles=()) admits nobody: name at least one role")
    return admitted


@final
class HandlerSpec:
    """One handler: its function and how to bind wire arguments to it."""

    __slots__ = (
        "_any_keywords",
        "_by_position",
        "_exact",
        "_fast",
        "_hooks",
        "_positions",
        "_required",
        "fn",
        "is_async",
        "name",
        "roles",
        "signature",
    )

    def __init__(self, name: str, fn: Callable[..., Any]) -> None:
        self.name = name
        self.fn = fn
        #: The roles it admits (``@handler(roles=...)``); None: every caller.
        self.roles: frozenset[Role] | None = getattr(fn, _ROLES, None)
        self.is_async = inspect.iscoroutinefunction(fn)
        self.signature = inspect.signature(fn)
        self._hooks: dict[str, Callable[[Any], Any]] | None = None
        self._fast: tuple[int, int] | None = None
        self._any_keywords = False
        #: For a handler whose parameters are all positional: each one's name
        #: and check (None: taken as it comes), so that a call by position is
        #: checked without inspect's Signature.bind.
        self._by_position: tuple[tuple[str, Callable[[Any], Any] | None], ...] | None = None
        #: For a handler whose parameters are all positional, each with a
        #: primitive's hint (``def add(x: int, y: int)``): those types, in
        #: order. A call by position whose values are of exactly those types
        #: passes every check: it is bound with no call per argument.
        self._exact: tuple[type, ...] | None = None
        self._required = 0
        self._positions = 0  # len(_by_position), kept

    def bind(self, args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """Check and convert wire arguments for a call on a bound method.

        Raises:
            BadArguments: naming the handler and the argument that does not fit.
        """
        if self._hooks is None:
            self._prepare()
        fast = self._fast
        if (
            fast is not None
            and (self._any_keywords or not kwargs)
            and fast[0] <= len(args) <= fast[1]
        ):
            return args, kwargs
        by_position = self._by_position
        # (The count of ``args`` taken once, and ``by_position``'s kept: one call.)
        if (
            by_position is not None
            and not kwargs
            and self._required <= (count := len(args)) <= self._positions
        ):
            exact = self._exact
            if exact is not None and tuple(map(type, args)) == exact[:count]:
                return args, kwargs  # each value of its hint's very type: each check passes
            # Each hook called directly (per message): a conversion that fails
            # is done again through _convert, which names the argument.
            try:
                return [
                    value if hook is None else hook(value)
                    for (_, hook), value in zip(by_position, args, strict=False)
                ], kwargs
            except BadArguments:
                raise  # a primitive's check names it already
            except Exception:
                pass  # done again below, through _convert, which names the argument
            return [
                value if hook is None else self._convert(pname, hook, value)
                for (pname, hook), value in zip(by_position, args, strict=False)
            ], kwargs
        try:
            bound = self.signature.bind(None, *args, **kwargs)
        except TypeError as exc:
            raise BadArguments(f"handler {self.name!r}: {exc}") from None
        hooks = self._hooks
        assert hooks is not None
        for pname, value in bound.arguments.items():
            hook = hooks.get(pname)
            if hook is not None:
                bound.arguments[pname] = self._convert(pname, hook, value)
        return list(bound.args[1:]), bound.kwargs

    def _convert(self, pname: str, hook: Callable[[Any], Any], value: Any) -> Any:
        try:
            return hook(value)
        except BadArguments:
            raise
        except Exception as exc:
            detail = "; ".join(cattrs.transform_error(exc, path=pname))
            raise BadArguments(f"handler {self.name!r}, argument {detail}") from None

    def _prepare(self) -> None:
        try:
            hints = typing.get_type_hints(self.fn)
        except Exception:  # unresolvable annotations: take arguments as they come
            hints = {}
        hooks: dict[str, Callable[[Any], Any]] = {}
        params = list(self.signature.parameters.values())[1:]  # skip self
        for param in params:
            hint = hints.get(param.name)
            if hint is None or hint is Any:
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            hooks[param.name] = self._hook_for(param.name, hint)
        self._hooks = hooks
        kinds = [p.kind for p in params]
        if not hooks and kinds == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]:
            self._fast = (0, sys.maxsize)  # takes anything: nothing to check
            self._any_keywords = True
        elif all(
            kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            for kind in kinds
        ):
            required = sum(1 for p in params if p.default is p.empty)
            if hooks:
                self._by_position = tuple((p.name, hooks.get(p.name)) for p in params)
                self._positions = len(params)
                self._required = required
                exact = tuple(hints.get(p.name) for p in params)
                if all(hint in _PRIMITIVES for hint in exact):
                    self._exact = tuple(hint for hint in exact if isinstance(hint, type))
            else:
                self._fast = (required, len(params))

    def _hook_for(self, pname: str, hint: Any) -> Callable[[Any], Any]:
        accepted = _PRIMITIVES.get(hint)
        if accepted is not None:
            expected = hint.__name__

            def check(value: Any) -> Any:
                # The exact type first (the usual case: no isinstance call).
                if type(value) is hint:
                    return value
                if isinstance(value, accepted) and not (
                    isinstance(value, bool) and hint is not bool
                ):
                    return value
                raise BadArguments(
                    f"handler {self.name!r}, argument {pname!r}: expected {expected}, "
                    f"got {type(value).__name__} {value!r:.60}"
                )

            return check
        if attrs.has(hint) or dataclasses.is_dataclass(hint) or typing.get_origin(hint):
            return lambda value: converter.structure(value, hint)
        return lambda value: value


def _collect(cls: type) -> dict[str, HandlerSpec]:
    table: dict[str, HandlerSpec] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if callable(value) and getattr(value, _MARK, False):
                table[name] = HandlerSpec(name, value)
            elif name in table and not getattr(value, _MARK, False):
                del table[name]  # a subclass replaced the handler with a non-handler
    return table


class Behaviour:
    """A handler table: subclass it and mark methods with ``@handler``."""

    __actorctl_handlers__: ClassVar[dict[str, HandlerSpec]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.__actorctl_handlers__ = _collect(cls)

    def unhandled(self, envelope: Envelope) -> Outcome | None:
        """Answer a message this behaviour has no handler for.

        Return an outcome to settle it with, or ``None`` to reject it as an
        unknown handler. Runs in the actor's own task. A circuit breaker's open
        state returns ``Outcome.modified(...)`` here for every message.
        """
        return None

    async def handle_unmatched(
        self, envelope: Envelope
    ) -> tuple[Outcome, tuple[str, Any] | None] | None:
        """Handle a message whose subject names none of this behaviour's handlers
        (a router passes it on; a worker looks the task up in its own table).

        Return the outcome to settle it with and the reply to send its caller
        (``(status, body)``, or None), or ``None`` to fall back to the quick,
        synchronous :meth:`unhandled`. Runs in the actor's own task.
        """
        return None


async def run_in_thread(
    spec: HandlerSpec,
    behaviour: Behaviour,
    args: list[Any],
    kwargs: dict[str, Any],
    threads: trio.CapacityLimiter,
) -> Any:
    """Run a plain ``def`` handler in a worker thread under ``threads``.

    abandon_on_cancel: a thread cannot be interrupted; at the stop deadline the
    node stops waiting for it and never settles the message, so its sender
    sends it again (at-least-once)."""
    call = functools.partial(spec.fn, behaviour, *args, **kwargs)
    return await run_sync(call, limiter=threads, abandon_on_cancel=True)  # (_threads.py)
