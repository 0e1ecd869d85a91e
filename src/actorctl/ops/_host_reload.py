"""A ``host up``'s part of ``actorctl cluster reload`` across hosts.

Each ``host up`` watches the cluster's reload request key in etcd
(``_reload_request.py``). For each request written after it started it:

1. **Verifies** it before anything else: signed by a key its keyring trusts
   whose role is ``operator``, for this cluster, within the time window, with
   an id it has not seen. A request that fails is refused, logged
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
   runs it), and the Reloader applies it as ``cluster up``'s does, asking the
   host's nodes as the ``controller`` identity (the operator role, as the
   Controller relays an operator's commands under its own key).
4. **Answers** at ``reload/outcomes/ID/HOST``: changed, unchanged or
   refused, with the plan, what was applied and any warnings.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Final, final

import trio

from .._errors import ActorctlError, ConfigError
from .._log import log
from ..cluster._node import open_node
from ..cluster.config._config import CONTROLLER_KEY, ClusterConfig
from ..etcd._etcd import EtcdClient
from ..etcd._etcd_wire import EtcdCompacted, EtcdError
from ._reload_request import (
    BadRequest,
    HostOutcome,
    Outcome,
    ReloadRequest,
    outcome_key,
    receipt_key,
    refusal,
    request_key,
)
from ._reloader import Reloader, ReloadReport, check_file

__all__ = ["HostReloads"]

#: Seconds before a broken watch of the request key is set up again (doubling).
_WATCH_RETRY: Final = (0.1, 5.0)
#: How many request ids a host remembers (beyond them, the time window refuses).
_SEEN: Final = 1024


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
        self._seen: dict[str, None] = {}  # request ids, oldest first

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
            self._remember(request.id)
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
        try:  # read now: a key added or revoked since counts
            keyring = self.config.security(CONTROLLER_KEY).keyring
        except ConfigError as exc:
            return f"this host cannot verify or relay a reload: {exc}"
        if keyring is None:
            return "the cluster is insecure: a reload across hosts needs signed requests"
        return refusal(request, self.config.name, keyring, self._seen, time.time())

    def _remember(self, request_id: str) -> None:
        self._seen[request_id] = None
        while len(self._seen) > _SEEN:
            del self._seen[next(iter(self._seen))]

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
            async with open_node(
                f"{CONTROLLER_KEY}-{self._host}",
                host=None,
                security=old.security(CONTROLLER_KEY),
            ) as relay:

                async def ask(address: str, op: str, args: tuple[Any, ...], timeout: float) -> Any:
                    return await relay.ref(address).with_options(timeout=timeout).ask(op, *args)

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
