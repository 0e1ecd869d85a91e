"""How a user declares a supervision tree: frozen specs, as OTP's child specs.

A :class:`SupervisorSpec` has flags (strategy, intensity, backoff) and children;
each child is an :class:`ActorSpec` (an actor built by a class or factory with
arguments), a :class:`ProcessSpec` (an external command) or another
:class:`SupervisorSpec`. A spec builds; it never holds a running thing, so the
same spec builds a fresh actor for every restart.
"""

from __future__ import annotations

import contextvars
import difflib
import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, final

import attrs

from .._errors import ConfigError
from ..actors import Actor
from ._boxed_spec import BoxedSpec
from ._child import Restart, Strategy

__all__ = [
    "ActorSpec",
    "Child",
    "ProcessSpec",
    "SupervisorSpec",
    "import_target",
    "importing_for_node",
]

#: The MODULE:OBJECT whose module :func:`import_target` is importing, while its
#: top-level code runs (a ContextVar: only the importing thread sees it).
_importing: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "actorctl_importing_for_node", default=None
)


def _strategy(value: Strategy | str) -> Strategy:
    if isinstance(value, Strategy):
        return value
    try:
        return Strategy(value)
    except ValueError:
        choices = ", ".join(repr(s.value) for s in Strategy)
        raise ConfigError(f"unknown strategy {value!r}: expected one of {choices}") from None


#: What a handler's exception does: see ``Actor.handler_errors``.
HANDLER_ERRORS = ("reply", "crash")


def _handler_errors(value: str | None) -> str | None:
    if value is not None and value not in HANDLER_ERRORS:
        raise ConfigError(
            f"unknown handler_errors {value!r}: expected one of {', '.join(HANDLER_ERRORS)}"
        )
    return value


def _words(command: Iterable[str]) -> tuple[str, ...]:
    """A command line as a tuple (its words are checked by the spec)."""
    return tuple(command)


def _restart(value: Restart | str) -> Restart:
    if isinstance(value, Restart):
        return value
    try:
        return Restart(value)
    except ValueError:
        choices = ", ".join(repr(r.value) for r in Restart)
        raise ConfigError(f"unknown restart type {value!r}: expected one of {choices}") from None


#: The keyword arguments of an ActorSpec given none: one shared, read-only
#: mapping (a node may hold a million specs), not an empty dict each.
_NO_KWARGS: Final[Mapping[str, Any]] = MappingProxyType({})


@final
@attrs.frozen
class ActorSpec:
    """An actor child, built by ``factory(*args, **kwargs)`` at each start.

    Attributes:
        factory: an :class:`~actorctl.Actor` subclass, or a function returning
            an actor.
        args, kwargs: passed to ``factory`` each time (keep them immutable: the
            same objects go to every incarnation).
        name: the name it is reachable under (default: the class's
            ``default_name()``, or the factory's ``__name__``).
        restart: permanent (the default, as in OTP), transient or temporary.
        handler_errors: what a handler's exception does: ``"reply"`` (the
            caller gets the error, the actor keeps its state) or ``"crash"``
            (the caller gets the error, the actor is restarted fresh: OTP);
            None: its supervisor spec's choice, else its class's
            (``Actor.handler_errors``).
    """

    factory: Callable[..., Actor]
    args: tuple[Any, ...] = attrs.field(default=(), converter=tuple)
    kwargs: Mapping[str, Any] = attrs.field(default=_NO_KWARGS, hash=False)
    name: str | None = None
    restart: Restart = attrs.field(default=Restart.PERMANENT, converter=_restart)
    handler_errors: str | None = attrs.field(default=None, converter=_handler_errors)

    @property
    def child_name(self) -> str:
        if self.name:
            return self.name
        factory = self.factory
        if isinstance(factory, type) and issubclass(factory, Actor):
            return factory.default_name()
        return getattr(factory, "__name__", "actor")

    def __call__(self) -> Actor:
        """:meth:`build`: a spec is the factory its cell builds each fresh actor
        with (kept as it is, no bound method of its own per actor)."""
        return self.build()

    def build(self) -> Actor:
        """A fresh actor.

        Raises:
            ConfigError: the factory made something that is not an Actor.
        """
        actor = self.factory(*self.args, **dict(self.kwargs))
        if not isinstance(actor, Actor):
            raise ConfigError(f"{self.factory!r} made {actor!r}, not an actorctl.Actor")
        return actor


