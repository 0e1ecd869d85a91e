"""What a node says about itself in etcd: its record, and where the record lives.

A cluster that spans hosts learns who is in it from etcd (docs/design, "Beyond
one machine"): each node keeps ``/actorctl/<cluster>/nodes/<name>`` under a
lease of its own (:mod:`._membership`), and every node reads and watches the
prefix (:mod:`._etcd_directory`). The value is a JSON object, so that a tool
in any language (or ``etcdctl get --prefix``) can read it::

    {"name": "worker-1", "address": "amqps://10.0.0.2:5701",
     "key_id": "ed25519:...", "fingerprint": "sha256:...",
     "actors": ["_node", "_tasks", "celery", "celery-2"],
     "workers": {"celery": ["celery", "celery-2"]}, "started": 1795000000.5,
     "knows": ["services", "worker-1"], "trusts": ["ed25519:...", ...]}

``workers`` names, for each pool the node serves, which of its ``actors`` are
that pool's workers: a router takes the workers from there as they are, with
no naming convention to guess from (the task layer names them ``POOL``,
``POOL-2``, ..., docs/protocol.md §14.1, but the runtime does not import it).

``fingerprint`` is the SHA-256 of the node's TLS certificate (empty for a node
without TLS): a peer can check that the certificate it is shown is the one the
node registered.

``knows`` and ``trusts`` say whom the node takes for members: the node names
of its cluster file and the ids of the member keys its keyring trusts. A node
about to register checks them against its own (:func:`membership_refusal`): a
node that some member would not accept (not in that member's file, its key
unknown there), or that would not accept a member, is refused before it
registers, so that membership is one truth and no node is half a member.
``leaving`` is written just before a node that stops on purpose revokes its
lease: the others tell its leave from a death (what it holds unsettled it
settles as it drains, so it is not sent elsewhere at once).

A field that an older release wrote under another name (``workers`` was
named with the task layer's word before issue 29) is read and written
through ``aliases``, old name to field: the application that named it
declares the table (``ClusterApp.record_aliases``), a node's own record
carries it (:func:`~actorctl.cluster.node_record`), and the node's directory
reads its peers' records with it. A node writes such a field under both
names, so that nodes of the older release still read it, and reads the old
name from a record that lacks the new one (docs/deploy.md, "Which versions
may mix"). This module knows no old name itself.
"""

from __future__ import annotations

import hashlib
import json
import re
import ssl
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final
from urllib.parse import urlsplit

import attrs

from .._errors import ConfigError
from ..actors import Address

__all__ = [
    "NodeRecord",
    "certificate_fingerprint",
    "membership_refusal",
    "node_key",
    "nodes_prefix",
]

#: A cluster's or a node's name as it appears in a key: no "/" (it would
#: nest), nothing that needs quoting.
_NAME: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
#: The longest record read from etcd (a node hosting thousands of actors fits).
MAX_RECORD: Final = 1 << 20


def _check_name(what: str, name: object) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(
            f"{what} {name!r}: expected letters, digits, '.', '_' or '-' "
            "(starting and ending with a letter or digit), e.g. worker-1"
        )
    return name


def nodes_prefix(cluster: str) -> str:
    """The etcd prefix under which ``cluster``'s nodes register (ends with "/").

    Raises:
        ConfigError: a cluster name that cannot be part of a key.
    """
    return f"/actorctl/{_check_name('cluster name', cluster)}/nodes/"


def node_key(cluster: str, name: str) -> str:
    """The key of node ``name``'s record in ``cluster``."""
    return nodes_prefix(cluster) + _check_name("node name", name)


def certificate_fingerprint(pem: Path) -> str:
    """``sha256:<hex>`` of the first certificate in the PEM file ``pem``.

    Raises:
        ConfigError: a file that cannot be read or holds no certificate.
    """
    try:
        text = pem.read_text()
        der = ssl.PEM_cert_to_DER_cert(text)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"certificate {pem}: cannot read a PEM certificate from it ({exc})"
        ) from None
    return "sha256:" + hashlib.sha256(der).hexdigest()


