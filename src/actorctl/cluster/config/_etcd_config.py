"""cluster.toml's ``[etcd]`` table: where a cluster that spans hosts keeps its membership.

    [etcd]
    endpoints = ["https://10.0.0.1:2379", "https://10.0.0.2:2379"]
    ttl = 10        # seconds a node that died stays registered (its lease's ttl)
    ca = "etcd/ca.pem"          # etcd's CA, for https endpoints (default: the system's)
    cert = "etcd/client.pem"    # a client certificate and its key, when etcd
    key = "etcd/client.key"     # runs with --client-cert-auth
    user = "actorctl"           # a user and the file that holds its password,
    password_file = "etcd/password"   # when etcd's auth is enabled

Without the table a cluster is one host and needs no etcd (``cluster up``, the
embedded default); with it, ``actorctl host up FILE --host NAME`` on each host
runs that host's nodes (``[[node]] host = "NAME"``), and each registers in
etcd under a lease (``_membership.py``, docs/deploy.md). ``--etcd URL`` on the
command line gives the endpoints instead of the table (or over it).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, final

import attrs

from ..._errors import ConfigError
from ..._schema import FileReader, read_table, schema_keys
from ..._schema import key as table_key
from ...etcd._etcd import DEFAULT_TIMEOUT, MAX_LEASE_TTL, EtcdClient
from ...etcd._membership import DEFAULT_NODE_TTL

__all__ = ["ETCD_KEYS", "EtcdSettings", "EtcdTable", "check_hosts", "etcd_settings"]


def _file(example: str) -> Any:
    """A key naming a file, relative to the cluster file's directory."""
    return table_key(
        f"a file's path (relative to the cluster file), like {example!r}", default=None
    )


@final
@attrs.frozen
class EtcdTable:
    """The ``[etcd]`` table as it is written (the module docstring shows one);
    its ``endpoints`` are checked as ``--etcd``'s are (:func:`check_endpoints`)."""

    endpoints: Any
    ttl: int = table_key(
        f"whole seconds in 1..{MAX_LEASE_TTL} (how long a node that died stays registered)",
        lambda v: 1 <= v <= MAX_LEASE_TTL,
        default=DEFAULT_NODE_TTL,
    )
    ca: str | None = _file("etcd/ca.pem")
    cert: str | None = _file("etcd/cert.pem")
    key: str | None = _file("etcd/key.pem")
    user: str | None = table_key("an etcd user's name", default=None)
    password_file: str | None = _file("etcd/password")


#: The keys of the [etcd] table: its schema's fields.
ETCD_KEYS: Final = schema_keys(EtcdTable)


@final
@attrs.frozen
class EtcdSettings:
    """Where etcd is, and how long a node's registration outlives the node.

    Attributes:
        endpoints: client URLs of etcd's members.
        ttl: the lease's ttl of a node's registration, whole seconds.
        ca: etcd's CA certificate, for ``https`` endpoints (None: the system's CAs).
        cert, key: a client certificate and its key (etcd's ``--client-cert-auth``).
        user, password_file: an etcd user, and the file that holds its password
            (its first line), when etcd's auth is enabled.
    """

    endpoints: tuple[str, ...]
    ttl: int = DEFAULT_NODE_TTL
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None
    user: str | None = None
    password_file: Path | None = None

    def client(self, timeout: float | None = None) -> EtcdClient:
        """A client of this etcd, with its TLS files and its user.

        Raises:
            ConfigError: a TLS file or the password file that cannot be read, naming it.
        """
        return EtcdClient(
            self.endpoints,
            timeout=DEFAULT_TIMEOUT if timeout is None else timeout,
            ca_file=self.ca,
            cert_file=self.cert,
            key_file=self.key,
            user=self.user,
            password=None if self.password_file is None else _password(self.password_file),
        )

    def with_endpoints(self, endpoints: Sequence[str]) -> EtcdSettings:
        """These settings with ``endpoints`` instead (``--etcd``), when any are given.

        Raises:
            ConfigError: an endpoint that is not an http(s) URL, naming it.
        """
        if not endpoints:
            return self
        check_endpoints(list(endpoints), "--etcd")
        return attrs.evolve(self, endpoints=tuple(endpoints))


def check_endpoints(endpoints: object, where: str) -> tuple[str, ...]:
    """``endpoints`` as etcd client URLs.

    Raises:
        ConfigError: naming ``where`` and what is wrong.
    """
    if (
        not isinstance(endpoints, list)
        or not endpoints
        or not all(isinstance(url, str) for url in endpoints)
    ):
        raise ConfigError(
            f"{where}: expected a list of etcd client URLs like "
            f'["http://10.0.0.1:2379"], got {endpoints!r}'
        )
    try:
        EtcdClient(endpoints)  # checks each URL; it opens nothing
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return tuple(endpoints)


def etcd_settings(reader: FileReader, table: object) -> EtcdSettings | None:
    """The ``[etcd]`` table (None: there is none), read as an :class:`EtcdTable`.

    Raises:
        ConfigError: naming the file, the key and what was expected.
    """
    if table is None:
        return None
    if not isinstance(table, dict):
        raise reader.error("etcd", "a table [etcd]", table)
    reader.keys(table, "etcd", "etcd")  # before its endpoints: a misspelt key is named first
    endpoints = check_endpoints(table["endpoints"], f"{reader.path}: key 'etcd.endpoints'")
    etcd = read_table(reader, table, "etcd", "etcd", EtcdTable)
    for given, missing in (("cert", "key"), ("key", "cert")):
        if getattr(etcd, given) is not None and getattr(etcd, missing) is None:
            raise ConfigError(
                f"{reader.path}: key 'etcd.{missing}' is missing: etcd.{given} is given, and "
                "a client certificate needs both cert and key (or neither)"
            )
    for given, missing in (("user", "password_file"), ("password_file", "user")):
        if getattr(etcd, given) is not None and getattr(etcd, missing) is None:
            raise ConfigError(
                f"{reader.path}: key 'etcd.{missing}' is missing: etcd.{given} is given, and "
                "etcd's auth needs both a user and the file that holds its password (or neither)"
            )
    root = reader.path.parent
    return EtcdSettings(
        endpoints,
        etcd.ttl,
        **{name: _in(root, getattr(etcd, name)) for name in ("ca", "cert", "key")},
        user=etcd.user,
        password_file=_in(root, etcd.password_file),
    )


def _in(root: Path, name: str | None) -> Path | None:
    """The file ``name`` names, relative to the cluster file's directory ``root``."""
    return None if name is None else (root / name).resolve()


def _password(path: Path) -> str:
    """The password in the first line of ``path``.

    Raises:
        ConfigError: the file cannot be read, or its first line is empty.
    """
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"etcd password_file {path}: cannot be read ({exc}): it holds the password of "
            "[etcd] user in its first line"
        ) from None
    if not lines or not lines[0]:
        raise ConfigError(f"etcd password_file {path}: its first line (the password) is empty")
    return lines[0]


def check_hosts(path: Path, nodes: Sequence[tuple[str, str]]) -> None:
    """Every node (name, host) says which host runs it, or none does (the one host).

    Raises:
        ConfigError: naming the first node without a host, and one with.
    """
    named = [(name, host) for name, host in nodes if host]
    if named and len(named) < len(nodes):
        index = next(i for i, (_, host) in enumerate(nodes) if not host)
        name, host = named[0]
        raise ConfigError(
            f"{path}: key 'node[{index}].host' is missing: node {name!r} says host = "
            f"{host!r}, and every node must say which host runs it (or none, for a "
            f'cluster on one host): add host = "NAME" to node {nodes[index][0]!r}'
        )
