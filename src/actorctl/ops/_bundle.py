"""One host's secrets: ``actorctl host bundle FILE --host NAME --out DIR``.

A cluster that spans hosts is made its certificates and keys on one machine
(``actorctl certs init``, ``actorctl keys gen``): that directory holds the
CA's private key and every node's. A host needs far less: the certificates and
private keys of the nodes it runs, the CA's certificate (never its key), and
the public side of everyone else. :func:`write_host_bundle` copies exactly
that into ``DIR/certs`` and ``DIR/keys``, for the operator to put where the
host's copy of the cluster file says (its ``certs`` and ``keys``):

- ``certs/``: ``ca.pem``, and ``NODE.pem`` and ``NODE.key`` of each node the
  host runs;
- ``keys/``: ``NODE.key`` of each node the host runs, every trusted ``*.pub``
  (the other nodes', the operators', the clients'), the keyring's ``members``
  and ``roles`` files, and its ``revoked/`` keys.

A host whose bundle leaks gives away its own nodes' identities, not the CA
(which could certify anyone) nor another host's nodes. That is all a host
needs, ``cluster reload`` across hosts included: ``host up`` asks its own
nodes under each node's own key (``_host_reload.py``), so no bundle holds an
operator's key, and one is refused for a host whose node's key has the
operator role (whoever took the host could then stop or reload the cluster).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from .._errors import ConfigError
from ..cluster.config._config import ClusterConfig
from ..mailbox import ROLES_FILE, Role
from ..mailbox._keyring import MEMBERS_FILE, REVOKED
from ..mailbox._roles import read_roles
from ._host_runner import host_nodes

__all__ = ["write_host_bundle"]

#: Files of the keyring that hold no secret, copied to every host when present.
_SHARED_FILES: Final = (MEMBERS_FILE, ROLES_FILE)


def write_host_bundle(config: ClusterConfig, host: str, out: Path) -> list[Path]:
    """Copy ``host``'s share of the cluster's certificates and keys (read from
    the file's ``certs`` and ``keys``) into ``out/certs`` and ``out/keys``:
    private files with mode 0600, the rest 0644. Returns what was written.

    Raises:
        ConfigError: the cluster is insecure (nothing to copy), the host runs
            no node, a node it runs has the operator role (its private key
            would be an operator's on the host), a file it needs is missing
            (naming it and the command that makes it), a node of another host
            has no public key (this host's nodes would not trust it), or
            ``out/certs`` or ``out/keys`` holds files already.
    """
    if config.insecure:
        raise ConfigError(
            f"{config.path}: the cluster is insecure: it has no certificates or keys to bundle"
        )
    mine = [node.name for node in host_nodes(config, host)]
    _refuse_operators(config, host, mine)
    certs, keys = out / "certs", out / "keys"
    _refuse_filled(certs, keys)
    copies = [(config.certs / "ca.pem", certs / "ca.pem", 0o644)]
    for name in mine:
        copies += [
            (config.certs / f"{name}.pem", certs / f"{name}.pem", 0o644),
            (config.certs / f"{name}.key", certs / f"{name}.key", 0o600),
            (config.keys / f"{name}.key", keys / f"{name}.key", 0o600),
        ]
    copies += _public_side(config, keys)
    missing = [source for source, _, _ in copies if not source.is_file()]
    if missing:
        raise ConfigError(
            f"cannot bundle host {host!r}: missing {', '.join(map(str, missing))} (make "
            "certificates with `actorctl certs init DIR --node NAME ...` or `actorctl certs "
            "issue NAME --dir DIR`, keys with `actorctl keys gen NAME --dir DIR --member`)"
        )
    written = []
    for source, target, mode in copies:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        _write(target, source.read_bytes(), mode)
        written.append(target)
    return written


def _public_side(config: ClusterConfig, keys: Path) -> list[tuple[Path, Path, int]]:
    """Every public key of the keyring and its files without secrets; each node
    of the cluster must have its public key there (else no host would trust it).

    Raises:
        ConfigError: a node's public key is missing.
    """
    source = config.keys
    unknown = [n for n in config.member_names if not (source / f"{n}.pub").is_file()]
    if unknown:
        raise ConfigError(
            f"cannot bundle: {source} has no public key for {', '.join(unknown)} (`actorctl "
            f"keys gen NAME --dir {source} --member` on the machine that makes the keys)"
        )
    public: Iterable[Path] = sorted(source.glob("*.pub"))
    copies = [(path, keys / path.name, 0o644) for path in public]
    copies += [
        (p, keys / REVOKED / p.name, 0o644) for p in sorted((source / REVOKED).glob("*.pub"))
    ]
    copies += [(source / f, keys / f, 0o644) for f in _SHARED_FILES if (source / f).is_file()]
    return copies


def _refuse_operators(config: ClusterConfig, host: str, names: list[str]) -> None:
    """A bundle holds no operator's private key: refuse a host whose node's key
    the keyring's ``roles`` file makes an operator."""
    roles = read_roles(config.keys)
    operators = [name for name in names if roles.get(name) is Role.OPERATOR]
    if operators:
        first = operators[0]
        raise ConfigError(
            f"cannot bundle host {host!r}: the key of node {', '.join(operators)} has the "
            f"operator role in {config.keys / ROLES_FILE}, and a host's bundle holds no "
            "operator key (whoever took the host could stop or reload the whole cluster): "
            f"give it the member role (`actorctl keys add {config.keys / first}.pub --role "
            f"member --dir {config.keys}`)"
        )


def _refuse_filled(*directories: Path) -> None:
    """A bundle is written into empty directories only: never over (or beside)
    what another host's bundle left there."""
    for directory in directories:
        if directory.is_dir() and any(directory.iterdir()):
            raise ConfigError(
                f"{directory} is not empty: give --out a new directory (a bundle is "
                "written whole, never over another)"
            )


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as file:
        os.fchmod(fd, mode)
        file.write(data)
