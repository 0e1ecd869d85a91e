"""What ``cluster status`` shows of one running node, and of a cluster that
spans hosts.

On one host the Controller asks each node it runs (:meth:`Controller.tree`).
Across hosts there is no one Controller: ``cluster status`` reads who is
registered in etcd and asks each registered node itself
(:func:`hosts_tree`). Both build a node's rows with :func:`node_children`:
the node's own supervision tree (its ``_node`` agent), its health checks and
breakers, and its dead letters. ``actorctl deadletters`` asks the same way
(:func:`hosts_letters`), and answers as the Controller does
(:func:`letters_request`, :func:`letters_answer`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import attrs
import trio

from .._errors import ActorctlError, ConfigError, RemoteError
from ..actors import ActorRef, BadArguments
from ..cluster._deadletters import DEAD_LETTERS, DeadLetterFill
from ..cluster.config._config import ClusterConfig
from ..etcd._etcd import EtcdClient
from ..etcd._node_record import NodeRecord, nodes_prefix
from ..etcd._role_lease import role_key
from ..supervision import HEALTH_AGENT
from ..supervision._status import HealthReport, TreeRow
from ._unanswered import Unanswered

__all__ = [
    "answer_within",
    "ask_each",
    "hosts_broadcast",
    "hosts_letters",
    "hosts_tree",
    "letters_answer",
    "letters_request",
    "node_children",
]

#: Seconds each node may take to answer one question.
ASK_TIMEOUT = 2.0
Refs = Callable[[str], ActorRef]
#: What ``actorctl deadletters`` asks of each node's dead-letter keeper.
LETTER_OPS: Final = ("list", "show", "retry", "purge")


def answer_within(timeout: float) -> float:
    """Seconds the nodes get to answer a command that waits ``timeout`` seconds:
    less a margin, so that what they said reaches the command in time."""
    return max(0.5, timeout * 0.8)


async def node_children(ref: Refs, address: str, actors: Sequence[str]) -> list[TreeRow]:
    """A running node's rows: its tree, its health checks and breakers (when
    it hosts the health agent), and its dead letters.

    Raises:
        ActorctlError: the node did not answer (in time).
        WireFormatError: its answer is malformed (naming what is wrong).
    """
    tree = await _ask(ref, f"{address}/_node", "tree")
    rows = [TreeRow.from_wire(tree, f"the answer of {address}/_node to 'tree'")]
    if HEALTH_AGENT in actors:
        report = HealthReport.from_wire(
            await _ask(ref, f"{address}/{HEALTH_AGENT}", "report"),
            f"the answer of {address}/{HEALTH_AGENT} to 'report'",
        )
        rows += [
            TreeRow(name, "health-check", r.state.value, detail=r.detail)
            for name, r in sorted(report.checks.items())
        ]
        for name, states in sorted(report.breakers.items()):
            rows += [TreeRow(name, "breaker", b.state.value, detail=b.reason) for b in states]
    rows.append(await _dead_letters(ref, address))
    return rows


async def _dead_letters(ref: Refs, address: str) -> TreeRow:
    """A node's dead letters (how many; 80 % full or not), as a row of its tree."""
    fill = DeadLetterFill.from_wire(
        await _ask(ref, f"{address}/{DEAD_LETTERS}", "fill"),
        f"the answer of {address}/{DEAD_LETTERS} to 'fill'",
    )
    detail = f"{fill.held} kept (max {fill.max})"
    if fill.nearly_full:
        detail += ": 80 % full, the oldest go when full (actorctl deadletters list)"
    state = "nearly-full" if fill.nearly_full else "ok"
    return TreeRow(DEAD_LETTERS, "dead-letters", state, detail=detail)


async def _ask(ref: Refs, address: str, handler: str) -> Any:
    return await ref(address).with_options(timeout=ASK_TIMEOUT).ask(handler)


async def hosts_tree(config: ClusterConfig, client: EtcdClient, ref: Refs) -> TreeRow:
    """The tree of a cluster that spans hosts, as etcd and its nodes say it is
    now: a row per host the file names, under it each of its nodes, running
    (registered, with its own rows) or not registered; and who holds the
    roles of the application the file was read for (its first role always,
    the others once held: the task layer's scheduler, and services when
    several services nodes take turns).

    Raises:
        EtcdError: etcd could not be reached (naming each endpoint).
    """
    snapshot = await client.get_prefix(nodes_prefix(config.name))
    records: dict[str, NodeRecord | str] = {}
    for kv in snapshot.kvs:
        name = kv.key.rpartition("/")[2]
        try:
            records[name] = NodeRecord.from_json(kv.value)
        except ConfigError as exc:  # a record this version cannot read is shown as such
            records[name] = f"unreadable record: {exc}"
    # The roles of the application the file was read for (the task layer's
    # scheduler and services roles, say): the first one always shown, the
    # others once someone holds them.
    app_roles = list(config.app.roles) if config.app is not None else []
    roles = {role: await client.get(role_key(config.name, role)) for role in app_roles}
    hosts = []
    for host in config.hosts or [""]:
        nodes = [
            await _node_row(ref, node.name, records.pop(node.name, None))
            for node in config.nodes
            if node.runs_on == host
        ]
        hosts.append(TreeRow(host or "-", "host", "-", children=tuple(nodes)))
    for name, record in sorted(records.items()):  # registered, but not in this file
        hosts.append(await _node_row(ref, name, record, note="not in the file"))
    held = {
        role: "none" if kv is None else kv.value.decode(errors="replace")
        for role, kv in roles.items()
    }
    state = (
        ", ".join(
            f"{role} {held[role]}" for i, role in enumerate(app_roles) if not i or roles[role]
        )
        or "-"
    )
    return TreeRow("etcd", "membership", state, cluster=config.name, children=tuple(hosts))


