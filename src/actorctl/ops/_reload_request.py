"""``actorctl cluster reload`` of a cluster that spans hosts: the request an
operator writes in etcd, signed, and the outcome each ``host up`` writes back.

With no Controller across hosts, the request travels through etcd: the CLI
writes it at ``/actorctl/CLUSTER/reload/request`` (the new file's content,
its SHA-256, a fresh request id, when it was asked, and the options), signed
with the operator's identity key (Ed25519 over :func:`canonical`). Every
``host up`` watches that key (``_host_reload.py``), checks the signature
against its own keyring (a trusted key whose role is ``operator``), refuses a
request for another cluster, one outside the time window, and one whose id
it has seen (a replay), then reloads its own nodes and writes its outcome at
``/actorctl/CLUSTER/reload/outcomes/ID/HOST``. Before it checks the file (seconds:
a process of its own), a host that has verified a request says it received it,
at ``/actorctl/CLUSTER/reload/received/ID/HOST``. The CLI waits for the outcome
of every host that etcd's membership says is live (:func:`ask_reload`), and may
stop waiting sooner for one that has not said it received the request.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import json
import secrets
import time
from collections.abc import Collection
from typing import Any, Final, final

import attrs
import trio

from .._errors import ActorctlError
from ..cluster.config._config import ClusterConfig
from ..etcd._etcd import EtcdClient
from ..etcd._etcd_wire import EtcdError
from ..etcd._node_record import nodes_prefix
from ..mailbox import IdentityKey, Keyring, Role

__all__ = [
    "REQUEST_WINDOW",
    "Answers",
    "BadRequest",
    "HostOutcome",
    "Outcome",
    "ReloadRequest",
    "ask_reload",
    "canonical",
    "live_hosts",
    "outcome_key",
    "receipt_key",
    "refusal",
    "request_key",
    "sign_request",
]

#: Seconds a request stays good after it was asked (clocks differ by less).
REQUEST_WINDOW: Final = 300.0
#: What the signature covers first: never the bytes of another kind of message.
_DOMAIN: Final = b"actorctl-reload-request-v1\n"


class BadRequest(ActorctlError):
    """A reload request in etcd that is not one (not JSON, a field missing)."""


class Outcome(enum.StrEnum):
    """What a host did with a reload request."""

    CHANGED = "changed"
    UNCHANGED = "unchanged"
    REFUSED = "refused"


def _prefix(cluster: str) -> str:
    return nodes_prefix(cluster).removesuffix("nodes/") + "reload/"


def request_key(cluster: str) -> str:
    """The key ``cluster reload`` writes its request at, which every ``host up`` watches."""
    return _prefix(cluster) + "request"


def outcome_key(cluster: str, request_id: str, host: str = "") -> str:
    """Where ``host`` writes its outcome of the request ``request_id`` (with no
    host: the prefix of every host's outcome)."""
    return f"{_prefix(cluster)}outcomes/{request_id}/{host}"


def receipt_key(cluster: str, request_id: str, host: str = "") -> str:
    """Where ``host`` says it received the request ``request_id``, verified, before
    it checks the file (with no host: the prefix of every host's receipt)."""
    return f"{_prefix(cluster)}received/{request_id}/{host}"


@final
@attrs.frozen
class ReloadRequest:
    """One signed request to reload a cluster across hosts.

    Attributes:
        id: fresh for each request (a replay repeats an id).
        cluster: the cluster it is for (signed: not good for another).
        content: the new cluster file, as text.
        digest: SHA-256 of ``content`` (hex).
        asked: when it was asked (Unix time): good for ``REQUEST_WINDOW`` seconds.
        dry_run: each host says what it would change and changes nothing.
        drain_timeout: seconds a node removed or restarted gets to finish.
        key_id: the signer's key id.
        signature: Ed25519 of :func:`canonical` (empty: unsigned).
    """

    id: str
    cluster: str
    content: str
    digest: str
    asked: float
    dry_run: bool
    drain_timeout: float
    key_id: str
    signature: bytes = b""

    def to_json(self) -> str:
        fields = attrs.asdict(self)
        fields["signature"] = base64.b64encode(self.signature).decode()
        return json.dumps(fields, sort_keys=True)

    @classmethod
    def from_json(cls, raw: bytes) -> ReloadRequest:
        """Raises:
        BadRequest: naming what is wrong."""
        try:
            fields = json.loads(raw)
            return cls(
                id=_text(fields, "id"),
                cluster=_text(fields, "cluster"),
                content=_text(fields, "content"),
                digest=_text(fields, "digest"),
                asked=float(fields["asked"]),
                dry_run=bool(fields["dry_run"]),
                drain_timeout=float(fields["drain_timeout"]),
                key_id=_text(fields, "key_id"),
                signature=base64.b64decode(str(fields.get("signature", "")), validate=True),
            )
        except (ValueError, TypeError, KeyError, binascii.Error) as exc:
            raise BadRequest(f"not a reload request: {type(exc).__name__}: {exc}") from None


def _text(fields: dict[str, Any], name: str) -> str:
    value = fields[name]
    if not isinstance(value, str):
        raise TypeError(f"field {name!r} is not a string")
    return value


def canonical(request: ReloadRequest) -> bytes:
    """The bytes the signature covers: every field but the signature."""
    fields = attrs.asdict(request)
    del fields["signature"]
    return _DOMAIN + json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()


def sign_request(
    config: ClusterConfig,
    content: str,
    identity: IdentityKey,
    *,
    dry_run: bool = False,
    drain_timeout: float = 30.0,
) -> ReloadRequest:
    """A fresh request to reload ``config``'s cluster with ``content``, signed by ``identity``."""
    unsigned = ReloadRequest(
        id=secrets.token_hex(16),
        cluster=config.name,
        content=content,
        digest=hashlib.sha256(content.encode()).hexdigest(),
        asked=time.time(),
        dry_run=dry_run,
        drain_timeout=drain_timeout,
        key_id=identity.key_id,
    )
    return attrs.evolve(unsigned, signature=identity.sign(canonical(unsigned)))


def refusal(
    request: ReloadRequest,
    cluster: str,
    keyring: Keyring,
    seen: Collection[str],
    now: float,
) -> str | None:
    """Why a host refuses ``request`` (None: it may act on it): another
    cluster's, unsigned, a key it does not trust or that is not an operator's,
    a signature that does not match, a digest that does not match, outside
    the time window, or an id it has seen (a replay)."""
    if request.cluster != cluster:
        return f"the request is for cluster {request.cluster!r}, not {cluster!r}"
    if not request.signature:
        return "the request is not signed (sign it with an operator key: actorctl cluster reload)"
    key = keyring.trusted(request.key_id)
    if key is None:
        revoked = " (revoked)" if keyring.revoked(request.key_id) is not None else ""
        return (
            f"the request is signed by key {request.key_id}, which this host does not "
            f"trust{revoked}"
        )
    role = keyring.role(request.key_id)
    if role is not Role.OPERATOR:
        return (
            f"the request is signed by key {key.name or key.key_id}, whose role is {role.value}: "
            "a reload needs the operator role (actorctl keys add KEY.pub --role operator)"
        )
    try:
        key.verify(request.signature, canonical(request))
    except ActorctlError as exc:
        return f"the request's signature does not match: {exc}"
    if hashlib.sha256(request.content.encode()).hexdigest() != request.digest:
        return "the request's file does not match its digest"
    if request.id in seen:
        return f"request {request.id} was seen before: a replay"
    if abs(now - request.asked) > REQUEST_WINDOW:
        return (
            f"the request was asked {now - request.asked:.0f} s ago, outside the "
            f"{REQUEST_WINDOW:g} s window: an old request replayed, or a clock that is off"
        )
    return None


@final
@attrs.frozen
class HostOutcome:
    """What one host did with a reload request (written in etcd as JSON)."""

    host: str
    outcome: Outcome
    reason: str = ""
    plan: tuple[str, ...] = ()
    applied: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def to_json(self) -> str:
        return json.dumps(attrs.asdict(self))

    @classmethod
    def from_json(cls, raw: bytes) -> HostOutcome:
        """Raises:
        BadRequest: not an outcome."""
        try:
            fields = json.loads(raw)
            return cls(
                host=str(fields["host"]),
                outcome=Outcome(fields["outcome"]),
                reason=str(fields.get("reason", "")),
                plan=tuple(str(line) for line in fields.get("plan", ())),
                applied=tuple(str(line) for line in fields.get("applied", ())),
                warnings=tuple(str(line) for line in fields.get("warnings", ())),
            )
        except (ValueError, TypeError, KeyError) as exc:
            raise BadRequest(f"not a host's outcome: {type(exc).__name__}: {exc}") from None


async def live_hosts(config: ClusterConfig, client: EtcdClient) -> list[str]:
    """The hosts of ``config`` that run a node registered in etcd now."""
    prefix = nodes_prefix(config.name)
    registered = {kv.key[len(prefix) :] for kv in (await client.get_prefix(prefix)).kvs}
    return sorted({n.runs_on for n in config.nodes if n.name in registered and n.runs_on})


@final
@attrs.define
class Answers:
    """What the hosts answered to one request (:func:`ask_reload`), filled in as
    they answer.

    Attributes:
        live: the hosts that ran a node registered in etcd when it was asked.
        received: the hosts that said they received it, verified.
        outcomes: each host's outcome, by host (none: it did not answer in time).
    """

    live: list[str]
    received: set[str]
    outcomes: dict[str, HostOutcome]


async def ask_reload(
    config: ClusterConfig,
    client: EtcdClient,
    request: ReloadRequest,
    timeout: float,
    *,
    receipt_timeout: float | None = None,
) -> Answers:
    """Write ``request`` where every ``host up`` watches, then wait (at most
    ``timeout`` seconds) for the outcome of every live host (:func:`live_hosts`,
    read just before). A live host that has neither answered nor said it
    received the request within ``receipt_timeout`` seconds (None: ``timeout``)
    is not waited for any longer: its ``host up`` is stopped, cut off from
    etcd, or busy with an earlier request.

    Raises:
        EtcdError: etcd could not be reached (naming each endpoint).
    """
    live = await live_hosts(config, client)
    since = await client.put(request_key(config.name), request.to_json())
    answers = Answers(live, set(), {})
    if live:
        with trio.move_on_after(timeout):
            await _wait(config, client, request.id, since, answers, receipt_timeout)
    return answers


async def _wait(
    config: ClusterConfig,
    client: EtcdClient,
    request_id: str,
    since: int,
    answers: Answers,
    receipt_timeout: float | None,
) -> None:
    """Fill in ``answers`` (its receipts and outcomes) as etcd's watch gives
    them, until every host waited for has answered (the caller's deadline ends
    it sooner)."""
    done_prefix = outcome_key(config.name, request_id)
    receipt_prefix = receipt_key(config.name, request_id)
    waiting = set(answers.live)

    async def read(cancel: trio.CancelScope) -> None:
        # Under the reload prefix, from the request's revision on: none missed.
        async with client.watch_prefix(_prefix(config.name), since) as watch:
            async for event in watch:
                if event.kind != "put":
                    continue
                if event.key.startswith(done_prefix):
                    _take(answers.outcomes, event.value)
                elif event.key.startswith(receipt_prefix):
                    answers.received.add(event.key.removeprefix(receipt_prefix))
                if waiting <= answers.outcomes.keys():
                    cancel.cancel(reason="every host waited for answered")

    async def give_up_on_silent(cancel: trio.CancelScope, after: float) -> None:
        await trio.sleep(after)
        waiting.intersection_update(answers.received | answers.outcomes.keys())
        if waiting <= answers.outcomes.keys():
            cancel.cancel(reason="every host that received the request answered")

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read, nursery.cancel_scope)
            if receipt_timeout is not None:
                nursery.start_soon(give_up_on_silent, nursery.cancel_scope, receipt_timeout)
    except* EtcdError as group:  # only the watch raises: one error, as callers expect it
        raise group.exceptions[0] from None


def _take(outcomes: dict[str, HostOutcome], raw: bytes) -> None:
    try:
        outcome = HostOutcome.from_json(raw)
    except BadRequest:
        return  # not a host's: nothing to wait on
    outcomes[outcome.host] = outcome
