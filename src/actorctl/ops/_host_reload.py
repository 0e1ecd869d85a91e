"""A ``host up``'s part of ``actorctl cluster reload`` across hosts.

Each ``host up`` watches the cluster's reload request key in etcd
(``_reload_request.py``). For each request written after it started it:

1. **Verifies** it before anything else: signed by a key its keyring trusts
   whose role is ``operator``, for this cluster, within the time window, with
   an id it has not seen. The ids it has acted on are kept in a file beside
   the host's copy of the cluster file (``.NAME.reload-seen``), written
   before it acts, so a request replayed after ``host up`` restarts is
   refused too; an id is forgotten once its request is past the window, which
   refuses it from then on. A request that fails is refused, logged
   (``actorctl:reload:refused``, with the reason) and answered ``refused``;
   nothing is written to disk. A request verified is said to be received, at
   ``reload/received/ID/HOST``, before the file is checked (seconds).
2. **Checks** the new file as ``cluster up`` does, in a process of its own
   (``actorctl cluster check``), written beside this host's copy of the file
   (so that its relative paths, certificates and keys resolve the same), and
   plans it for this host's nodes only (``Reloader(host=...)``): nodes the
   file gives other hosts are theirs to start, stop or restart. A file that
   fails either is refused, naming what is wrong.
3. **Applies** it (unless the request is a dry run): the new content
   replaces this host's copy of the file (so that a ``host up`` started again
   runs it), and the Reloader applies it as ``cluster up``'s does, asking
   each of the host's nodes to follow, read its keys again and drain **under
   that node's own key** (the one the host holds to run it, from its bundle).
   A node does not check its own key against itself, and takes those ops
   from no other member's key: the host needs no operator key, and its keys
   reach only its own nodes (docs/security.md).
4. **Answers** at ``reload/outcomes/ID/HOST``: changed, unchanged or
   refused, with the plan, what was applied and any warnings.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Final, final

import trio

from .._errors import ActorctlError, ConfigError
from .._log import log
from ..cluster._node import open_node
from ..cluster.config._config import ClusterConfig
from ..cluster.config._load import load_cluster
from ..etcd._etcd import EtcdClient
from ..etcd._etcd_wire import EtcdCompacted, EtcdError
from ._reload_request import (
    REQUEST_WINDOW,
    BadRequest,
    HostOutcome,
    Outcome,
    ReloadRequest,
    outcome_key,
    receipt_key,
    refusal,
    request_key,
)
from ._reloader import Ask, Reloader, ReloadReport, check_file

__all__ = ["HostReloads", "SeenRequests"]

#: Seconds before a broken watch of the request key is set up again (doubling).
_WATCH_RETRY: Final = (0.1, 5.0)
#: How many request ids a host remembers (beyond them, the time window refuses).
_SEEN: Final = 1024


@final
class SeenRequests:
    """The ids of the reload requests a host acted on, with when each was
    asked, kept in the file at ``path`` so that they outlive the process.

    Read at start (ids whose request is past ``REQUEST_WINDOW`` dropped: the
    window refuses those), and written whole, then renamed into place, before
    the host acts on a request: a ``host up`` killed while it applies one
    still refuses its replay after a restart.
    """

    def __init__(self, path: Path, now: float) -> None:
        self._path = path
        self._asked: dict[str, float] = {}  # oldest first
        try:
            lines = path.read_text().splitlines()
        except FileNotFoundError:
            lines = []
        for line in lines:
            request_id, _, asked = line.partition(" ")
            try:
                when = float(asked)
            except ValueError:
                continue  # a torn or foreign line: its request, if any, is refused by the window
            if now - when <= REQUEST_WINDOW:
                self._asked[request_id] = when

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._asked

    def __iter__(self) -> Iterator[str]:
        return iter(self._asked)

    def __len__(self) -> int:
        return len(self._asked)

    def remember(self, request_id: str, asked: float) -> None:
        """Add ``request_id`` and write the file.

        Raises:
            OSError: the file could not be written (the id is not remembered).
        """
        kept = dict(self._asked)
        kept[request_id] = asked
        while len(kept) > _SEEN:
            del kept[next(iter(kept))]
        staged = self._path.with_name(f"{self._path.name}.new")
        with staged.open("w") as file:
            file.writelines(f"{key} {when!r}\n" for key, when in kept.items())
            file.flush()
            os.fsync(file.fileno())
        os.replace(staged, self._path)
        self._asked = kept


@final
class HostReloads:
    """Applies the reload requests written in etcd to one host's nodes.

    Args:
        config: the cluster file the host runs now (replaced at each reload).
        host: this host's name.
        reloader: the Reloader of this host's nodes (``Reloader(host=...)``).
        client: the etcd client.
    """

    def __init__(
        self, config: ClusterConfig, host: str, reloader: Reloader, client: EtcdClient
    ) -> None:
        self.config = config
        self._host = host
        self._reloader = reloader
        self._client = client
        path = config.path
        self._seen = SeenRequests(path.with_name(f".{path.stem}.reload-seen"), time.time())

    async def watch(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Handle each request written after this started, one at a time, until
        cancelled. Reports started once it knows where to watch from (or etcd
        did not answer: it keeps trying). Raises nothing but cancellation."""
        key = request_key(self.config.name)
        since: int | None = None
        first, longest = _WATCH_RETRY
        delay = first
        try:
            since = (await self._client.get_prefix(key)).revision
        except EtcdError as exc:
            log("actorctl:host:reload-unwatched", host=self._host, error=str(exc))
        task_status.started()
        while True:
            try:
                if since is None:
                    since = (await self._client.get_prefix(key)).revision
                async with self._client.watch(key, start_revision=since + 1) as watch:
                    try:
                        async for event in watch:
                            if event.kind == "put":
                                await self.handle(event.value)
                    finally:
                        since = max(since, watch.next_revision - 1)
            except EtcdCompacted:
                since = None  # what was missed is older than a request may be
            except Exception as exc:  # any failure: said once a break, and watched again
                if delay == first:
                    log(
                        "actorctl:host:reload-unwatched",
                        host=self._host,
                        error=f"{type(exc).__name__}: {exc}",
                    )
                await trio.sleep(delay)
                delay = min(delay * 2, longest)
            else:
                delay = first

    async def handle(self, raw: bytes) -> HostOutcome | None:
        """Verify, check and apply one request; write and return the outcome
        (None: not a request, so there is no id to answer under)."""
        try:
            request = ReloadRequest.from_json(raw)
        except BadRequest as exc:
            log("actorctl:reload:refused", host=self._host, request=None, reason=str(exc))
            return None
        why = self._refusal(request)
        if why is None:
            try:
                self._seen.remember(request.id, request.asked)
            except OSError as exc:
                why = (
                    f"this host cannot record the request's id ({exc}), so it could not "
                    "refuse a replay: check that the cluster file's folder is writable"
                )
        if why is None:
            await self._receipt(request)
            try:
                outcome = await self._apply(request)
            except (ConfigError, ActorctlError) as exc:
                why = str(exc).replace(str(self._candidate(request)), "the file asked")
        if why is not None:
            log(
                "actorctl:reload:refused",
                host=self._host,
                request=request.id,
                key_id=request.key_id,
                reason=why,
            )
            outcome = HostOutcome(self._host, Outcome.REFUSED, reason=why)
        else:
            log("actorctl:reload:answered", host=self._host, request=request.id, **_fields(outcome))
        try:
            await self._client.put(
                outcome_key(self.config.name, request.id, self._host), outcome.to_json()
            )
        except EtcdError as exc:  # the CLI reports this host as not answering
            log("actorctl:reload:unanswered", host=self._host, request=request.id, error=str(exc))
        return outcome

    async def _receipt(self, request: ReloadRequest) -> None:
        """Say that this host received ``request``, verified, before it checks the
        file: the CLI waits on for the outcome of a host that did (``cluster
        reload --receipt-timeout``)."""
        key = receipt_key(self.config.name, request.id, self._host)
        try:
            await self._client.put(key, json.dumps({"host": self._host}))
        except EtcdError as exc:  # the outcome may still reach the CLI in time
            log("actorctl:reload:unreceipted", host=self._host, request=request.id, error=str(exc))

    def _refusal(self, request: ReloadRequest) -> str | None:
        insecure = "the cluster is insecure: a reload across hosts needs signed requests"
        if self.config.insecure:
            return insecure
        mine = [node.name for node in self.config.nodes if node.runs_on == self._host]
        if not mine:
            return f"host {self._host!r} runs no node of its file: it has no keyring to verify with"
        try:  # read now, as its first node's (its bundle): a key added or revoked since counts
            keyring = self.config.security(mine[0]).keyring
        except ConfigError as exc:
            return f"this host cannot verify a reload: {exc}"
        if keyring is None:
            return insecure
        return refusal(request, self.config.name, keyring, self._seen, time.time())

    def _candidate(self, request: ReloadRequest) -> Path:
        """Where the requested file is written to be checked: beside this host's copy."""
        path = self.config.path
        return path.with_name(f".{path.stem}.reload-{request.id}{path.suffix}")

    async def _apply(self, request: ReloadRequest) -> HostOutcome:
        """Check the requested file, plan it for this host, and (unless a dry
        run) apply it.

        Raises:
            ConfigError: the file is wrong, or changes what a reload cannot.
            ActorctlError: another reload is under way.
        """
        candidate = self._candidate(request)
        candidate.write_text(request.content)
        try:
            await check_file(candidate)
            old = self.config
            new = load_cluster(candidate, old.app)
            async with _own_keys(old, new, self._host) as ask:
                drain = request.drain_timeout
                # Planned first, from the file beside ours: a plan refused
                # leaves our copy of the file as it was.
                _, report = await self._reloader.reload(
                    old, candidate, ask, dry_run=True, drain_timeout=drain, checked=True
                )
                if request.dry_run:
                    return _outcome(self._host, report)
                _install(old.path, request.content)
                self.config, report = await self._reloader.reload(
                    old, old.path, ask, drain_timeout=drain, checked=True
                )
        finally:
            candidate.unlink(missing_ok=True)
        return _outcome(self._host, report)


