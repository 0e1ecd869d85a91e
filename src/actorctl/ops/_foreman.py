"""The Foreman: a whole node as a supervised child, in an OS subprocess.

It starts ``actorctl node run`` for one node of a cluster.toml, waits until the
node reports ready on its log, tells the supervisor it has started, and then
waits for the process: a node that exits (or is killed) raises into the
supervisor, which restarts it by its policy.

Stopping the Foreman stops the node warm: SIGTERM (the node takes nothing new,
gives back what it holds and has not begun, and lets its running handlers
finish within its ``shutdown_grace``), then the grace and STOP_MARGIN more
before a SIGKILL, which it logs in its own words (``actorctl:foreman:killed``);
however the node ends, its exit code is logged (``actorctl:foreman:exited``).
The ``cold`` event (a second Ctrl-C to ``cluster up`` or ``host up``) sends
SIGQUIT: the node's cold stop (what runs is cancelled now, and runs again
elsewhere), with STOP_MARGIN before the SIGKILL.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import json
import os
import signal
import subprocess
import sys
import traceback
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Final, final

import attrs
import trio

from .._errors import ActorctlError, ConfigError
from .._log import log
from ..cluster._node import Node
from ..cluster.config._config import CONTROLLER_KEY, ClusterConfig, NodeConfig
from ..mailbox import ROLES_FILE, IdentityKey, Role
from ..mailbox._roles import read_roles, write_role
from ._build import build_node, node_actors
from ._certs import init_certs
from ._preflight import module_environment, module_paths

__all__ = ["Foreman", "LocalForeman", "NodeDied", "NodeRun", "NodeState", "ensure_dev_secrets"]

READY_TIMEOUT: Final = 30.0
#: Seconds a stopping node gets beyond its shutdown_grace before SIGKILL: to
#: leave etcd first (at most 5 s, ``host up``), then to cancel what still runs,
#: close its connections and commit its store.
STOP_MARGIN: Final = 10.0
CLI_NAME: Final = "cli"


class NodeDied(ActorctlError):
    """A node's process ended (or never became ready)."""


class NodeRun(enum.StrEnum):
    """Where a node the cluster runs is; its value is the word ``cluster up``,
    ``cluster status`` and the web page show."""

    STARTING = "starting"
    RUNNING = "running"
    DOWN = "down"  #: not reachable (a node the Controller attends but does not start)
    DEAD = "dead"  #: its process ended (restarted, unless it gave up)
    STOPPED = "stopped"  #: stopped for good (control shutdown, or its host's stop)


@attrs.define
class NodeState:
    """What the cluster knows of one node, for status tables."""

    name: str
    state: NodeRun = NodeRun.STARTING
    pid: int | None = None
    address: str | None = None
    actors: list[str] = attrs.field(factory=list)
    restarts: int = 0
    reason: str | None = None
    #: Where the node serves /metrics (a URL), once it runs; None: it does not.
    metrics: str | None = None


class _Runner:
    """What both foremen share: the node, its state, and restart counting."""

    def __init__(
        self,
        config: ClusterConfig,
        node: NodeConfig,
        state: NodeState,
        on_change: Callable[[NodeState], None] = lambda state: None,
        metrics: str | None = None,
        *,
        etcd: Sequence[str] = (),
        cold: trio.Event | None = None,
    ) -> None:
        self.config = config
        self.node = node
        self.state = state
        self.etcd = tuple(etcd)
        #: Set to stop the node cold (it is stopping warm, or about to).
        self.cold = cold if cold is not None else trio.Event()
        self._metrics = metrics
        self._on_change = on_change
        self._starts = 0

    @property
    def metrics(self) -> str | None:
        """Where the node serves /metrics: its [node.metrics], else the default
        (read at each start: a reload may change the node)."""
        return self.node.metrics or self._metrics

    def _begin(self) -> None:
        if self._starts:
            self.state.restarts += 1
        self._starts += 1
        self._set(state=NodeRun.STARTING, pid=None, address=None)

    def _set(self, **changes: object) -> None:
        for key, value in changes.items():
            setattr(self.state, key, value)
        self._on_change(self.state)


