"""Declaring data sources: ``app.add_source`` and ``[[source]]`` tables, checked.

Both make a :class:`SourceSpec`. What is wrong is refused by name before
anything starts (``cluster up``'s preflight builds every node's actors): a
misspelt key (``_config``), an unknown kind or task ("did you mean"), a key
of another kind, an actor (a sink) that the directory does not resolve, a node
that does not exist, a name used twice.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from ..._errors import ConfigError
from .._cluster_tables import SourceTable
from ..client._client import Directory
from ._kind_tables import KIND_KEYS
from ._source import Source, SourceSpec
from ._source_kinds import checked_factory, reader_factory

__all__ = [
    "SOURCE_PREFIX",
    "cluster_sources",
    "source_actor",
    "source_spec",
]

#: A source named ``NAME`` is the actor ``source.NAME`` on its node.
SOURCE_PREFIX: Final = "source."


def source_actor(name: str) -> str:
    """The name of the actor that reads the source ``name``."""
    return f"{SOURCE_PREFIX}{name}"


_NAME: Final = re.compile(r"[A-Za-z0-9_.:-]+")
#: What a source takes when its table or ``add_source`` leaves a key out (None).
_HANDLER: Final = "take"
_POLL: Final = 1.0
_BATCH: Final = 100
_WINDOW: Final = 100


def source_spec(
    tasks: Mapping[str, str],
    *,
    name: object,
    source: object,
    settings: Mapping[str, Any] | None = None,
    task: object = None,
    actor: object = None,
    handler: object = None,
    node: object = None,
    poll: object = None,
    batch: object = None,
    window: object = None,
    root: Path | None = None,
) -> SourceSpec:
    """Check and build a source.

    Args:
        tasks: the app's task names, each with its pool.
        source: a kind (``directory``, ``http``, ``sqlite``, ``module:Class``)
            read with ``settings``; or a Source class or factory (called with
            ``settings`` at each start of the source); or a Source.
        handler, poll, batch, window: None (a table that leaves the key
            out) takes the default: ``take``, 1 second, 100, 100.

    Raises:
        ConfigError: naming the source and what is wrong.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(
            f"source name: expected letters, digits, '_', '.', ':' or '-', got {name!r}"
        )
    handler = _HANDLER if handler is None else handler
    poll = _POLL if poll is None else poll
    batch = _BATCH if batch is None else batch
    window = _WINDOW if window is None else window
    try:
        make, kind = _reader(source, dict(settings or {}), root)
        if (task is None) == (actor is None):
            raise ConfigError("give exactly one of task = ... and actor = ... (what it feeds)")
        pool = None
        if task is not None:
            if not isinstance(task, str) or task not in tasks:
                close = difflib.get_close_matches(str(task), sorted(tasks), n=1)
                hint = f": did you mean {close[0]!r}?" if close else f" (tasks: {sorted(tasks)})"
                raise ConfigError(f"task: no task named {task!r}{hint}")
            pool = tasks[task]
        for what, value in (("actor", actor), ("handler", handler), ("node", node)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ConfigError(f"{what}: expected a name, got {value!r}")
        if isinstance(poll, bool) or not isinstance(poll, int | float) or not poll > 0:
            raise ConfigError(f"poll: expected seconds > 0, got {poll!r}")
        for what, value in (("batch", batch), ("window", window)):
            if type(value) is not int or value < 1:
                raise ConfigError(f"{what}: expected a whole number >= 1, got {value!r}")
    except ConfigError as exc:
        raise ConfigError(f"source {name!r}: {exc}") from None
    return SourceSpec(
        name, make, kind, task=task, pool=pool, actor=actor, handler=str(handler),  # type: ignore[arg-type]
        poll=float(poll), batch=batch, window=window, node=node,  # type: ignore[arg-type]
    )  # fmt: skip


def _reader(
    source: object, settings: dict[str, Any], root: Path | None
) -> tuple[Callable[[], Source], str]:
    if isinstance(source, str):
        return reader_factory(source, settings, root=root), source
    if isinstance(source, Source) and not isinstance(source, type):
        if settings:
            raise ConfigError("settings go with a kind or a class, not a Source made already")
        return (lambda: source), type(source).__qualname__
    if callable(source):
        label = getattr(source, "__qualname__", repr(source))
        return checked_factory(source, label, settings), label
    raise ConfigError(f"expected a kind, a Source class or a Source, got {source!r}")


def cluster_sources(
    declared: Mapping[str, SourceSpec],
    tasks: Mapping[str, str],
    tables: Sequence[SourceTable],
    config_path: Path,
    directory: Directory,
    nodes: Sequence[str],
) -> list[SourceSpec]:
    """The sources of a cluster: those its app declares and its cluster.toml's
    ``[[source]]`` tables (their keys and typed values checked already, as
    records), each checked against the app and the cluster: its kind and
    task, the actor it feeds resolves, its node exists.

    Raises:
        ConfigError: naming the file, the table and what is wrong.
    """
    found = dict(declared)
    for index, table in enumerate(tables):
        where = f"{config_path}: source[{index}]"
        try:
            spec = source_spec(
                tasks, name=table.name, source=table.kind,
                settings=table.kind_settings(KIND_KEYS), root=config_path.parent,
                task=table.task, actor=table.actor, handler=table.handler, node=table.node,
                poll=table.poll, batch=table.batch, window=table.window,
            )  # fmt: skip
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if spec.name in found:
            raise ConfigError(f"{where}: the source name {spec.name!r} is used twice")
        found[spec.name] = spec
    for spec in found.values():
        try:
            if spec.actor is not None:
                directory.resolve(spec.actor)
            if spec.node is not None and spec.node not in nodes:
                close = difflib.get_close_matches(spec.node, list(nodes), n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"nodes: {sorted(nodes)}"
                raise ConfigError(f"node: no node named {spec.node!r}: {hint}")
        except ConfigError as exc:
            raise ConfigError(f"{config_path}: source {spec.name!r}: {exc}") from None
    return list(found.values())