@final
@attrs.frozen
class ProcessSpec:
    """A boxed process: an external command, in any language, as a child.

    It is started when the supervisor starts it and stopped (SIGTERM, then
    SIGKILL after ``stop_timeout`` seconds) when the supervisor stops it. Exit
    code 0 is a normal exit; any other code (or a signal) is a failure.
    """

    name: str
    command: tuple[str, ...] = attrs.field(converter=_words)
    restart: Restart = attrs.field(default=Restart.PERMANENT, converter=_restart)
    cwd: str | None = None
    env: Mapping[str, str] | None = attrs.field(default=None, hash=False)
    stop_timeout: float = 5.0

    @command.validator
    def _check(self, _: object, command: tuple[str, ...]) -> None:
        if not command or not all(isinstance(part, str) and part for part in command):
            raise ConfigError(f"process {self.name!r}: command must be a non-empty list of strings")


def _children(children: Iterable[Child]) -> tuple[Child, ...]:
    return tuple(children)


@final
@attrs.frozen
class SupervisorSpec:
    """A supervisor and its children, started in order, stopped in reverse.

    Attributes:
        name: unique on its node: the supervisor is an actor reachable under it.
        children: ActorSpec, ProcessSpec, BoxedSpec or SupervisorSpec, in start order.
        strategy: one_for_one, one_for_all or rest_for_one.
        max_restarts, within: its intensity: more than ``max_restarts``
            restarts within ``within`` seconds and it gives up, failing to its
            parent.
        backoff, backoff_max: seconds before a restart, doubled within a burst.
        restart: its own restart type under its parent.
        remote_start: whether ``start_child`` through its inbox is allowed. Off
            by default: it imports and runs what the message names (any module's
            callable, any command), so it gives every key the node trusts the
            power to run code there.
        handler_errors: what a handler's exception does in the actors below
            it (nested supervisors included) that do not choose themselves
            (``ActorSpec.handler_errors``); None: each actor's class decides.
    """

    name: str
    children: tuple[Child, ...] = attrs.field(converter=_children)
    strategy: Strategy = attrs.field(default=Strategy.ONE_FOR_ONE, converter=_strategy)
    max_restarts: int = 3
    within: float = 5.0
    backoff: float = 0.1
    backoff_max: float = 5.0
    restart: Restart = attrs.field(default=Restart.PERMANENT, converter=_restart)
    remote_start: bool = False
    handler_errors: str | None = attrs.field(default=None, converter=_handler_errors)

    @children.validator
    def _check(self, _: object, children: tuple[Child, ...]) -> None:
        names = [child_name(child) for child in children]
        for name in names:
            if names.count(name) > 1:
                raise ConfigError(
                    f"supervisor {self.name!r}: two children are named {name!r}: "
                    "give one another name"
                )
        if self.max_restarts < 0 or self.within <= 0 or self.backoff < 0:
            raise ConfigError(
                f"supervisor {self.name!r}: max_restarts must be 0 or more, within "
                "above 0 and backoff 0 or more"
            )


#: A child of a supervisor, as declared.
Child = ActorSpec | ProcessSpec | SupervisorSpec | BoxedSpec


def child_name(child: Child) -> str:
    return child.child_name if isinstance(child, ActorSpec) else child.name


def importing_for_node() -> str | None:
    """The MODULE:OBJECT a node is importing right now, or None.

    While :func:`import_target` imports the module of what a node hosts (its
    actors, a supervisor's child, a health check, ... named in cluster.toml
    or on the command line), that module's top-level code runs with this set,
    in every process that reads the cluster (``cluster up`` and each node). Code
    that must not run there (connecting to the very cluster the node is part
    of, say) can refuse, naming it and saying where it belongs."""
    return _importing.get()


def import_target(target: str) -> Any:
    """The object MODULE:OBJECT names (its module's top-level code runs with
    :func:`importing_for_node` saying ``target``).

    Raises:
        ConfigError: naming the module or object that is wrong.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{target!r}: expected MODULE:OBJECT, e.g. examples.workers:Primes")
    if "" not in sys.path:
        sys.path.insert(0, "")
    token = _importing.set(target)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import module {module_name!r}: {exc}") from None
    finally:
        _importing.reset(token)
    try:
        return getattr(module, attr)
    except AttributeError:
        names = [n for n in vars(module) if not n.startswith("_")]
        close = difflib.get_close_matches(attr, names, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"it has {sorted(names)[:20]}"
        raise ConfigError(f"module {module_name!r} has no object {attr!r}: {hint}") from None