def _valid_name(_record: NodeRecord, _attribute: attrs.Attribute[str], value: str) -> None:
    _check_name("node name", value)


def _names(value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple | frozenset | set):
        raise ConfigError(f"expected a list of names, got {value!r}")
    if not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"expected non-empty strings, got {value!r}")
    return tuple(value)


def _workers(value: object) -> Mapping[str, tuple[str, ...]]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"expected pool names to their workers' names, got {value!r}")
    return MappingProxyType({str(pool): _names(workers) for pool, workers in value.items()})


def _aliases(value: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(value))


@attrs.frozen
class NodeRecord:
    """One node of a cluster, as it registers itself.

    Attributes:
        name: the node's name (its AMQP container id), unique in the cluster.
        address: its endpoint, ``amqps://host:port`` (``amqp://`` without TLS).
        key_id: the id of the key it signs with.
        fingerprint: ``sha256:<hex>`` of its TLS certificate ("" without TLS).
        actors: the names of the actors it hosts.
        workers: pool name to the names of that pool's workers among ``actors``.
        started: when the node started (Unix time, seconds).
        knows: the node names of its cluster file (empty: not said).
        trusts: the ids of the member keys it trusts (empty: not said, or no keys).
        leaving: it stops on purpose, and leaves the directory next.
        aliases: old name to field, for fields an older release wrote under
            another name (:meth:`to_json` writes both, :meth:`from_json` reads
            the old one); not part of what the record says (not compared).

    Raises:
        ConfigError: (when made) a bad name or address, or a pool worker that
            is not one of ``actors``.
    """

    name: str = attrs.field(validator=_valid_name)
    address: str
    key_id: str
    fingerprint: str = ""
    actors: tuple[str, ...] = attrs.field(default=(), converter=_names)
    workers: Mapping[str, tuple[str, ...]] = attrs.field(
        factory=lambda: MappingProxyType({}), converter=_workers
    )
    started: float = 0.0
    knows: tuple[str, ...] = attrs.field(default=(), converter=_names)
    trusts: tuple[str, ...] = attrs.field(default=(), converter=_names)
    leaving: bool = False
    aliases: Mapping[str, str] = attrs.field(
        factory=lambda: MappingProxyType({}), converter=_aliases, eq=False, repr=False
    )

    def __attrs_post_init__(self) -> None:
        parts = urlsplit(self.address)
        if (
            parts.scheme not in ("amqp", "amqps")
            or parts.path not in ("", "/")
            or parts.query
            or parts.fragment
        ):
            raise ConfigError(
                f"node {self.name!r}: address {self.address!r} must be the node's endpoint "
                "alone, amqps://HOST:PORT (no actor name)"
            )
        try:
            Address.parse(f"{self._endpoint_text()}/_node")
        except ConfigError as exc:
            raise ConfigError(f"node {self.name!r}: {exc}") from None
        hosted = set(self.actors)
        for pool, workers in self.workers.items():
            missing = [w for w in workers if w not in hosted]
            if missing:
                raise ConfigError(
                    f"node {self.name!r}: pool {pool!r} names workers {missing} that are not "
                    f"among its actors {sorted(hosted)}: list them in actors too"
                )

    def _endpoint_text(self) -> str:
        return self.address.rstrip("/")

    def worker_addresses(self, pool: str) -> tuple[Address, ...]:
        """The addresses of ``pool``'s workers on this node (none: it does not serve it)."""
        base = self._endpoint_text()
        return tuple(Address.parse(f"{base}/{worker}") for worker in self.workers.get(pool, ()))

    def to_json(self) -> bytes:
        """The value stored in etcd (compact JSON, keys sorted: the same record
        is always the same bytes, so that writing it again changes nothing)."""
        body: dict[str, Any] = {
            "name": self.name,
            "address": self.address,
            "key_id": self.key_id,
            "fingerprint": self.fingerprint,
            "actors": list(self.actors),
            "workers": {pool: list(workers) for pool, workers in sorted(self.workers.items())},
            "started": self.started,
        }
        if self.knows or self.trusts:
            body["knows"], body["trusts"] = sorted(self.knows), sorted(self.trusts)
        if self.leaving:
            body["leaving"] = True
        for old, field in self.aliases.items():
            if field in body:
                body[old] = body[field]
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes, aliases: Mapping[str, str] | None = None) -> NodeRecord:
        """The record stored as ``data``; ``aliases`` (old name to field) reads
        a field that an older release wrote under its old name.

        Raises:
            ConfigError: not a record: what is wrong with it.
        """
        if len(data) > MAX_RECORD:
            raise ConfigError(f"a node record of {len(data)} bytes (at most {MAX_RECORD})")
        try:
            body = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"a node record that is not JSON ({exc})") from None
        if not isinstance(body, dict):
            raise ConfigError(f"a node record that is not a JSON object: {body!r:.80}")
        missing = sorted({"name", "address", "key_id"} - body.keys())
        if missing:
            raise ConfigError(f"a node record without {', '.join(missing)}")
        for old, field in (aliases or {}).items():
            if field not in body and old in body:
                body[field] = body[old]
        started = body.get("started", 0.0)
        if isinstance(started, bool) or not isinstance(started, int | float):
            raise ConfigError(f"a node record whose started is not a number: {started!r}")
        for field in ("address", "key_id", "fingerprint"):
            if not isinstance(body.get(field, ""), str):
                raise ConfigError(f"a node record whose {field} is not a string")
        if not isinstance(body.get("leaving", False), bool):
            raise ConfigError("a node record whose leaving is not true or false")
        return cls(
            name=body["name"],
            address=body["address"],
            key_id=body["key_id"],
            fingerprint=body.get("fingerprint", ""),
            actors=body.get("actors", []),
            workers=body.get("workers", {}),
            started=float(started),
            knows=body.get("knows", []),
            trusts=body.get("trusts", []),
            leaving=body.get("leaving", False),
            aliases=aliases or {},
        )


