"""What ``actorctl cluster reload`` changes: the difference between the file a
cluster runs and the file it is given, as a plan the Controller applies
(``_reloader.py``).

Each change is applied in the least disruptive way that is still exact:

- A node in the new file only is **added** (started); one in the old file only
  is **removed**: routers stop sending to it, it finishes what it holds
  (drained), then it stops.
- A node whose own table changed (listen address, actors, instances, limits,
  dead letters, metrics, the settings its actors factory reads, its routers,
  supervision trees or boxed workers) is **restarted**: drained as a removed
  one is, then started with the new file.
- What a running node can follow in place is **live**: a router's instances,
  and certificates and keys on disk. Each node is told to follow the new file;
  what its actors changed comes back in its answer.
- The tables of the application the file was read for (``ClusterApp``) say
  for themselves what their changes make live and whom they restart
  (``ClusterApp.reload``): the runtime knows none of them.

The ``[cluster]`` table names the cluster, its controller and its secrets: a
reload that changes it is refused, naming the key (it needs ``cluster down``
and ``cluster up``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any, Final, final

import attrs

from .._errors import ConfigError
from .config._config import ClusterConfig, NodeConfig

__all__ = ["ReloadPlan", "Shift", "changed_tables", "plan_reload", "shown"]

#: The [cluster] keys a reload cannot change.
_FIXED: Final = ("name", "certs", "keys", "insecure", "controller", "web")
#: A node's own keys, compared as they are.
_OWN: Final = ("actors", "instances", "durable", "deadletters", "metrics", "limits", "health")


@final
@attrs.frozen
class Shift:
    """How routers treat the nodes a reload changes, while it is applied:
    nothing new goes to a node ``away`` (removed, being drained, not started
    yet); one ``pending`` (to restart later) keeps the instances it has now,
    not those the new file gives it."""

    away: frozenset[str] = frozenset()
    pending: frozenset[str] = frozenset()


@final
@attrs.frozen
class ReloadPlan:
    """The nodes added, removed and restarted (each with what changed on it),
    and the changes running nodes follow in place."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    restarted: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    live: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.restarted or self.live)

    def lines(self) -> list[str]:
        """The plan as ``cluster reload`` prints it, a change a line."""
        lines = [f"+ node {name}: start it" for name in self.added]
        lines += [f"- node {name}: drain it, then stop it" for name in self.removed]
        for name, why in self.restarted.items():
            lines.append(f"~ node {name}: drain it, restart it ({'; '.join(why)})")
        lines += [f"~ {line}" for line in self.live]
        return lines or ["no change"]


def plan_reload(
    old: ClusterConfig, new: ClusterConfig, hosted: Mapping[str, Collection[str]]
) -> ReloadPlan:
    """What it takes to go from ``old`` to ``new``; ``hosted``: the actors each
    running node hosts (to find who reads a data source).

    Raises:
        ConfigError: ``new`` changes what a reload cannot (the [cluster] table).
    """
    for key in _FIXED:
        before, after = getattr(old, key), getattr(new, key)
        if before != after:
            raise ConfigError(
                f"{new.path}: key 'cluster.{key}' changed ({shown(before)} -> {shown(after)}): "
                f"a reload cannot change it: `actorctl cluster down {new.path}` then "
                "`actorctl cluster up` applies it"
            )
    before = {node.name: node for node in old.nodes}
    after = {node.name: node for node in new.nodes}
    restarted: dict[str, list[str]] = {}
    for name in before.keys() & after.keys():
        why = _node_changes(old, new, before[name], after[name])
        if why:
            restarted[name] = why
    live = list(_live(old, new, before.keys() & after.keys()))
    if new.app is not None:
        app = new.app.reload(old, new, hosted)
        for node, what in app.restart.items():
            if node in before and node in after:
                restarted.setdefault(node, []).extend(what)
        live += app.live
    return ReloadPlan(
        added=tuple(n for n in after if n not in before),
        removed=tuple(n for n in before if n not in after),
        restarted={n.name: tuple(restarted[n.name]) for n in new.nodes if n.name in restarted},
        live=tuple(live),
    )


def _node_changes(
    old: ClusterConfig, new: ClusterConfig, a: NodeConfig, b: NodeConfig
) -> list[str]:
    """What changed in one node's own table, or in what it alone hosts."""
    why = []
    if a.listen != b.listen:
        why.append(f"listen {a.listen} -> {b.listen}")
    for key in _OWN:
        if getattr(a, key) != getattr(b, key):
            why.append(f"{key} {shown(getattr(a, key))} -> {shown(getattr(b, key))}")
    for key in sorted(a.settings.keys() | b.settings.keys()):
        if a.settings.get(key) != b.settings.get(key):
            why.append(f"{key} {shown(a.settings.get(key))} -> {shown(b.settings.get(key))}")
    gone = [name for name, _ in a.routes if name not in dict(b.routes)]
    came = [name for name, _ in b.routes if name not in dict(a.routes)]
    why += [f"router {name} added" for name in came] + [f"router {name} gone" for name in gone]
    if (a.supervisors or b.supervisors) and (
        a.supervisors != b.supervisors or old.supervisor_tables != new.supervisor_tables
    ):
        why.append("its [[supervisor]] trees changed")
    if _boxed(old, a) != _boxed(new, b):
        why.append("its [[boxed]] workers changed")
    return why


def _boxed(config: ClusterConfig, node: NodeConfig) -> list[str]:
    return [repr(spec) for on, spec in config.boxed if on == node.name]


def _live(old: ClusterConfig, new: ClusterConfig, kept: Collection[str]) -> Iterable[str]:
    """The changes running nodes follow in place, a line each."""
    for node in new.nodes:
        if node.name not in kept:
            continue
        was = dict(old.routes(old.node(node.name)))
        for name, instances in new.routes(node):
            if name in was and sorted(was[name]) != sorted(instances):
                count = f"{len(was[name])} -> {len(instances)}"
                yield f"router {name} on {node.name}: {count} instances"


def changed_tables(
    old: Iterable[Mapping[str, Any] | attrs.AttrsInstance],
    new: Iterable[Mapping[str, Any] | attrs.AttrsInstance],
) -> Iterable[tuple[str, str]]:
    """The ``[[...]]`` tables added, removed or changed, by name: each a table
    as the file has it, or its record (a key left out is None)."""
    before = dict(_named(table) for table in old)
    after = dict(_named(table) for table in new)
    for name in sorted(before.keys() | after.keys()):
        if name not in before:
            yield name, "added"
        elif name not in after:
            yield name, "removed"
        elif before[name] != after[name]:
            keys = sorted(
                k for k in before[name].keys() | after[name].keys()
                if before[name].get(k) != after[name].get(k)
            )  # fmt: skip
            yield (
                name,
                "changed ("
                + ", ".join(
                    f"{k} {shown(before[name].get(k))} -> {shown(after[name].get(k))}" for k in keys
                )
                + ")",
            )


def _named(table: Mapping[str, Any] | attrs.AttrsInstance) -> tuple[str, dict[str, object]]:
    """A table's name and its keys' values (a record's keys left out are None)."""
    given = dict(table) if isinstance(table, Mapping) else attrs.asdict(table, recurse=False)
    return str(given.get("name")), {k: v for k, v in given.items() if v is not None}


def shown(value: object) -> str:
    """A value as ``cluster reload`` prints it."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} = {shown(v)}" for k, v in sorted(value.items())) + "}"
    if value is None:
        return "(none)"
    return repr(value) if isinstance(value, str) else str(value)
