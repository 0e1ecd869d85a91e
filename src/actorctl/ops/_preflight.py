"""What ``cluster up`` checks before it starts anything: that every reference
in cluster.toml resolves, as the nodes will resolve it, and that every port is
free.

The file itself is checked when it is read (``_config``), without importing
anything. Here the modules that ``actors =`` and ``[[supervisor]]`` children
name are imported, in this process, where a node looks for them: the
directory of cluster.toml first, then the directory ``cluster up`` runs in,
then ``PYTHONPATH`` (as :meth:`Foreman._environment` sets it for each node).
So a misspelled object, a pool that no app defines, a router instance that
its node does not host, or a taken port is an error naming the file and the
key before any node starts.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import sys
from collections.abc import Iterator

from .._errors import ConfigError
from ..cluster._hosting import hosted_actors
from ..cluster.config._config import ClusterConfig, NodeConfig

__all__ = ["check_references", "module_environment", "module_paths", "taken_ports"]


def module_paths(config: ClusterConfig) -> list[str]:
    """Where a node of ``config`` looks for the modules its file names, first
    to last (before ``PYTHONPATH``)."""
    return list(dict.fromkeys([str(config.root), os.getcwd()]))


def module_environment(paths: list[str]) -> dict[str, str]:
    """This process's environment, with ``paths`` (:func:`module_paths`) before
    its ``PYTHONPATH``: what a node, or ``cluster check``, is started with."""
    found = [*paths, os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in found if p)}


def check_references(config: ClusterConfig) -> None:
    """Import and build what each node would host; check every router's
    instances against what their nodes host.

    Raises:
        ConfigError: naming the file, the key, and what exists.
    """
    hosted: dict[str, set[str]] = {}
    with _importing_from(module_paths(config)):
        for index, node in enumerate(config.nodes):
            hosted[node.name] = _node_names(config, index, node)
    if config.app is not None:  # what the application checks of its own tables
        config.app.check(config, hosted)
    for node in config.nodes:
        for name, instances in node.routes:
            for instance in instances:
                where, _, actor = instance.partition("/")
                if actor not in hosted[where]:
                    raise ConfigError(
                        f"{config.path}: key 'instances' of [[router]] {name!r}: "
                        f"{instance!r}: node {where!r} hosts no actor {actor!r} (it hosts "
                        f"{sorted(hosted[where])}): name one of those, or give the node "
                        "more instances (instances = N on its [[node]])"
                    )


def _node_names(config: ClusterConfig, index: int, node: NodeConfig) -> set[str]:
    try:
        names = set(hosted_actors(node.actors, node.instances, node=node, cluster=config))
        names |= {spec.name for spec in config.supervisor_specs(node)}
    except ConfigError as exc:
        text = str(exc).removeprefix(f"{config.path}: ")
        # Where modules are looked up helps only when a module was not found.
        where = (
            f" (modules are looked up in {module_paths(config)}, then PYTHONPATH)"
            if text.startswith("cannot import module")
            else ""
        )
        raise ConfigError(
            f"{config.path}: node[{index}] ({node.name!r}, actors = {node.actors!r}): {text}{where}"
        ) from None
    return names | {name for name, _ in node.routes}


@contextlib.contextmanager
def _importing_from(paths: list[str]) -> Iterator[None]:
    before = list(sys.path)
    sys.path[:0] = [p for p in paths if p not in sys.path]
    try:
        yield
    finally:
        sys.path[:] = before


def taken_ports(config: ClusterConfig) -> list[tuple[str, str, int]]:
    """The (who, host, port) of every node and of the Controller whose port
    another process holds: ``who`` is ``node NAME`` or ``the controller``.

    Raises:
        ConfigError: a host that does not resolve, or is not this machine's.
    """
    wanted = [(f"node {node.name}", node.host, node.port) for node in config.nodes]
    wanted.insert(0, ("the controller", *config.controller))
    return [(who, host, port) for who, host, port in wanted if _taken(config, who, host, port)]


def _taken(config: ClusterConfig, who: str, host: str, port: int) -> bool:
    key = "cluster.controller" if who == "the controller" else f"the listen of {who}"
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ConfigError(
            f"{config.path}: {key}: host {host!r} does not resolve ({exc.strerror or exc}): "
            "use an address of this machine, e.g. 127.0.0.1"
        ) from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                raise ConfigError(
                    f"{config.path}: {key}: {host} is not an address of this machine: "
                    "use one of its own, e.g. 127.0.0.1 or 0.0.0.0"
                ) from None
            return exc.errno == errno.EADDRINUSE
    return False