def membership_refusal(record: NodeRecord, registered: Iterable[NodeRecord]) -> str | None:
    """Why ``record`` must not register beside the nodes ``registered`` lists
    (each as etcd holds it), or None: every member accepts it and it accepts
    every member. A record that says nothing of whom it knows (``knows``
    empty: written by a tool, or an older node) is neither checked nor checks.

    The reasons, each naming what to do: its name is taken by another node
    (another address or key); a member's file does not name it, or the
    member does not trust its key; its own file does not name a member, or it
    does not trust the member's key.
    """
    for other in sorted(registered, key=lambda r: r.name):
        if other.leaving:
            continue  # its lease is revoked next
        if other.name == record.name:
            if (other.address, other.key_id) != (record.address, record.key_id):
                return (
                    f"node name {record.name!r} is taken: a node at {other.address} "
                    f"(key {other.key_id or 'none'}) is registered under it; stop that "
                    "node, or give this one another name in the cluster file"
                )
            continue  # this node's own record (its former process's, say)
        if not record.knows or not other.knows:
            continue
        why = _one_way(other, record) or _one_way(record, other, theirs=False)
        if why is not None:
            return why
    return None


def _one_way(judge: NodeRecord, member: NodeRecord, *, theirs: bool = True) -> str | None:
    """Why ``judge`` would not accept ``member`` (None: it would)."""
    fix = (
        "copy the one cluster file (and keys/) to every host, and restart the nodes "
        "that run an older copy"
    )
    whose = f"node {judge.name!r} (at {judge.address})" if theirs else "this node"
    if member.name not in judge.knows:
        return f"node {member.name!r} is not in the cluster file of {whose}: {fix}"
    if member.key_id and judge.trusts and member.key_id not in judge.trusts:
        return f"the key of node {member.name!r} ({member.key_id}) is unknown to {whose}: {fix}"
    return None
