"""Supervision trees on a node: specs made into running supervisors and actors.

Each supervisor a user declares is an actor (:class:`SupervisorActor`) hosted
under its name, with OTP's requests as handlers, so that any client with a key
can ask it ``which_children`` or ``start_child`` through its signed inbox. The
node's own root (its actors, then the declared trees) is a :class:`TreeLevel`
too, without an inbox: the node's ``_node`` agent answers for it.

The tree needs a few things of the node; :class:`Host` says which, and the
node implements it (this layer never imports the cluster layer).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol, final

import attrs
import trio

from .._errors import ConfigError
from ..actors import Actor, ActorCell, handler
from ..mailbox import Role
from ._boxed import Boxed
from ._boxed_actor import BoxedActor, run_boxed_child
from ._boxed_spec import BoxedSpec
from ._child import ChildError, ChildSpec, Restart, Strategy
from ._declare import child_from_table, plain_fail
from ._process import BoxedProcess
from ._specs import ActorSpec, Child, ProcessSpec, SupervisorSpec, import_target
from ._status import ABSENT, MailboxFill, TreeRow
from ._supervisor import Supervisor

__all__ = ["Host", "InstanceSpec", "SupervisorActor", "TreeLevel"]


class Host(Protocol):
    """What a node offers the trees it hosts."""

    @property
    def stopping(self) -> trio.Event:
        """Set when the node begins to stop."""
        ...

    def host(self, name: str, actor: Actor, factory: Callable[[], Actor] | None) -> ActorCell:
        """Make ``actor`` reachable as ``name`` on the node.

        Raises:
            ChildError: another actor has that name.
        """
        ...

    def unhost(self, name: str) -> None:
        """Forget the actor ``name`` (its child spec was deleted)."""
        ...

    def gone(self, name: str, reason: str) -> None:
        """The actor ``name`` ended for good: tell whoever watches it."""
        ...


@final
@attrs.frozen
class InstanceSpec:
    """An actor handed over as an instance: started again as it is (no spec
    to build a fresh one from)."""

    name: str
    actor: Actor
    restart: Restart = Restart.TRANSIENT


#: What a child's kind adds to its tree row (an actor's mailbox, a process's pid).
Describe = Callable[[TreeRow], TreeRow]


@final
class TreeLevel:
    """One supervisor of a tree with its children made: actors hosted on the
    node, boxed processes, nested supervisors (each an actor of its own)."""

    def __init__(
        self,
        name: str,
        children: Sequence[Child | InstanceSpec],
        host: Host,
        *,
        strategy: Strategy = Strategy.ONE_FOR_ONE,
        max_restarts: int = 3,
        within: float = 5.0,
        backoff: float = 0.1,
        backoff_max: float = 5.0,
        auto_shutdown: bool = False,
        handler_errors: str | None = None,
    ) -> None:
        self.name = name
        self._host = host
        self._handler_errors = handler_errors  # the supervisor spec's choice
        # What each child's row adds: a plain actor's cell (its mailbox), or
        # how another kind describes itself. A plain actor is on the node by
        # its cell; boxed workers and nested supervisors are named in
        # _addressable. (Nothing more per actor: a node may host a million.)
        self._details: dict[str, ActorCell | Describe] = {}
        self._addressable: set[str] = set()
        specs = [self._make(child) for child in children]
        self.supervisor = Supervisor(
            name,
            specs,
            strategy=strategy,
            max_restarts=max_restarts,
            within=within,
            backoff=backoff,
            backoff_max=backoff_max,
            auto_shutdown=auto_shutdown,
            stopping=host.stopping,
            on_gone=self._gone,
        )

    def _make(self, child: Child | InstanceSpec) -> ChildSpec:
        """The child spec that starts ``child``, hosting what must be reachable."""
        host = self._host
        if isinstance(child, BoxedSpec):
            boxed = Boxed(child, host.stopping)
            front = child.front(boxed) if child.front is not None else BoxedActor(boxed)
            cell = host.host(child.name, front, None)
            self._addressable.add(child.name)
            self._details[child.name] = functools.partial(_describe_boxed, boxed, cell)
            start = functools.partial(run_boxed_child, boxed, cell)
            return ChildSpec(child.name, start, child.restart, kind="boxed")
        if isinstance(child, ProcessSpec):
            process = BoxedProcess(child, host.stopping)
            self._details[child.name] = process.detail
            return ChildSpec(child.name, process.run, child.restart, kind="process")
        if isinstance(child, SupervisorSpec):
            nested = SupervisorActor(child, host, self._handler_errors)
            cell = nested.home = host.host(child.name, nested, None)
            self._addressable.add(child.name)
            self._details[child.name] = functools.partial(_describe_supervisor, nested, cell)
            return ChildSpec(child.name, nested.run_tree, child.restart, kind="supervisor")
        handler_errors = self._handler_errors
        if isinstance(child, InstanceSpec):
            name, actor, factory, restart = child.name, child.actor, None, child.restart
        else:
            name, actor, restart = child.child_name, child.build(), child.restart
            factory = child  # (it builds an actor when called)
            handler_errors = child.handler_errors or handler_errors
        cell = host.host(name, actor, factory)
        if handler_errors is not None:
            cell.crashes_on_error = handler_errors == "crash"
        self._details[name] = cell
        return ChildSpec(name, cell.run, restart, kind="actor", activation=cell)

    def _hosted(self, name: str) -> bool:
        """Whether the child ``name`` is reachable on the node (not a process)."""
        return name in self._addressable or isinstance(self._details.get(name), ActorCell)

    def _gone(self, name: str, reason: str) -> None:
        if self._hosted(name):
            self._host.gone(name, reason)

    def rows(self) -> list[TreeRow]:
        """Each child: name, kind, state, restarts, and what its kind adds (an
        actor's mailbox, a process's pid, a supervisor's own children)."""
        rows = []
        for child in self.supervisor.child_rows():
            detail = self._details.get(child.name)
            if isinstance(detail, ActorCell):
                rows.append(_describe_actor(detail, child))
            else:
                rows.append(child if detail is None else detail(child))
        return rows

    def describe(self) -> list[dict[str, Any]]:
        """:meth:`rows` in their wire form."""
        return [row.wire() for row in self.rows()]

    async def start_child(self, child: Child) -> None:
        spec = self._make(child)
        try:
            await self.supervisor.start_child(spec)
        except BaseException:
            self._forget(spec.name)
            raise

    async def delete_child(self, name: str) -> None:
        await self.supervisor.delete_child(name)
        self._forget(name)

    def _forget(self, name: str) -> None:
        if self._hosted(name):
            self._addressable.discard(name)
            self._host.unhost(name)
        self._details.pop(name, None)


@final
class SupervisorActor(Actor):
    """A supervisor with a signed inbox: OTP's requests as handlers.

    Its children are what its :class:`SupervisorSpec` declares; a child that
    :meth:`start_child` adds is lost when the supervisor itself is restarted
    (OTP does the same). It is restarted as the same object: what it keeps is
    its spec, and its children are fresh.
    """

    keeps_state = True

    def __init__(self, spec: SupervisorSpec, host: Host, handler_errors: str | None = None) -> None:
        self.spec = spec
        self.level = TreeLevel(
            spec.name,
            spec.children,
            host,
            strategy=spec.strategy,
            max_restarts=spec.max_restarts,
            within=spec.within,
            backoff=spec.backoff,
            backoff_max=spec.backoff_max,
            handler_errors=spec.handler_errors or handler_errors,
        )
        self.home: ActorCell | None = None  # its cell, once hosted

    async def run_tree(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The child start function: its inbox, then its children; a supervisor
        that gives up raises into its parent."""
        home = self.home
        assert home is not None, "host the supervisor before running it"
        async with trio.open_nursery() as nursery:
            await nursery.start(home.run)
            await nursery.start(self._supervise, nursery.cancel_scope)
            task_status.started()

    async def _supervise(
        self, scope: trio.CancelScope, *, task_status: trio.TaskStatus[Any]
    ) -> None:
        await self.level.supervisor.run(task_status=task_status)
        scope.cancel(reason=f"supervisor {self.spec.name!r} ended")  # and its inbox with it

    @handler
    async def which_children(self) -> list[dict[str, Any]]:
        """Each child in start order: name, kind, state, restarts, mailbox."""
        return [attrs.evolve(row, children=ABSENT).wire() for row in self.level.rows()]

    @handler
    async def count_children(self) -> dict[str, int]:
        """OTP's counts: specs, active, supervisors, workers."""
        return self.level.supervisor.count_children()

    @handler(roles=Role.OPERATOR)
    async def start_child(self, child: dict[str, Any]) -> str:
        """Add and start a child: ``{"actor": "MODULE:OBJECT", "name": ...,
        "args": [...], "kwargs": {...}, "restart": ...}``, ``{"process":
        [COMMAND, ...], "name": ...}`` or ``{"supervisor": {...}}``."""
        if not self.spec.remote_start:
            raise ChildError(
                f"supervisor {self.spec.name!r} does not start children named in a "
                "message: declare them in its spec, or set remote_start = true in its "
                "[[supervisor]] table (SupervisorSpec(remote_start=True)), which lets "
                "every key this node trusts run code here"
            )
        spec = child_from_table(child, "child", fail=plain_fail, load=_load_factory)
        await self.level.start_child(spec)
        return spec.child_name if isinstance(spec, ActorSpec) else spec.name

    @handler(roles=Role.OPERATOR)
    async def terminate_child(self, name: str) -> None:
        """Stop a child; it is not started again until :meth:`restart_child`."""
        await self.level.supervisor.terminate_child(name)

    @handler(roles=Role.OPERATOR)
    async def restart_child(self, name: str) -> None:
        """Start a terminated child again."""
        await self.level.supervisor.restart_child(name)

    @handler(roles=Role.OPERATOR)
    async def delete_child(self, name: str) -> None:
        """Forget a terminated child (and its name on the node)."""
        await self.level.delete_child(name)

    @handler
    async def tree(self) -> list[dict[str, Any]]:
        """Like which_children, with each nested supervisor's children inside."""
        return self.level.describe()


def _describe_actor(cell: ActorCell, row: TreeRow) -> TreeRow:
    stats = cell.mailbox.statistics()
    return attrs.evolve(row, mailbox=MailboxFill(stats.depth, stats.capacity))


def _describe_supervisor(nested: SupervisorActor, cell: ActorCell, row: TreeRow) -> TreeRow:
    return attrs.evolve(_describe_actor(cell, row), children=tuple(nested.level.rows()))


def _describe_boxed(boxed: Boxed, cell: ActorCell, row: TreeRow) -> TreeRow:
    return boxed.detail(_describe_actor(cell, row))


def _load_factory(target: str) -> Callable[..., Actor]:
    factory = import_target(target)
    if not callable(factory):
        raise ConfigError(f"{target} is not a class or function")
    result: Callable[..., Actor] = factory
    return result
