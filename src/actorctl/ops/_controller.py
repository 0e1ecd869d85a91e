"""The Controller: the root supervisor of a cluster, and an actor with its own
signed inbox.

It supervises one Foreman per node of the cluster file (``cluster up``), or
attends nodes that something else runs (``cluster controller``, ``_attend.py``),
and serves ``tree``,
``status``, ``deadletters``, ``holder`` and ``down`` to ``actorctl cluster
status`` / ``cluster down`` (and the other commands) from another terminal,
over the same mutually authenticated, signed links as everything else. It is
the root of the cluster's one supervision tree: Controller, then nodes, then
each node's supervisors and actors (which each node's ``_node`` agent
describes). It also grants role leases (``lease``, ``_leases.py``), the
singletons of the application on the cluster, and says who holds one
(``holder``); and applies a changed cluster file to the running cluster
(``reload``, ``_reloader.py``).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Final, final

import attrs
import trio

from .._errors import ActorctlError, ConfigError
from .._log import log
from ..actors import Actor, BadArguments, handler
from ..cluster._agent_answers import MailboxCounts, mailbox_counts
from ..cluster._deadletters import DEAD_LETTERS
from ..cluster._node import open_node
from ..cluster.config._config import ClusterConfig, NodeConfig
from ..cluster.membership._leases import LeaseTable
from ..mailbox import Role
from ..supervision import ChildSpec, Strategy, Supervisor
from ..supervision._status import TreeRow
from ._foreman import Foreman, LocalForeman, NodeRun, NodeState
from ._node_status import NodeStatus
from ._node_view import answer_within, ask_each, letters_answer, letters_request, node_children
from ._reloader import DRAIN_TIMEOUT, NodeRunner, Reloader
from ._webserve import serve_web

__all__ = ["CONTROLLER", "Controller", "run_cluster"]

CONTROLLER: Final = "controller"
#: The key of a node's entry in a ``deadletters`` answer when it did not answer.


@final
class Controller(Actor):
    """The cluster's own inbox: ``tree``, ``status`` and ``down``."""

    name = CONTROLLER
    # Handlers wait on nodes (a frozen one for its whole timeout): an
    # operator's command must not queue behind the web page's ``tree``.
    concurrency: ClassVar[int] = 16

    def __init__(
        self,
        config: ClusterConfig,
        states: dict[str, NodeState],
        stop: trio.Event,
        nodes: Supervisor | None = None,
        reloader: Reloader | None = None,
    ) -> None:
        self._config = config
        self._states = states
        self._stop = stop
        self._nodes = nodes  # the supervisor of the nodes (``stop_node``)
        self._reloader = reloader  # None: it does not run its nodes
        self._leases = LeaseTable(trio.current_time)

    @handler
    async def status(self) -> list[dict[str, Any]]:
        """One row per node (``NodeStatus``): name, pid, address, actors,
        state, restarts, and the mailbox depth of each actor (asked of the
        node itself)."""
        rows = []
        for node in self._config.nodes:
            state = self._states.get(node.name)
            if state is None:  # removed by a reload under way
                continue
            mailboxes: dict[str, MailboxCounts] | str = {}
            if state.state == "running" and state.address:
                address = f"{state.address}/_node"
                try:
                    said = await self.ref(address).with_options(timeout=2.0).ask("statistics")
                    mailboxes = mailbox_counts(said, f"the answer of {address} to 'statistics'")
                except Exception as exc:  # a node that does not answer is reported as such
                    mailboxes = str(exc)
            rows.append(NodeStatus.of(state, mailboxes))
        return [row.wire() for row in rows]

    @handler
    async def tree(self) -> dict[str, Any]:
        """The cluster's supervision tree: the Controller (with the pid of its
        process: ``cluster up``'s), its nodes (state, restarts, pid, address),
        and in each the node's own tree, asked of its ``_node`` agent (each
        actor with state, restarts and mailbox depth)."""
        nodes = []
        for node in self._config.nodes:
            state = self._states.get(node.name)
            if state is None:  # removed by a reload under way
                continue
            entry = TreeRow(
                node.name,
                "node",
                state.state,
                restarts=state.restarts,
                pid=state.pid,
                address=state.address,
                children=(),
            )
            if state.state == "running" and state.address:
                try:
                    children = await node_children(self.ref, state.address, state.actors)
                    entry = attrs.evolve(entry, children=tuple(children))
                except Exception as exc:  # a node that does not answer is reported as such
                    entry = attrs.evolve(entry, error=str(exc))
            nodes.append(entry)
        root = TreeRow(
            CONTROLLER,
            "supervisor",
            "running",
            cluster=self._config.name,
            restarts=0,
            pid=os.getpid(),
            children=tuple(nodes),
        )
        return root.wire()

    @handler(roles=Role.OPERATOR)
    async def deadletters(
        self,
        op: str,
        letter_id: str | None = None,
        reason: str | None = None,
        limit: int = 100,
        timeout: float = 10.0,
    ) -> Any:
        """``actorctl deadletters``: ``list`` (per running node, its newest
        ``limit`` letters, or one ``reason``'s, and their total), ``show`` or
        ``retry`` one by id (None if no node has it), ``purge`` (how many
        went, per node).

        The running nodes are asked at once, within the caller's ``timeout``
        (less a margin, so that the answer reaches the caller in time). For
        ``list`` and ``purge`` a node that did not answer is in the answer as
        ``{"unanswered": why}``; ``show`` and ``retry`` that find the letter nowhere
        while a node did not answer raise, naming that node."""
        args = letters_request(op, letter_id, reason, limit)
        within = answer_within(timeout)
        answers, _ = await self._ask_nodes(DEAD_LETTERS, op, args, within)
        return letters_answer(op, answers, letter_id, within)

    @handler(roles=Role.OPERATOR)
    async def broadcast(
        self,
        actor: str,
        op: str,
        args: list[Any] | None = None,
        timeout: float = 10.0,
        each: dict[str, list[Any]] | None = None,
    ) -> dict[str, Any]:
        """Ask ``op`` (with ``args``; a node named in ``each``: with its own) of
        the actor named ``actor`` on every running node that hosts one, at once
        (``actorctl control``, the web page): each node's answer, or
        ``{"unanswered": why}`` for one that did not answer within the
        caller's ``timeout`` (less a margin)."""
        if not isinstance(args, list | None):
            raise BadArguments(f"broadcast: args={args!r}: give a list")
        if not isinstance(each, dict | None) or any(
            not isinstance(v, list) for v in (each or {}).values()
        ):
            raise BadArguments(f"broadcast: each={each!r}: give a list of args per node name")
        answers, _ = await self._ask_nodes(
            str(actor),
            str(op),
            tuple(args or ()),
            answer_within(timeout),
            hosting=True,
            each={str(n): tuple(v) for n, v in (each or {}).items()},
        )
        return answers

    async def _ask_nodes(
        self,
        actor: str,
        op: str,
        args: tuple[Any, ...],
        within: float,
        *,
        hosting: bool = False,
        each: dict[str, tuple[Any, ...]] | None = None,
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """Ask ``actor`` on each running node (with ``hosting``, only those whose
        actors include it) at once: the answers by node, and the errors of those
        that did not answer (their answer is then ``{"unanswered": why}``)."""
        targets = {}
        for node in self._config.nodes:
            state = self._states.get(node.name)
            if state is None or state.state != "running" or not state.address:
                continue
            if hosting and actor not in state.actors:
                continue
            targets[node.name] = state.address
        return await ask_each(self.ref, targets, actor, op, args, within, each)

    @handler(roles=(Role.MEMBER, Role.OPERATOR))
    async def lease(
        self, role: str, holder: str, ttl: float, state: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Acquire or renew the lease of ``role`` for ``holder`` (its address)
        for ``ttl`` seconds (``LeaseTable.request``): one holder at a time, a
        fencing number that grows with every new holder."""
        try:
            return self._leases.request(role, holder, ttl, state)
        except ActorctlError as exc:
            raise BadArguments(str(exc)) from None

    @handler
    async def holder(self, role: str) -> dict[str, str | None]:
        """Who holds ``role``'s lease now (the address it gave; None: nobody,
        or the lease ran out), and who held it last (``actorctl schedule
        list`` asks the task layer's beat that holds its ``scheduler`` role)."""
        return {"holder": self._leases.holder(role), "last": self._leases.last_holder(role)}

    @handler(roles=Role.OPERATOR)
    async def stop_node(self, node: str) -> str:
        """Stop one node for good (``actorctl control shutdown FILE NODE``): it
        gets SIGTERM (its handlers their grace) and is not restarted until the
        cluster is."""
        names = [n.name for n in self._config.nodes]
        if node not in names:
            raise BadArguments(
                f"no node {node!r} in cluster {self._config.name!r}: its nodes are "
                f"{', '.join(names)}"
            )
        if self._nodes is None:
            raise ActorctlError(
                f"the controller of {self._config.name!r} does not run its nodes (`actorctl "
                f"cluster controller`): stop node {node!r} where it runs (systemctl stop, "
                "kubectl scale or delete)"
            )
        log("actorctl:controller:stop-node", cluster=self._config.name, node=node)
        await self._nodes.terminate_child(node)
        state = self._states[node]
        state.state, state.address, state.reason = (
            NodeRun.STOPPED,
            None,
            "stopped by control shutdown",
        )
        return f"node {node!r} stopped"

    @handler(roles=Role.OPERATOR)
    async def reload(
        self,
        path: str | None = None,
        dry_run: bool = False,
        drain_timeout: float = DRAIN_TIMEOUT,
        checked: bool = False,
    ) -> dict[str, Any]:
        """Apply the cluster file at ``path`` (by default the one it runs) to
        the running cluster (``_reloader.py``): the plan, and unless
        ``dry_run``, what was applied and any warnings. A wrong file is
        refused, naming what is wrong, and nothing changes. ``checked``: the
        caller (``actorctl cluster reload``) has just checked the file as
        ``cluster up`` does, in a fresh process: it is not checked again."""
        if self._reloader is None:
            raise ActorctlError(
                f"the controller of {self._config.name!r} does not run its nodes (`actorctl "
                "cluster controller`): restart each node with the new file where it runs"
            )
        if not isinstance(drain_timeout, int | float) or not drain_timeout >= 0:
            raise BadArguments(f"reload: drain_timeout={drain_timeout!r}: give seconds >= 0")
        target = Path(path) if path else self._config.path
        try:
            self._config, report = await self._reloader.reload(
                self._config,
                target,
                self._ask,
                dry_run=bool(dry_run),
                drain_timeout=drain_timeout,
                checked=bool(checked),
            )
        except ConfigError as exc:
            log("actorctl:reload:refused", cluster=self._config.name, error=str(exc))
            raise BadArguments(f"reload refused, the cluster runs on unchanged: {exc}") from None
        return report.wire()

    async def _ask(
        self, node: str, address: str, op: str, args: tuple[Any, ...], timeout: float
    ) -> Any:
        del node  # the Controller relays under its own (operator) key, to any node
        return await self.ref(address).with_options(timeout=timeout).ask(op, *args)

    @handler(roles=Role.OPERATOR)
    async def down(self) -> str:
        """Stop the cluster: every node, in reverse order, then the Controller."""
        log("actorctl:controller:down", cluster=self._config.name)
        self._stop.set()
        if self._nodes is None:  # `cluster controller`: something else runs them
            return f"the controller of cluster {self._config.name!r} stopping (its nodes go on)"
        return f"cluster {self._config.name!r} stopping"


async def run_cluster(
    config: ClusterConfig,
    on_change: Callable[[NodeState], None],
    *,
    stop: trio.Event,
    cold: trio.Event | None = None,
    in_process: bool = False,
    metrics: str | None = None,
    web: tuple[str, int] | None = None,
    on_web: Callable[[str], None] | None = None,
    task_status: trio.TaskStatus[dict[str, NodeState]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the cluster until ``stop`` is set (or cancelled): the Controller's own
    node first, then every node under one supervisor (the first node in the
    file, then the others at once); stop in reverse order,
    each node warm (within its ``shutdown_grace``), or cold once ``cold`` is set.

    Reports the node states once every node is ready (and, under systemd, says
    READY=1 on NOTIFY_SOCKET). With ``in_process`` every node runs in this
    process instead of a subprocess of its own (for development). ``metrics``:
    where a node whose [node.metrics] says nothing serves /metrics (port 0: a
    free one each). The web page (``_web.py``) is served at ``[cluster] web``,
    else at ``web`` (None: nowhere); ``on_web`` is told its URL before the
    nodes start.
    """
    foreman = LocalForeman if in_process else Foreman
    cold = cold if cold is not None else trio.Event()

    def make(config: ClusterConfig, node: NodeConfig) -> tuple[NodeRunner, NodeState]:
        state = NodeState(node.name)
        return foreman(config, node, state, on_change, metrics, cold=cold), state

    runners: dict[str, NodeRunner] = {}
    states: dict[str, NodeState] = {}
    for node in config.nodes:
        runners[node.name], states[node.name] = make(config, node)
    supervisor = Supervisor(
        config.name,
        [ChildSpec(name, runner.run) for name, runner in runners.items()],
        strategy=Strategy.ONE_FOR_ONE,
        max_restarts=10,
        within=60.0,
        # The first node alone (by convention the one the others use, such as
        # a services node), then the others at once: a node opens its links
        # to its peers when it first sends, so none waits for another to start.
        start_together=True,
    )
    security = config.security(CONTROLLER)
    reloader = Reloader(states, supervisor, runners, make)
    controller = Controller(config, states, stop, supervisor, reloader)
    host, port = config.controller
    async with (
        open_node(CONTROLLER, [controller], host=host, port=port, security=security) as running,
        trio.open_nursery() as nursery,
    ):
        web = config.web or web
        if web is not None:
            url = await nursery.start(serve_web, config, states, running, web)
            if on_web is not None:
                on_web(url)
        await nursery.start(supervisor.run)
        task_status.started(states)
        _notify_systemd("READY=1")
        await stop.wait()
        nursery.cancel_scope.cancel(reason="cluster down")


def _notify_systemd(message: str) -> None:
    """sd_notify: tell systemd (when it started us with NOTIFY_SOCKET) a state."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]  # an abstract socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(address)
        sock.sendall(message.encode())
