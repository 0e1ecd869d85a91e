"""What a node hosts: the actors that MODULE:OBJECT names.

OBJECT is an Actor subclass or instance, a list of them, or a mapping of name
to either (N instances of each: NAME, NAME-2, ...), or an **actors factory**:
an object with an ``actors_for(cluster, node)`` method that makes the actors
itself, knowing the cluster it is part of and the node's own settings (the
keys of its ``[[node]]`` table that this layer does not read). A task app is
one (``actorctl.tasks``): the cluster hosts its pools this way, as any actor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from .._errors import ConfigError
from ..actors import Actor
from ..supervision import import_target
from ._config import ClusterConfig, NodeConfig

__all__ = ["ActorsFactory", "Hosted", "hosted_actors"]


@runtime_checkable
class ActorsFactory(Protocol):
    """Makes the actors one node hosts."""

    def actors_for(self, cluster: ClusterConfig | None, node: NodeConfig) -> Mapping[str, Actor]:
        """The actors ``node`` of ``cluster`` hosts, by name (``cluster`` is None
        for a node run without its cluster file)."""
        ...


#: What MODULE:OBJECT names for a node to host: a class (the node builds a fresh
#: instance of it at each start and restart) or an instance (started again as
#: it is).
Hosted = Actor | type[Actor]


def hosted_actors(
    target: str | None,
    instances: int = 1,
    *,
    node: NodeConfig | None = None,
    cluster: ClusterConfig | None = None,
) -> dict[str, Hosted]:
    """The actors MODULE:OBJECT names, by the name each is reachable under; with
    ``instances`` above 1, also NAME-2, NAME-3, ... An actor named by its class
    stays a class here: the node builds each copy from it, afresh at each
    restart, so its state does not survive a crash. An actors factory is asked
    once, with ``cluster`` and ``node``.

    Raises:
        ConfigError: naming the module or object that is wrong.
    """
    actors: dict[str, Hosted] = {}
    if target is None:
        return actors
    obj = import_target(target)
    if isinstance(obj, ActorsFactory) and not isinstance(obj, type):
        if node is None:
            raise ConfigError(
                f"{target} is an actors factory: run its node from a cluster.toml "
                "(`actorctl node run ... --cluster FILE --name NODE`, or `cluster up`)"
            )
        return dict(_checked(target, obj.actors_for(cluster, node)))
    named = _named_actors(_as_collection(target, obj))
    for copy in range(1, instances + 1):
        for name, actor in named:
            if copy > 1 and isinstance(actor, Actor):
                raise ConfigError(
                    f"{target}: hosting {instances} instances needs actor classes, "
                    f"not instances (each copy must be an actor of its own; {name!r} is "
                    f"an instance of {type(actor).__name__})"
                )
            actors[name if copy == 1 else f"{name}-{copy}"] = actor
    return actors


def _as_collection(target: str, obj: Any) -> Any:
    if isinstance(obj, Actor) or (isinstance(obj, type) and issubclass(obj, Actor)):
        return [obj]
    if isinstance(obj, Mapping | list | tuple):
        return obj
    raise ConfigError(
        f"{target} is a {type(obj).__name__}: expected an Actor subclass or instance, "
        "a list of them, a mapping of name to actor, or an actors factory"
    )


def _checked(target: str, actors: Mapping[str, Any]) -> dict[str, Actor]:
    for name, actor in actors.items():
        if not isinstance(actor, Actor):
            raise ConfigError(f"{target}: the factory made {actor!r} as {name!r}, not an Actor")
    return dict(actors)


def _named_actors(obj: Any) -> list[tuple[str, Hosted]]:
    """What MODULE:OBJECT names, as (name, class or actor) pairs."""
    pairs = list(obj.items()) if isinstance(obj, Mapping) else [(None, spec) for spec in obj]
    named: list[tuple[str, Hosted]] = []
    for name, spec in pairs:
        if isinstance(spec, type) and issubclass(spec, Actor):
            named.append((name or spec.default_name(), spec))
        elif isinstance(spec, Actor):
            named.append((name or type(spec).default_name(), spec))
        else:
            raise ConfigError(f"{spec!r} is not an actorctl.Actor")
    return named