@final
class Foreman(_Runner):
    """Runs one node of a cluster as a supervised subprocess.

    Args:
        config: the cluster.
        node: which node.
        state: updated as the node starts, runs and dies.
        on_change: called (in this task) whenever ``state`` changes.
        metrics: where the node serves /metrics when its table does not say
            (``cluster up``: 127.0.0.1:0); None: nowhere.
        etcd: etcd's endpoints (``host up``): the node registers there, and is
            ready once it has (none: a cluster on one host).
        cold: set (a second Ctrl-C) to cut a stop short: the node stops cold.
    """

    def command(self) -> list[str]:
        node, config = self.node, self.config
        command = [sys.executable, "-m", "actorctl", "node", "run",
                   *([node.actors] if node.actors else []),
                   "--listen", node.listen, "--name", node.name,
                   "--instances", str(node.instances),
                   "--grace", f"{node.shutdown_grace:g}"]  # fmt: skip
        for name, addresses in config.routes(node):
            command += ["--route", f"{name}={','.join(addresses)}"]
        # The node's actors factory (if its actors name one) reads its cluster.
        command += ["--cluster", str(config.path)]
        if self.metrics is not None:
            command += ["--metrics", self.metrics]
        for endpoint in self.etcd:
            command += ["--etcd", endpoint]
        if config.insecure:
            return [*command, "--insecure"]
        return [*command, "--certs", str(config.certs), "--keys", str(config.keys)]

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the node, report it started once it is ready, and wait for it.

        Raises:
            NodeDied: when the process ends, or is not ready in time.
        """
        state = self.state
        self._begin()
        self._error: str | None = None
        log_dir = self.config.root / "logs"
        log_dir.mkdir(exist_ok=True)
        log_path = log_dir / f"{self.node.name}.log"
        async with trio.open_nursery() as nursery:
            process: trio.Process = await nursery.start(
                functools.partial(
                    trio.run_process,
                    self.command(),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    check=False,
                    cwd=self.config.root,
                    env=self._environment(),
                    # Its own process group: what it starts (boxed processes)
                    # is ended with it if it dies (see _end_group).
                    start_new_session=True,
                    deliver_cancel=self._stop,
                )
            )
            ready = trio.Event()
            # Its log is copied while it stops too (shielded): a pipe nobody
            # reads would hold up its last lines, and then the node itself.
            pump = trio.CancelScope(shield=True)
            nursery.start_soon(self._pump, process, ready, log_path, pump)
            nursery.start_soon(_reap, self.node.name, process, pump)
            with trio.move_on_after(READY_TIMEOUT):
                await ready.wait()
            if state.address is None:
                with trio.move_on_after(5.0):  # its output ended: it is ending too
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    why = f"did not report ready within {READY_TIMEOUT:g} s"
                else:
                    why = f"exited with code {process.returncode} before it was ready"
                if self._error is not None:  # the node's own words
                    own = self._error.removeprefix(f"node {self.node.name} could not start: ")
                    why = f"could not start: {own.removeprefix(f'node {self.node.name}: ')}"
                self._set(state=NodeRun.DEAD, reason=why)
                raise NodeDied(f"node {self.node.name} {why} (its log: {log_path})")
            self._set(state=NodeRun.RUNNING, pid=process.pid)
            task_status.started()
            code = await process.wait()
        reason = f"node {self.node.name} (pid {process.pid}) exited with code {code}"
        self._set(state=NodeRun.DEAD, reason=reason)
        raise NodeDied(reason)

    def _environment(self) -> dict[str, str]:
        """Actor modules are found beside the cluster file first, then where
        ``cluster up`` runs."""
        return module_environment(module_paths(self.config))

    async def _stop(self, process: trio.Process) -> None:
        """Stop the node (``deliver_cancel``; trio cancels this once it exited):
        SIGTERM, its warm stop; SIGQUIT once ``cold`` is set, its cold stop
        (not SIGTERM again: two of them close together may reach it as one);
        SIGKILL past its grace and STOP_MARGIN (or STOP_MARGIN after the cold
        stop), said in one line of the log."""
        name, grace = self.node.name, self.node.shutdown_grace
        self._set(state="stopping")
        _signal(process, signal.SIGTERM)
        why = f"it did not stop within its shutdown_grace ({grace:g} s) and {STOP_MARGIN:g} s"
        with trio.move_on_after(grace + STOP_MARGIN):
            await self.cold.wait()
            _signal(process, signal.SIGQUIT)
            why = f"its cold stop did not end within {STOP_MARGIN:g} s"
            with trio.move_on_after(STOP_MARGIN):
                await trio.sleep_forever()  # until it exits (this is cancelled then)
        # Still here: it has not exited (trio cancels this once it has).
        log("actorctl:foreman:killed", node=name, pid=process.pid, why=why)
        _signal(process, signal.SIGKILL)

    async def _pump(
        self, process: trio.Process, ready: trio.Event, log_path: Path, scope: trio.CancelScope
    ) -> None:
        """Copy the node's log to its file; notice the line that says it is ready."""
        with scope:
            await self._copy(process, ready, log_path)
        ready.set()  # it ended: whoever waits for it must look at the state

    async def _copy(self, process: trio.Process, ready: trio.Event, log_path: Path) -> None:
        assert process.stdout is not None
        pending = b""
        with log_path.open("ab") as out:
            while chunk := await process.stdout.receive_some(65536):
                out.write(chunk)
                out.flush()
                if ready.is_set():
                    continue
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.startswith(b"error: "):  # how `node run` says why it stops
                        self._error = line[7:].decode("utf-8", "replace").strip()
                    if b'"actorctl:node:ready"' in line:
                        message = json.loads(line)
                        address = str(message["address"])
                        self.state.actors = list(message.get("actors", []))
                        self.state.metrics = message.get("metrics")
                        if not self.etcd:
                            self.state.address = address
                            ready.set()
                    elif self.etcd and b'"actorctl:membership:member"' in line:
                        # With etcd, ready once registered: in every directory.
                        self.state.address = str(json.loads(line)["address"])
                        ready.set()