async def _node_row(
    ref: Refs, name: str, record: NodeRecord | str | None, *, note: str = ""
) -> TreeRow:
    if record is None:
        return TreeRow(name, "node", "not-registered", restarts=None)
    if isinstance(record, str):
        return TreeRow(name, "node", "unknown", restarts=None, error=record)
    state = "registered" if not note else f"registered ({note})"
    # restarts: its host's `host up` counts them, not etcd
    row = TreeRow(name, "node", state, restarts=None, address=record.address, children=())
    try:
        children = await node_children(ref, record.address.rstrip("/"), record.actors)
    except Exception as exc:  # a node that does not answer is reported as such
        return attrs.evolve(row, error=str(exc))
    return attrs.evolve(row, children=tuple(children))


async def ask_each(
    ref: Refs,
    targets: Mapping[str, str],
    actor: str,
    op: str,
    args: Sequence[Any],
    within: float,
    each: Mapping[str, Sequence[Any]] | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Ask ``op`` (with ``args``, or a node's own in ``each``) of ``actor`` on
    each node of ``targets`` (node name to address) at once, each within
    ``within`` seconds: the answers by node, and the errors of those that did
    not answer (their answer is then ``{"unanswered": why}``)."""
    answers: dict[str, Any] = {}
    errors: dict[str, str] = {}

    async def ask(node: str, address: str) -> None:
        try:
            answers[node] = (
                await ref(f"{address}/{actor}")
                .with_options(timeout=within)
                .ask(op, *(each or {}).get(node, args))
            )
        except RemoteError as exc:  # it answered: with an error (a misspelt task, say)
            errors[node] = str(exc)
            answers[node] = Unanswered(errors[node], refused=True).wire()
        except Exception as exc:  # one node that does not answer is reported as such
            errors[node] = f"{type(exc).__name__}: {exc}"
            answers[node] = Unanswered(errors[node]).wire()

    async with trio.open_nursery() as nursery:
        for node, address in targets.items():
            nursery.start_soon(ask, node, address.rstrip("/"))
    return answers, errors


async def hosts_broadcast(
    config: ClusterConfig,
    client: EtcdClient,
    ref: Refs,
    actor: str,
    op: str,
    args: Sequence[Any],
    within: float,
    *,
    hosting: bool = True,
) -> dict[str, Any]:
    """What the Controller's ``broadcast`` answers, for a cluster that spans
    hosts: ``op`` asked of ``actor`` on every node registered in etcd whose
    record lists it (every registered node, without ``hosting``: an actor
    every node runs, as its dead-letter keeper), at once.

    Raises:
        EtcdError: etcd could not be reached (naming each endpoint).
    """
    snapshot = await client.get_prefix(nodes_prefix(config.name))
    targets: dict[str, str] = {}
    unread: dict[str, Any] = {}
    for kv in snapshot.kvs:
        name = kv.key.rpartition("/")[2]
        try:
            record = NodeRecord.from_json(kv.value)
        except ConfigError as exc:  # a record this version cannot read is named
            unread[name] = Unanswered(f"unreadable record in etcd: {exc}").wire()
            continue
        if not hosting or actor in record.actors:
            targets[name] = record.address
    answers, _ = await ask_each(ref, targets, actor, op, args, within)
    return {**unread, **answers}


def letters_request(
    op: str, letter_id: str | None, reason: str | None, limit: int
) -> tuple[Any, ...]:
    """What ``actorctl deadletters OP`` asks of each node's ``_deadletters``.

    Raises:
        BadArguments: an operation that does not exist, or one that needs the
            id of a letter without it.
    """
    if op not in LETTER_OPS:
        raise BadArguments(f"no dead-letter operation {op!r} ({', '.join(LETTER_OPS)})")
    if op in ("show", "retry") and not letter_id:
        raise BadArguments(f"deadletters {op} needs the id of a letter")
    return (reason, limit) if op == "list" else (reason,) if op == "purge" else (letter_id,)


def letters_answer(op: str, answers: dict[str, Any], letter_id: str | None, within: float) -> Any:
    """What ``deadletters OP`` answers, from each node's answer: for ``list`` and
    ``purge`` the answers by node (``{"unanswered": why}`` for one that did not
    answer); for ``show`` and ``retry`` the letter the node that has it found,
    with that node's name, or None if none has it.

    Raises:
        ActorctlError: no node that answered has the letter, and some did not answer.
    """
    if op in ("list", "purge"):
        return answers
    failed: dict[str, str] = {}
    for name, found in answers.items():
        missing = Unanswered.of(found)
        if missing is not None:
            failed[name] = missing.why
        elif found is not None:
            return {**found, "node": name}
    if failed:
        said = "; ".join(f"node {n!r}: {e}" for n, e in sorted(failed.items()))
        raise ActorctlError(
            f"no answering node has dead letter {letter_id!r}, and these did not answer "
            f"within {within:g} s: {said}"
        )
    return None


async def hosts_letters(
    config: ClusterConfig,
    client: EtcdClient,
    ref: Refs,
    op: str,
    letter_id: str | None,
    reason: str | None,
    limit: int,
    timeout: float,
) -> Any:
    """What the Controller's ``deadletters`` answers, for a cluster that spans
    hosts: asked of every node registered in etcd.

    Raises:
        BadArguments: as :func:`letters_request`.
        ActorctlError: as :func:`letters_answer`.
        EtcdError: etcd could not be reached (naming each endpoint).
    """
    args = letters_request(op, letter_id, reason, limit)
    within = answer_within(timeout)
    answers = await hosts_broadcast(
        config, client, ref, DEAD_LETTERS, op, args, within, hosting=False
    )
    return letters_answer(op, answers, letter_id, within)
