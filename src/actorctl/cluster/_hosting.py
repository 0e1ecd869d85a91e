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

__all__ = ["ActorsFactory", "hosted_actors"]


@runtime_checkable
class ActorsFactory(Protocol):
    """Makes the actors one node hosts."""

    def actors_for(self, cluster: ClusterConfig | None, node: NodeConfig) -> Mapping[str, Actor]:
        """The actors ``node`` of ``cluster`` hosts, by name (``cluster`` is None
        for a node run without its cluster file)."""
        ...


def hosted_actors(
    target: str | None,
    instances: int = 1,
    *,
    node: NodeConfig | None = None,
    cluster: ClusterConfig | None = None,
) -> dict[str, Actor]:
    """The actors MODULE:OBJECT names, by the name each is reachable under; with
    ``instances`` above 1, also NAME-2, NAME-3, ... (each a fresh instance). An
    actors factory is asked once, with ``cluster`` and ``node``.

    Raises:
        ConfigError: naming the module or object that is wrong.
    """
    actors: dict[str, Actor] = {}
    if target is None:
        return actors
    obj = import_target(target)
    if isinstance(obj, ActorsFactory) and not isinstance(obj, type):
        if node is None:
            raise ConfigError(
                f"{target} is an actors factory: run its node from a cluster.toml "
                "(`actorctl node run ... --cluster FILE --name NODE`, or `cluster up`)"
            )
        return _checked(target, obj.actors_for(cluster, node))
    for copy in range(1, instances + 1):
        for name, actor in _named_actors(_as_collection(target, import_target(target))):
            if any(actor is other for other in actors.values()):
                raise ConfigError(
                    f"{target}: hosting {instances} instances needs actor classes, "
                    "not instances (each copy must be an actor of its own)"
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


def _named_actors(obj: Any) -> list[tuple[str, Actor]]:
    """What MODULE:OBJECT names, as (name, actor) pairs; classes are instantiated."""
    pairs = list(obj.items()) if isinstance(obj, Mapping) else [(None, spec) for spec in obj]
    named = []
    for name, spec in pairs:
        actor = spec() if isinstance(spec, type) else spec
        if not isinstance(actor, Actor):
            raise ConfigError(f"{spec!r} is not an actorctl.Actor")
        named.append((name or type(actor).default_name(), actor))
    return named