def ensure_dev_secrets(config: ClusterConfig) -> list[str]:
    """In development mode, make the certificates and keys that are missing (for
    every node, and for the ``cli``); say what was made. Outside it, check that
    they are there.

    Raises:
        ConfigError: naming what is missing, outside development mode.
    """
    if config.insecure:
        return []
    names = [node.name for node in config.nodes] + [CLI_NAME, CONTROLLER_KEY]
    missing_certs = [n for n in names if not (config.certs / f"{n}.pem").is_file()]
    missing_keys = [n for n in names if not (config.keys / f"{n}.key").is_file()]
    if not config.dev:
        if missing_certs or missing_keys:
            raise ConfigError(
                f"{config.path}: missing certificates for {missing_certs} or keys for "
                f"{missing_keys} in {config.certs} / {config.keys} (set dev = true to make "
                "development ones)"
            )
        return []
    made = []
    if missing_certs:
        init_certs(config.certs, missing_certs)
        made.append(f"certificates for {', '.join(missing_certs)} in {config.certs}")
    for name in missing_keys:
        IdentityKey.generate(name).save(config.keys, name)
    if missing_keys:
        made.append(f"keys for {', '.join(missing_keys)} in {config.keys}")
    granted = dev_roles(config)
    if granted:
        made.append(f"roles {', '.join(granted)} in {config.keys / ROLES_FILE}")
    return made


