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
from typing import Final, final

import attrs

from ..._errors import ConfigError
from ...etcd._etcd import DEFAULT_TIMEOUT, MAX_LEASE_TTL, EtcdClient
from ...etcd._membership import DEFAULT_NODE_TTL
from ._config_keys import unknown_key

__all__ = ["ETCD_KEYS", "EtcdSettings", "check_hosts", "etcd_settings"]

#: The keys of the [etcd] table.
ETCD_KEYS: Final = frozenset({"endpoints", "ttl", "ca", "cert", "key", "user", "password_file"})


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


def etcd_settings(path: Path, table: object) -> EtcdSettings | None:
    """The ``[etcd]`` table of the file at ``path`` (None: there is none).

    Raises:
        ConfigError: naming the file, the key and what was expected.
    """
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: key 'etcd': expected a table [etcd], got {table!r}")
    for key, value in table.items():
        if key not in ETCD_KEYS:
            raise unknown_key(path, f"etcd.{key}", value, ETCD_KEYS)
    if "endpoints" not in table:
        raise ConfigError(
            f"{path}: key 'etcd.endpoints' is missing: the [etcd] table says where etcd "
            'is (endpoints = ["http://HOST:2379", ...])'
        )
    endpoints = check_endpoints(table["endpoints"], f"{path}: key 'etcd.endpoints'")
    ttl = table.get("ttl", DEFAULT_NODE_TTL)
    if isinstance(ttl, bool) or not isinstance(ttl, int) or not 1 <= ttl <= MAX_LEASE_TTL:
        raise ConfigError(
            f"{path}: key 'etcd.ttl': expected whole seconds in 1..{MAX_LEASE_TTL} (how "
            f"long a node that died stays registered), got {ttl!r}"
        )
    files = {name: _tls_file(path, name, table.get(name)) for name in ("ca", "cert", "key")}
    if (files["cert"] is None) != (files["key"] is None):
        given, missing = ("cert", "key") if files["cert"] is not None else ("key", "cert")
        raise ConfigError(
            f"{path}: key 'etcd.{missing}' is missing: etcd.{given} is given, and a client "
            "certificate needs both cert and key (or neither)"
        )
    user = table.get("user")
    if user is not None and (not isinstance(user, str) or not user):
        raise ConfigError(f"{path}: key 'etcd.user': expected an etcd user's name, got {user!r}")
    password_file = _tls_file(path, "password_file", table.get("password_file"))
    if (user is None) != (password_file is None):
        given, missing = (
            ("user", "password_file") if user is not None else ("password_file", "user")
        )
        raise ConfigError(
            f"{path}: key 'etcd.{missing}' is missing: etcd.{given} is given, and etcd's "
            "auth needs both a user and the file that holds its password (or neither)"
        )
    return EtcdSettings(endpoints, ttl, **files, user=user, password_file=password_file)


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


def _tls_file(path: Path, name: str, value: object) -> Path | None:
    """The file ``value`` names, relative to the cluster file's directory (a
    TLS file, or the password file)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        example = "etcd/password" if name == "password_file" else f"etcd/{name}.pem"
        raise ConfigError(
            f"{path}: key 'etcd.{name}': expected a file's path (relative to the "
            f"cluster file), like {example!r}, got {value!r}"
        )
    return (path.parent / value).resolve()


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
