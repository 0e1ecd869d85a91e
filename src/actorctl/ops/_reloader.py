"""Applying ``actorctl cluster reload`` (or SIGHUP to ``cluster up``) in the
Controller, without losing what the cluster has accepted.

1. **Check.** The new file is read and everything it names is imported and
   built, as ``cluster up`` does before it starts anything, in a process of
   its own (``actorctl cluster check``: the Controller's modules are the ones
   it started with; ``actorctl cluster reload`` checks it so before it asks),
   and the ports of nodes to start must be free. A file that fails is
   refused, and the cluster runs on untouched.
2. **Plan** (``_reload.py``): nodes added, removed, restarted, and what
   running nodes follow in place. ``--dry-run`` stops here.
3. **Start the new nodes.** Development secrets are made for them; every
   running node follows the new file (``_node`` ``follow``) routing nothing
   new to the nodes removed (what waits in a router's backlog for them moves
   to the other instances), and reads its keys and certificates again
   (``refresh_security``: rotated files, and the keys of new members). The
   added nodes start, and routers take them in: they take work from the
   nodes that go.
4. **Drain and stop** each removed node: it finishes what its actors took,
   and its backlog sends everything on (``drain``), then it gets SIGTERM.
   Past the drain timeout it stops anyway: what its actors had not finished
   goes back to the senders' backlogs (at least once), and what its own
   backlog still held stays in its store, sent if the node is ever added
   back; the report says which.
5. **Restart** each changed node, one at a time, so that a pool keeps its
   other workers: routed around, drained as in 4 (its backlog is in its
   store, so it need not empty unless the node keeps it in memory), started
   from the new file, and taken back in.
6. Every node follows the new file with no node routed around. A node that
   can follow only by restarting (a pool that has no router there yet) says
   so, and is restarted as in 5.

One reload runs at a time; the report lists the plan, what was applied, and
warnings (a drain that timed out, a node that did not start).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Final, Protocol, final

import attrs
import trio

from .._errors import ActorctlError, ConfigError, WireFormatError
from .._log import log
from ..actors._answers import read_answer
from ..cluster._agent_answers import DrainAnswer, FollowAnswer
from ..cluster._reload import ReloadPlan, Shift, plan_reload
from ..cluster.config._config import ClusterConfig, NodeConfig
from ..cluster.config._load import load_cluster
from ..supervision import ChildSpec, Supervisor
from ._foreman import ensure_dev_secrets
from ._preflight import module_environment, taken_ports

__all__ = ["DRAIN_TIMEOUT", "NodeRunner", "Reloader"]

#: Seconds a node removed or restarted gets to finish what it holds.
DRAIN_TIMEOUT: Final = 30.0
#: Seconds ``actorctl cluster check`` may take to import and build everything.
CHECK_TIMEOUT: Final = 120.0

#: How a reload asks a node: ``ask(node, address, op, args, timeout)``, the
#: node's name (whose identity may ask it: ``host up`` relays under each
#: node's own key), its ``_node`` agent's address, the op and its arguments.
Ask = Callable[[str, str, str, tuple[Any, ...], float], Awaitable[Any]]


@final
@attrs.frozen
class ReloadReport:
    """What a reload did: the ``file``, its ``plan`` (lines) and, unless it
    was a dry run (None), what was ``applied`` and the ``warnings``."""

    file: str
    plan: tuple[str, ...]
    applied: tuple[str, ...] | None = None
    warnings: tuple[str, ...] | None = None

    def wire(self) -> dict[str, Any]:
        """Its form in a reply (``applied`` and ``warnings`` not for a dry run)."""
        wire: dict[str, Any] = {"file": self.file, "plan": list(self.plan)}
        if self.applied is not None:
            wire["applied"] = list(self.applied)
        if self.warnings is not None:
            wire["warnings"] = list(self.warnings)
        return wire

    @classmethod
    def from_wire(cls, value: object, where: str) -> ReloadReport:
        """A reply's body as the record.

        Raises:
            WireFormatError: it is not one (naming ``where`` and what is wrong).
        """
        return read_answer(value, cls, where)


class NodeRunner(Protocol):
    """What runs one node (a Foreman): reads its cluster and node when it starts."""

    config: ClusterConfig
    node: NodeConfig

    async def run(self, *, task_status: trio.TaskStatus[None] = ...) -> None: ...


@final
class Reloader:
    """Applies reloaded cluster files to the nodes ``nodes`` supervises.

    Args:
        states: each node's state, by name (kept up to date by its runner).
        nodes: the supervisor of the nodes.
        runners: each node's runner, by name.
        make: a runner for a node to add, with its state.
        host: the host whose nodes these are (``host up``): a reload adds,
            removes and restarts only the nodes the file gives this host, and
            makes no certificates or keys (they are made once and copied);
            None: every node of the file is one of these (``cluster up``).
        admit: awaited with the new file and the nodes to add before they
            start (``host up``: until the other hosts' nodes know them).
    """

    def __init__(
        self,
        states: dict[str, Any],
        nodes: Supervisor,
        runners: dict[str, NodeRunner],
        make: Callable[[ClusterConfig, NodeConfig], tuple[NodeRunner, Any]],
        *,
        host: str | None = None,
        admit: Callable[[ClusterConfig, Sequence[str]], Awaitable[None]] | None = None,
    ) -> None:
        self._states = states
        self._nodes = nodes
        self._runners = runners
        self._make = make
        self._host = host
        self._admit = admit
        self._lock = trio.Lock()

    async def reload(
        self,
        old: ClusterConfig,
        path: Path,
        ask: Ask,
        *,
        dry_run: bool = False,
        drain_timeout: float = DRAIN_TIMEOUT,
        checked: bool = False,
    ) -> tuple[ClusterConfig, ReloadReport]:
        """Check ``path`` (unless ``checked``: its caller just did), plan, and
        (unless ``dry_run``) apply it: the config the cluster runs now, and
        the report.

        Raises:
            ConfigError: the file is wrong, or changes what a reload cannot.
            ActorctlError: another reload is under way.
        """
        if self._lock.locked():
            raise ActorctlError("another reload is under way: wait for it, then reload again")
        async with self._lock:
            if not checked:
                await check_file(path)
            new = load_cluster(path, old.app)
            hosted = {name: list(state.actors) for name, state in self._states.items()}
            # A node that a reload added but that did not start is not running:
            # the next reload starts it again (as added).
            running = attrs.evolve(old, nodes=tuple(n for n in old.nodes if n.name in hosted))
            plan = plan_reload(running, self._mine(new), hosted)
            _free_ports(self._mine(new), plan)
            report = ReloadReport(str(new.path), tuple(plan.lines()))
            log("actorctl:reload:plan", cluster=new.name, plan=report.plan, dry_run=dry_run)
            if dry_run:
                return old, report
            applying = _Applying(self, new, ask, drain_timeout)
            await applying.run(plan)
            report = attrs.evolve(
                report, applied=tuple(applying.applied), warnings=tuple(applying.warnings)
            )
            log("actorctl:reload:done", cluster=new.name, **report.wire())
            return new, report

    def _mine(self, config: ClusterConfig) -> ClusterConfig:
        """The nodes of ``config`` these are to be (on a host, the host's own)."""
        if self._host is None:
            return config
        return attrs.evolve(config, nodes=tuple(n for n in config.nodes if n.runs_on == self._host))


@final
class _Applying:
    """One reload being applied (``Reloader.reload``), with what it did."""

    def __init__(self, owner: Reloader, new: ClusterConfig, ask: Ask, drain: float) -> None:
        self.owner = owner
        self.new = new
        self.ask = ask
        self.drain_timeout = drain
        self.applied: list[str] = []
        self.warnings: list[str] = []

    async def run(self, plan: ReloadPlan) -> None:
        owner, new = self.owner, self.new
        restarting = frozenset(plan.restarted)
        if owner._host is None:  # on a host they are made once and copied
            self.applied += [f"made {line}" for line in ensure_dev_secrets(new)]
        # Nothing new to the nodes that go; new members' keys trusted.
        await self.follow(Shift(frozenset(plan.added + plan.removed), restarting), plan.removed)
        await self.each_node("refresh_security", (), skip=plan.removed)
        for runner in owner._runners.values():  # what each starts from from now on
            if runner.node.name not in plan.removed:
                runner.config, runner.node = new, new.node(runner.node.name)
        if plan.added and owner._admit is not None:
            await owner._admit(new, plan.added)
        for name in plan.added:  # started first: they take work from those that go
            runner, state = owner._make(new, new.node(name))
            owner._runners[name], owner._states[name] = runner, state
            try:
                await owner._nodes.start_child(ChildSpec(name, runner.run))
            except Exception as exc:  # reported: the rest of the reload goes on
                self.warnings.append(
                    f"node {name} did not start: {_why(exc)} (the next reload tries again)"
                )
                owner._runners.pop(name, None)
                owner._states.pop(name, None)
                continue
            self.applied.append(f"node {name} started")
        if plan.added:
            await self.follow(Shift(frozenset(plan.removed), restarting), plan.removed)
        for name in plan.removed:
            await self.drain(name, backlog=True)
            await owner._nodes.terminate_child(name)
            await owner._nodes.delete_child(name)
            owner._states.pop(name, None)
            owner._runners.pop(name, None)
            self.applied.append(f"node {name} drained and stopped")
        await self.restart_each(list(plan.restarted))
        restart = await self.follow(Shift())
        if restart:
            await self.restart_each(restart)
            await self.follow(Shift())

    async def restart_each(self, names: list[str]) -> None:
        """Restart ``names`` one at a time, each routed around while it drains
        (those after it routed to as they are until their turn)."""
        for index, name in enumerate(names):
            await self.follow(Shift(frozenset({name}), frozenset(names[index + 1 :])))
            await self.restart(name)

    async def follow(self, shift: Shift, skip: tuple[str, ...] = ()) -> list[str]:
        """Every running node follows the new file, as ``shift`` says; the
        nodes that say they must restart to follow it."""
        args = (str(self.new.path), sorted(shift.away), sorted(shift.pending))
        answers = await self.each_node("follow", args, skip=skip)
        restart = []
        for name, said in answers.items():
            try:
                answer = FollowAnswer.from_wire(said, f"node {name}'s answer to 'follow'")
            except WireFormatError as exc:  # another release's answer: said, and not followed
                self.warnings.append(str(exc))
                continue
            self.applied += [f"{name}: {line}" for line in answer.changed]
            if answer.restart:
                self.applied.append(f"{name}: restarts to follow ({'; '.join(answer.restart)})")
                restart.append(name)
        return restart

    async def each_node(
        self, op: str, args: tuple[Any, ...], skip: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        """Ask ``op`` of every running node's ``_node`` at once; a node that
        fails to answer is a warning."""
        answers: dict[str, Any] = {}

        async def one(name: str, address: str) -> None:
            try:
                answers[name] = await self.ask(name, f"{address}/_node", op, args, 30.0)
            except Exception as exc:  # one node's failure is reported, not fatal
                self.warnings.append(f"node {name} did not {op.replace('_', ' ')}: {_why(exc)}")

        async with trio.open_nursery() as nursery:
            for name, state in list(self.owner._states.items()):
                if name not in skip and state.state == "running" and state.address:
                    nursery.start_soon(one, name, state.address)
        return answers

    async def drain(self, name: str, *, backlog: bool) -> None:
        state = self.owner._states.get(name)
        if state is None or state.state != "running" or not state.address:
            return
        timeout = self.drain_timeout
        try:
            said = await self.ask(
                name, f"{state.address}/_node", "drain", (timeout, backlog), timeout + 10.0
            )
            answer = DrainAnswer.from_wire(said, f"node {name}'s answer to 'drain'")
        except Exception as exc:  # it stops anyway: what it held goes back or stays stored
            self.warnings.append(f"node {name} was not drained: {_why(exc)}")
            return
        if not answer.drained:
            busy = "; ".join(answer.busy)
            self.warnings.append(
                f"node {name} still held work after {timeout:g} s ({busy}): what its actors "
                "had taken goes back to the senders' backlogs; what its own backlog held "
                f"stays in data/{name}/store.sqlite (sent if the node is added back)"
            )

    async def restart(self, name: str) -> None:
        """Drain ``name``, then start it again from the new file."""
        owner = self.owner
        runner = owner._runners[name]
        await self.drain(name, backlog=not runner.node.durable)
        await owner._nodes.terminate_child(name)
        try:
            await owner._nodes.restart_child(name)
        except Exception as exc:  # it stays down, said: a reload that fixes it starts it
            self.warnings.append(f"node {name} did not start again: {_why(exc)}")
            return
        self.applied.append(f"node {name} drained and restarted")


async def check_file(path: Path) -> None:
    """``actorctl cluster check PATH`` in a process of its own (fresh imports).

    Raises:
        ConfigError: what it said was wrong.
    """
    # Where its nodes look for modules (its file is not read yet: it may be wrong).
    env = module_environment(list(dict.fromkeys([str(path.parent), os.getcwd()])))
    with trio.move_on_after(CHECK_TIMEOUT) as scope:
        done = await trio.run_process(
            [sys.executable, "-m", "actorctl", "cluster", "check", str(path)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    if scope.cancelled_caught:
        raise ConfigError(f"{path}: checking it took over {CHECK_TIMEOUT:g} s: nothing applied")
    if done.returncode != 0:
        said = (done.stderr or done.stdout).decode("utf-8", "replace").strip()
        raise ConfigError(said.removeprefix("error: ") or f"{path}: refused by cluster check")


def _free_ports(new: ClusterConfig, plan: ReloadPlan) -> None:
    """The nodes to start, and those restarting on another port, need theirs free.

    Raises:
        ConfigError: naming the node and port.
    """
    moving = {name for name, why in plan.restarted.items() if any("listen" in w for w in why)}
    for who, host, port in taken_ports(new):
        node = who.removeprefix("node ")
        if node in plan.added or node in moving:
            raise ConfigError(
                f"{new.path}: port {port} of {who} ({host}:{port}) is taken: stop what "
                "holds it, or give the node another port; nothing was applied"
            )


def _why(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"
