"""A node's supervision tree: what the node gives it (a :class:`Host`) and its
root, the node's own actors followed by the trees declared for it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import final

import attrs
import trio

from .._errors import ConfigError
from ..actors import Actor, ActorCell, Address, Outbox, ReplyMemory
from ..supervision import BoxedSpec, ChildError, Restart
from ..supervision._specs import ActorSpec, SupervisorSpec
from ..supervision._status import TreeRow
from ..supervision._tree import InstanceSpec, TreeLevel
from ._monitors import NodeMonitors

__all__ = ["Hostable", "Hosted", "NodeHost", "describe_root", "named", "node_root"]

Hosted = Actor | ActorSpec | SupervisorSpec | BoxedSpec
#: What a node hosts: actors (instances or classes), ActorSpecs, SupervisorSpecs.
Hostable = Actor | type[Actor] | ActorSpec | SupervisorSpec | BoxedSpec


@final
class NodeHost:
    """What a node offers its trees: names on the node, monitors, its stop."""

    def __init__(
        self,
        cells: dict[str, ActorCell],
        address_of: Callable[[str], Address],
        outbox: Outbox,
        monitors: NodeMonitors,
        stopping: trio.Event,
        replies: ReplyMemory | None = None,
    ) -> None:
        self._cells = cells
        self._address_of = address_of
        self._outbox = outbox
        self._monitors = monitors
        self._stopping = stopping
        self._replies = replies

    @property
    def stopping(self) -> trio.Event:
        return self._stopping

    def host(self, name: str, actor: Actor, factory: Callable[[], Actor] | None) -> ActorCell:
        if name in self._cells:
            raise ChildError(f"an actor named {name!r} is already on this node")
        cell = ActorCell(
            actor,
            self._address_of(name),
            self._outbox,
            factory=factory,
            monitors=self._monitors,
            replies=self._replies,
        )
        self._cells[name] = cell
        return cell

    def unhost(self, name: str) -> None:
        self._cells.pop(name, None)

    def gone(self, name: str, reason: str) -> None:
        self._monitors.gone(name, reason)


def node_root(
    name: str, hosted: Mapping[str, Hosted], host: NodeHost, restarts: tuple[int, float]
) -> TreeLevel:
    """The node's root supervisor: each actor a transient child (one whose
    mailbox was closed is done), each declared tree a permanent one."""
    children: list[InstanceSpec | ActorSpec | SupervisorSpec | BoxedSpec] = []
    for key, item in hosted.items():
        children.append(InstanceSpec(key, item) if isinstance(item, Actor) else item)
    return TreeLevel(
        f"{name}/actors",
        children,
        host,
        max_restarts=restarts[0],
        within=restarts[1],
        backoff=0.01,
        auto_shutdown=True,
    )


def describe_root(node: str, root: TreeLevel | None) -> TreeRow:
    """The node's tree as the ``_node`` agent answers it."""
    return TreeRow(
        f"{node}/actors",
        "supervisor",
        "running" if root is not None else "starting",
        restarts=0,
        children=tuple(root.rows()) if root is not None else (),
    )


def named(actors: Mapping[str, Hostable] | Iterable[Hostable]) -> dict[str, Hosted]:
    """What a node is given to host, by name (an unnamed one under its default name)."""
    items: Iterable[tuple[str | None, Hostable]] = (
        actors.items() if isinstance(actors, Mapping) else ((None, actor) for actor in actors)
    )
    named: dict[str, Hosted] = {}
    for name, spec in items:
        item: Hosted
        if isinstance(spec, type) and issubclass(spec, Actor):
            # A class: built afresh at each restart, a transient child as before.
            item = ActorSpec(spec, name=name or spec.default_name(), restart=Restart.TRANSIENT)
        elif isinstance(spec, Actor | ActorSpec | SupervisorSpec | BoxedSpec):
            item = spec
        else:
            raise ConfigError(
                f"{spec!r} is not an actorctl.Actor (subclass Actor and mark handlers), "
                "an ActorSpec, a SupervisorSpec or a BoxedSpec"
            )
        key = name or default_name(item)
        if isinstance(item, ActorSpec | SupervisorSpec | BoxedSpec) and item.name != key:
            item = attrs.evolve(item, name=key)
        if key in named:
            raise ConfigError(f"two actors are named {key!r} on one node: give one another name")
        named[key] = item
    return named


def default_name(item: Hosted) -> str:
    if isinstance(item, Actor):
        return type(item).default_name()
    return item.child_name if isinstance(item, ActorSpec) else item.name
