"""What a node hosts: the actors that MODULE:OBJECT names.

OBJECT is an Actor subclass or instance, a list of them, or a mapping of name
to either (N instances of each: NAME, NAME-2, ...), or an **actors factory**:
an object with an ``actors_for(cluster, node)`` method that makes the actors
itself, knowing the cluster it is part of and the node's own settings (the
keys of its ``[[node]]`` table that this layer does not read). A task app is
one (``actorctl.tasks``): the cluster hosts its pools this way, as any actor.

A factory says which settings it reads (``settings_keys``); any other key of
the node's table is an error here, as is any such key on a node whose actors
are not a factory: nothing would read it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from .._errors import ConfigError
from ..actors import Actor
from ..supervision import BoxedSpec, import_target
from .config._config import ClusterConfig, NodeConfig
from .config._config_keys import unknown_key
from .config._health_config import with_health
from .config._tables import NODE_KEYS

__all__ = ["ActorsFactory", "Hosted", "PoolsFactory", "hosted_actors", "hosted_pools"]


@runtime_checkable
class ActorsFactory(Protocol):
    """Makes the actors one node hosts."""

    @property
    def settings_keys(self) -> Collection[str]:
        """The keys of its node's table it reads, besides those every node has
        (name, listen, actors, instances, durable): any other key there is an error. A
        class attribute will do (``settings_keys = frozenset({"pools"})``)."""
        ...

    def actors_for(
        self, cluster: ClusterConfig | None, node: NodeConfig
    ) -> Mapping[str, Actor | BoxedSpec]:
        """The actors ``node`` of ``cluster`` hosts, by name (``cluster`` is None
        for a node run without its cluster file); a BoxedSpec is a boxed worker
        with the actor it makes in front (a task app's pool served by one)."""
        ...


@runtime_checkable
class PoolsFactory(Protocol):
    """An actors factory that also says which of its actors serve a pool (a task
    app): what a node's record in etcd lists as its workers (``NodeRecord.workers``)."""

    def pools_for(
        self, cluster: ClusterConfig | None, node: NodeConfig
    ) -> Mapping[str, Sequence[str]]:
        """Each pool ``node`` serves, with the names of its workers there."""
        ...


def hosted_pools(
    target: str | None, *, node: NodeConfig, cluster: ClusterConfig | None
) -> dict[str, list[str]]:
    """The pools ``node`` serves, as the actors factory ``target`` names says
    (none for actors that are no :class:`PoolsFactory`).

    Raises:
        ConfigError: naming the module or object that is wrong.
    """
    if target is None:
        return {}
    obj = import_target(target)
    if isinstance(obj, type) or not isinstance(obj, PoolsFactory):
        return {}
    return {
        str(pool): [str(w) for w in workers]
        for pool, workers in obj.pools_for(cluster, node).items()
    }


#: What MODULE:OBJECT names for a node to host: a class (the node builds a fresh
#: instance of it at each start and restart) or an instance (started again as
#: it is).
Hosted = Actor | type[Actor] | BoxedSpec


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
    actors = _hosted(target, instances, node=node, cluster=cluster)
    return with_health(actors, node, cluster)


def _hosted(
    target: str | None,
    instances: int = 1,
    *,
    node: NodeConfig | None = None,
    cluster: ClusterConfig | None = None,
) -> dict[str, Hosted]:
    actors: dict[str, Hosted] = {}
    if target is None:
        return actors
    obj = import_target(target)
    factory = obj if isinstance(obj, ActorsFactory) and not isinstance(obj, type) else None
    if factory is None and hasattr(obj, "actors_for") and not isinstance(obj, type):
        raise ConfigError(
            f"{target} has actors_for but no settings_keys: an actors factory says "
            "which keys of its node's table it reads (settings_keys = frozenset(...), "
            "empty if it reads none)"
        )
    if node is not None:
        _check_settings(target, factory, node, cluster)
    if factory is not None:
        if node is None:
            raise ConfigError(
                f"{target} is an actors factory: run its node from a cluster.toml "
                "(`actorctl node run ... --cluster FILE --name NODE`, or `cluster up`)"
            )
        return dict(_checked(target, factory.actors_for(cluster, node)))
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


def _check_settings(
    target: str, factory: ActorsFactory | None, node: NodeConfig, cluster: ClusterConfig | None
) -> None:
    """Refuse a key of the node's table that neither this layer nor its actors
    factory reads.

    Raises:
        ConfigError: naming the file, the node's table, the key and the fix.
    """
    reads = frozenset(factory.settings_keys) if factory is not None else frozenset()
    index = [n.name for n in cluster.nodes].index(node.name) if cluster is not None else None
    table = f"node[{index}]" if index is not None else f"node {node.name!r}"
    for key, value in node.settings.items():
        if key in reads:
            continue
        why = (
            f"the actors factory {target} reads no such key"
            if factory is not None
            else f"nothing reads it: {target} is not an actors factory (only a factory, "
            "such as a task app, reads a node's other keys)"
        )
        path = cluster.path if cluster is not None else None
        raise unknown_key(path, f"{table}.{key}", value, NODE_KEYS | reads, why)


def _as_collection(target: str, obj: Any) -> Any:
    if isinstance(obj, Actor) or (isinstance(obj, type) and issubclass(obj, Actor)):
        return [obj]
    if isinstance(obj, Mapping | list | tuple):
        return obj
    raise ConfigError(
        f"{target} is a {type(obj).__name__}: expected an Actor subclass or instance, "
        "a list of them, a mapping of name to actor, or an actors factory"
    )


def _checked(target: str, actors: Mapping[str, Any]) -> dict[str, Actor | BoxedSpec]:
    for name, actor in actors.items():
        if not isinstance(actor, Actor | BoxedSpec):
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