def dev_roles(config: ClusterConfig) -> list[str]:
    """Development mode's roles, for the keys that have none yet: the CLI's key
    (``cli``: the operator at the keyboard) and the Controller's are operators,
    the nodes' members; any other key stays a client. A role given before
    (``actorctl keys add --role``) is kept. What was written, as ``NAME=ROLE``."""
    given = read_roles(config.keys)
    wanted = [(node.name, Role.MEMBER) for node in config.nodes]
    wanted += [(CLI_NAME, Role.OPERATOR), (CONTROLLER_KEY, Role.OPERATOR)]
    written = []
    for name, role in wanted:
        if name not in given and write_role(config.keys, name, role):
            written.append(f"{name}={role.value}")
    return written


@final
class LocalForeman(_Runner):
    """Runs one node of a cluster inside this process (``cluster up --in-process``,
    for development): the same node, actors, routers and security, one trio run.

    Args: as for :class:`Foreman`.
    """

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        node, config = self.node, self.config
        self._begin()
        hosted = node_actors(node, config, routes=config.routes(node))
        started = False
        try:
            built = build_node(
                node, config, hosted, security=config.security(node.name), metrics=self.metrics
            )
            async with _serving(built, node.shutdown_grace, self.cold) as n:
                self._set(
                    state=NodeRun.RUNNING,
                    pid=os.getpid(),
                    address=n.url,
                    actors=sorted(n.cells),
                    metrics=n.metrics_url,
                )
                started = True
                task_status.started()
                await trio.sleep_forever()
        except* Exception as group:
            if started:
                raise
            # As a node process says it (node run): one line, the rest in the log.
            first: BaseException = group
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            why = f"could not start: {type(first).__name__}: {first}"
            trace = "".join(traceback.format_exception(group))
            log("actorctl:node:start-failed", node=node.name, error=why, traceback=trace)
            self._set(state=NodeRun.DEAD, reason=why)
            where = config.root / "logs" / "cluster.log"
            raise NodeDied(f"node {node.name} {why} (its log: {where})") from None


@contextlib.asynccontextmanager
async def _serving(node: Node, grace: float, cold: trio.Event) -> AsyncIterator[Node]:
    """Run ``node`` for the block, then stop it warm, as a node process stops
    on SIGTERM: within ``grace`` seconds, or cold once ``cold`` is set. A
    cancellation of the block (its supervisor stops it) does not reach the
    node itself: it stops it the same way."""
    async with trio.open_nursery() as nursery:
        await nursery.start(_shielded, node, cold)
        try:
            yield node
        finally:
            node.stop(grace)


async def _shielded(
    node: Node, cold: trio.Event, *, task_status: trio.TaskStatus[Node] = trio.TASK_STATUS_IGNORED
) -> None:
    """``node.serve``, shielded from its owner's cancellation (its owner
    stops it with ``node.stop``); ``cold`` cuts its stop short."""

    async def hurry() -> None:
        await cold.wait()
        node.stop(0)

    with trio.CancelScope(shield=True):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hurry)
            await node.serve(task_status=task_status)
            nursery.cancel_scope.cancel(reason="node stopped")


async def _reap(name: str, process: trio.Process, pump: trio.CancelScope) -> None:
    """Once the node's process has ended (however: this waits shielded), say
    how (``actorctl:foreman:exited``: its exit code, negative for the signal
    that ended it), end what is left of its process group, and give the copy
    of its log one second to reach the end (a process left holding the pipe
    must not hold up the Foreman)."""
    with trio.CancelScope(shield=True):
        code = await process.wait()
    log("actorctl:foreman:exited", node=name, pid=process.pid, code=code)
    _end_group(process.pid)
    pump.deadline = min(pump.deadline, trio.current_time() + 1.0)


def _signal(process: trio.Process, signum: signal.Signals) -> None:
    """Send ``signum`` to the node's process, if it still runs."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        process.send_signal(signum)


def _end_group(pid: int) -> None:
    """A node that died (kill -9, say) could not stop the boxed processes it
    started, and they would hold its log pipe open: end its process group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):  # nothing left in it
        os.killpg(pid, signal.SIGKILL)
