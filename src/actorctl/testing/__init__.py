"""Testing apps built on actorctl: an in-process cluster of real nodes, and
eager mode's companion helpers (docs/testing.md).

``open_cluster(app)`` runs a services node and worker nodes in the test's trio
run, on loopback, and connects the app to them; ``await cluster.wait_idle()``
waits until nothing holds a task. The pytest plugin (``actorctl.testing.plugin``,
loaded by the ``pytest11`` entry point) offers it as the ``actorctl_cluster``
fixture. Eager mode itself is ``App(..., eager=True)``.
"""

from ._cluster import SERVICES as SERVICES
from ._cluster import TestCluster as TestCluster
from ._cluster import open_cluster as open_cluster
from ._cluster import trio_clock as trio_clock

__all__ = ["SERVICES", "TestCluster", "open_cluster", "trio_clock"]
