"""``actorctl cluster reload FILE`` of a cluster that spans hosts (``host up``
on each, no Controller): a request signed with the CLI's operator key,
written in etcd, and each live host's outcome as a table
(``ops/_reload_request.py``, ``ops/_host_reload.py``)."""

from __future__ import annotations

import asyncclick as click

from .._errors import ConfigError
from ..cluster import ClusterConfig
from ..etcd import EtcdClient
from ..ops import CLI_NAME, HostOutcome, Outcome, ask_reload, sign_request
from ._errors import fail
from ._reach import Refs, ask_hosts

__all__ = ["reload_across"]

#: Seconds each etcd request of the command may take (the wait is --timeout).
_ETCD_TIMEOUT = 5.0


async def reload_across(
    config: ClusterConfig, *, dry_run: bool, drain_timeout: float, timeout: float
) -> None:
    """Ask every host of ``config``'s cluster, through etcd, to reload the
    file, wait (at most ``timeout`` seconds) for every live host's outcome,
    and print them; exit 1 unless every host answered and none refused or
    warned."""
    try:
        keyring = config.security(CLI_NAME).keyring
        content = config.path.read_text()
    except (ConfigError, OSError) as exc:
        fail(f"reload refused, the cluster runs on unchanged: {exc}", 2)
    if keyring is None:
        fail(
            f"{config.path}: an insecure cluster cannot be reloaded across hosts (a request "
            "must be signed with an operator key): restart each host up with the new file",
            2,
        )
    request = sign_request(
        config, content, keyring.identity, dry_run=dry_run, drain_timeout=drain_timeout
    )

    async def ask(
        config: ClusterConfig, client: EtcdClient, _: Refs
    ) -> tuple[list[str], dict[str, HostOutcome]]:
        return await ask_reload(config, client, request, timeout)

    live, outcomes = await ask_hosts(config, min(_ETCD_TIMEOUT, timeout), ask, nodes=False)
    click.echo(
        f"{'dry run of ' if dry_run else ''}reload {request.id} of cluster {config.name!r} "
        f"({config.path}) asked through etcd"
    )
    rows, failed = _rows(config, live, outcomes, timeout)
    click.echo(_table(rows))
    for host in config.hosts:
        details = _details(outcomes.get(host), dry_run)
        if details:
            click.echo("\n".join(details))
    if failed:
        raise SystemExit(1)


def _rows(
    config: ClusterConfig, live: list[str], outcomes: dict[str, HostOutcome], timeout: float
) -> tuple[list[tuple[str, str, str]], bool]:
    """One row per host of the file: its outcome and why; whether any failed."""
    rows, failed = [], False
    for host in config.hosts:
        outcome = outcomes.get(host)
        if outcome is None:
            failed = True
            why = (
                f"registered in etcd, no outcome within {timeout:g} s"
                if host in live
                else "none of its nodes is registered in etcd (its host up is not running, "
                "or is cut off): reload it there once it is back"
            )
            rows.append((host, "did not answer", why))
            continue
        failed = failed or outcome.outcome is Outcome.REFUSED or bool(outcome.warnings)
        detail = outcome.reason or _count(outcome)
        rows.append((host, outcome.outcome.value, detail))
    return rows, failed


def _count(outcome: HostOutcome) -> str:
    said = f"{len(outcome.plan)} changes" if outcome.plan else "no change"
    return f"{said}, {len(outcome.warnings)} warnings" if outcome.warnings else said


def _details(outcome: HostOutcome | None, dry_run: bool) -> list[str]:
    if outcome is None or outcome.outcome is Outcome.REFUSED or not outcome.plan:
        return []
    lines = [f"host {outcome.host} {'would change' if dry_run else 'changes'}:"]
    lines += [f"  {line}" for line in outcome.plan]
    if not dry_run:
        lines += ["applied:", *(f"  {line}" for line in outcome.applied or ["nothing"])]
    lines += [f"warning: {line}" for line in outcome.warnings]
    return lines


def _table(rows: list[tuple[str, str, str]]) -> str:
    lines = [("HOST", "OUTCOME", "DETAIL"), *rows]
    widths = [max(len(line[i]) for line in lines) for i in range(2)]
    return "\n".join(
        f"{line[0].ljust(widths[0])}  {line[1].ljust(widths[1])}  {line[2]}".rstrip()
        for line in lines
    )