@contextlib.asynccontextmanager
async def _own_keys(old: ClusterConfig, new: ClusterConfig, host: str) -> AsyncIterator[Ask]:
    """How this host asks its nodes during a reload: each node of ``host`` (in
    ``old`` or ``new``) through a relay that signs with that node's own key
    and certificate (``NODE-reload``: no listener), never another's.

    Raises:
        ConfigError: a node's certificate or key is not on this host (its
            bundle: a node a reload adds needs its own before the reload).
    """
    mine: dict[str, ClusterConfig] = {}
    for config in (old, new):  # the new file's paths win for a node in both
        mine.update((node.name, config) for node in config.nodes if node.runs_on == host)
    async with contextlib.AsyncExitStack() as stack:
        relays = {
            name: await stack.enter_async_context(
                open_node(f"{name}-reload", host=None, security=config.security(name))
            )
            for name, config in mine.items()
        }

        async def ask(
            node: str, address: str, op: str, args: tuple[Any, ...], timeout: float
        ) -> Any:
            relay = relays.get(node)
            if relay is None:  # the Reloader of a host asks only its own nodes
                raise ActorctlError(f"node {node!r} is not host {host!r}'s: it is not asked here")
            return await relay.ref(address).with_options(timeout=timeout).ask(op, *args)

        yield ask


def _install(path: Path, content: str) -> None:
    """Replace the file at ``path`` with ``content`` at once (unless it holds it)."""
    if path.read_text() == content:
        return
    staged = path.with_name(f".{path.name}.new")
    staged.write_text(content)
    os.replace(staged, path)


def _outcome(host: str, report: ReloadReport) -> HostOutcome:
    plan = tuple(line for line in report.plan if line != "no change")
    applied = report.applied or ()
    changed = plan or any(": " in line for line in applied)
    return HostOutcome(
        host,
        Outcome.CHANGED if changed else Outcome.UNCHANGED,
        plan=plan,
        applied=applied,
        warnings=report.warnings or (),
    )


def _fields(outcome: HostOutcome) -> dict[str, Any]:
    return {
        "outcome": outcome.outcome.value,
        "plan": list(outcome.plan),
        "applied": list(outcome.applied),
        "warnings": list(outcome.warnings),
    }
