"""A Controller for nodes it does not start (``actorctl cluster controller``).

Under Kubernetes or systemd something else starts and restarts the nodes of a
cluster file; the cluster still wants its Controller (status and tree, dead
letters, ``control`` and ``inspect`` through ``broadcast``, the scheduler
lease, the web page and the aggregate /metrics). :func:`run_controller` runs
it with one :class:`NodeAttendant` per node of the file instead of a Foreman:
the attendant keeps the same :class:`NodeState`, learned from the node itself.

It asks the node's ``_node`` agent who it is (``identity``: address, actors,
pid, boot id, /metrics URL, as ``cluster up`` reads them from a node's ready
line), then watches that agent with the runtime's remote monitors: a
``Terminated`` comes when the node stops, or when its connection has been
down for ``lost_after`` seconds, or when it came back as another process. The
node is then down, and the attendant asks again, with a growing backoff,
until it answers; a node that answers with another boot id than the last one
has restarted. Nothing polls a node that runs: a running node costs one
watch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, final

import trio

from .._log import log
from ..actors import Actor, Terminated
from ..cluster._agent_answers import NodeIdentity
from ..cluster._monitors import AGENT
from ..cluster._node import open_node
from ..cluster.config._config import ClusterConfig, NodeConfig
from ._controller import CONTROLLER, Controller, _notify_systemd
from ._foreman import NodeRun, NodeState
from ._webserve import serve_web

__all__ = ["NodeAttendant", "run_controller"]

#: How long one ``identity`` question may take (s): a node that does not answer
#: within it is down for now.
ASK_TIMEOUT: Final = 5.0
#: The first and the longest wait (s) between two questions to a node that is down.
BACKOFF: Final = (0.25, 10.0)


@final
class NodeAttendant(Actor):
    """Keeps the :class:`NodeState` of one node that something else runs.

    Hosted on the Controller's node as ``_attend.NODE``.

    Args:
        config: the cluster.
        node: which node.
        state: updated as the node is reached, lost and reached again.
        on_change: called whenever ``state`` changes.
        tried: set once the first question to the node has an answer (or failed).
    """

    def __init__(
        self,
        config: ClusterConfig,
        node: NodeConfig,
        state: NodeState,
        on_change: Callable[[NodeState], None],
        tried: trio.Event,
    ) -> None:
        self._agent = f"{config.url(node)}/{AGENT}"
        self._state = state
        self._on_change = on_change
        self._tried = tried
        self._boot_id: str | None = None
        self._lost = trio.Event()
        self._why = ""

    @classmethod
    def name_for(cls, node: str) -> str:
        """The attendant's actor name for the node called ``node``."""
        return f"_attend.{node}"

    async def on_start(self) -> None:
        """Starts the loop (in the task that starts the actor)."""
        self.start_soon(self._attend)

    async def on_terminated(self, terminated: Terminated) -> None:
        """The watched agent is gone: its node stopped or was lost (in the actor's task)."""
        self._why = terminated.reason
        self._lost.set()

    async def _attend(self) -> None:
        """Reach the node, watch it until it is lost, and again, for ever."""
        agent = self.ref(self._agent).with_options(timeout=ASK_TIMEOUT)
        backoff = BACKOFF[0]
        while True:
            self._lost = trio.Event()
            try:
                identity = NodeIdentity.from_wire(
                    await agent.ask("identity"), f"the answer of {self._agent} to 'identity'"
                )
                await self.watch(agent)  # a loss from here on sets _lost
            except Exception as exc:  # any failure to reach it: down, for now
                self._down(f"not reachable at {self._agent}: {type(exc).__name__}: {exc}")
                self._tried.set()
                await trio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF[1])
                continue
            backoff = BACKOFF[0]
            self._up(identity)
            self._tried.set()
            await self._lost.wait()
            self._down(self._why)  # the watch has ended with its Terminated

    def _up(self, identity: NodeIdentity) -> None:
        boot_id = identity.node_id
        restarted = self._boot_id is not None and boot_id != self._boot_id
        self._boot_id = boot_id
        state = self._state
        if restarted:
            state.restarts += 1
        state.state, state.reason = NodeRun.RUNNING, None
        state.pid = identity.pid
        # The address it was reached at (a node may listen on 0.0.0.0).
        state.address = self._agent.rpartition("/")[0]
        state.actors = list(identity.actors)
        state.metrics = identity.metrics
        log("actorctl:controller:node-up", node=state.name, boot_id=boot_id, restarted=restarted)
        self._on_change(state)

    def _down(self, why: str) -> None:
        state = self._state
        if state.state == "down":  # still: no news, only the latest reason
            state.reason = why
            return
        was = state.state
        state.state, state.reason, state.metrics = NodeRun.DOWN, why, None
        if was == "running":
            log("actorctl:controller:node-down", node=state.name, reason=why)
        self._on_change(state)


async def run_controller(
    config: ClusterConfig,
    on_change: Callable[[NodeState], None],
    *,
    stop: trio.Event,
    listen: tuple[str, int] | None = None,
    lost_after: float = 5.0,
    web: tuple[str, int] | None = None,
    on_web: Callable[[str], None] | None = None,
    task_status: trio.TaskStatus[dict[str, NodeState]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the Controller of ``config`` for nodes that something else runs,
    until ``stop`` is set (or cancelled). Its nodes are not started or stopped.

    Reports the node states (and, under systemd, says READY=1 on
    NOTIFY_SOCKET) once its inbox serves and each node has been asked once:
    each is then ``running`` or ``down``; a node that comes later is seen
    later. ``listen`` is where its inbox listens (None: ``[cluster]
    controller``; under Kubernetes, 0.0.0.0 and the port, behind a Service
    that the file's ``controller`` names). A node whose connection stays
    down ``lost_after`` seconds is down. The web page is served at ``[cluster]
    web``, else at ``web`` (None: nowhere); ``on_web`` is told its URL.
    """
    states = {node.name: NodeState(node.name) for node in config.nodes}
    tried = {node.name: trio.Event() for node in config.nodes}
    attendants = {
        NodeAttendant.name_for(node.name): NodeAttendant(
            config, node, states[node.name], on_change, tried[node.name]
        )
        for node in config.nodes
    }
    controller = Controller(config, states, stop)
    host, port = listen or config.controller
    async with (
        open_node(
            CONTROLLER,
            {CONTROLLER: controller, **attendants},
            host=host,
            port=port,
            node_lost_after=lost_after,
            security=config.security(CONTROLLER),
        ) as node,
        trio.open_nursery() as nursery,
    ):
        web = config.web or web
        if web is not None:
            url = await nursery.start(serve_web, config, states, node, web)
            if on_web is not None:
                on_web(url)
        for event in tried.values():
            await event.wait()
        task_status.started(states)
        _notify_systemd("READY=1")
        await stop.wait()
        nursery.cancel_scope.cancel(reason="controller stopping")
