"""How the CLI reads a cluster file: with the tables the task layer declares.

The runtime's ``load_cluster`` knows only the runtime's own tables; the
``actorctl`` command runs task clusters too, so it reads every file with the
task layer's :func:`~actorctl.tasks.cluster_app` (its ``[[periodic]]``,
``[[source]]`` and ``[[task]]`` tables, its roles and checks). The task layer
is imported when a file is first read, not when the command starts.
"""

from __future__ import annotations

from pathlib import Path

from ..cluster import ClusterConfig, load_cluster

__all__ = ["read_cluster"]


def read_cluster(path: Path | str) -> ClusterConfig:
    """Read and check the cluster file ``path``, the task layer's tables too.

    Raises:
        ConfigError: naming the file, the key and what was expected.
    """
    from ..tasks import cluster_app  # the task layer, when a file is read

    return load_cluster(path, cluster_app())
