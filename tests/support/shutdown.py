"""The cluster of tests/apps/shutdown_app.py under ``cluster up`` or ``host up``:
the warm-stop tests (tests/tasks/test_warm_shutdown.py, tests/hosts/test_host_stop.py)
hold its workers' tasks back, read what they recorded, and ask its Controller."""

from __future__ import annotations

from typing import Any

import attrs

from actorctl import open_node
from actorctl.cluster import load_cluster
from tests.apps.shutdown_app import held_by
from tests.support.cluster_up import ClusterUp, Output

__all__ = ["WAIT", "Cluster"]

#: Seconds a cluster may take to start, or a step of a test to happen, on a loaded 2-core machine.
WAIT = 60.0


@attrs.define
class Cluster(ClusterUp):
    """A cluster of tests/apps/shutdown_app.py run by ``actorctl cluster up``."""

    err: Output  # its warnings, and what it says of nodes that stopped

    def hold(self, node: str) -> None:
        """Hold back the tasks of ``node`` before they end, until :meth:`release`."""
        self.lock(node, held_by(self.pids[node]))

    def runs(self, pid: int) -> list[str]:
        """What the runs in process ``pid`` recorded, in order (whole lines)."""
        return [line for line in self._lines(pid) if not line.startswith("took:")]

    def took(self, pid: int) -> int:
        """How many tasks process ``pid``'s worker took (``task_received``)."""
        return sum(line.startswith("took:") for line in self._lines(pid))

    def _lines(self, pid: int) -> list[str]:
        path = self.records.directory / f"{pid}.log"
        if not path.exists():
            return []
        data = path.read_bytes()
        return data[: data.rfind(b"\n") + 1].decode().split()

    async def wait_ready(self, node: str, timeout: float = WAIT) -> int:
        return await ClusterUp.wait_ready(self, node, timeout)

    async def ask_controller(self, handler: str, *args: Any) -> Any:
        """Ask the cluster's Controller (signed, over mutual TLS), as the CLI does."""
        config = load_cluster(self.path)
        host, port = config.controller
        async with open_node("probe", host=None, security=config.security("cli")) as node:
            ref = node.ref(f"{config.scheme}://{host}:{port}/controller")
            return await ref.with_options(timeout=WAIT).ask(handler, *args)
