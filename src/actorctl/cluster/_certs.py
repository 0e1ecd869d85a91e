"""Development certificates: a cluster CA and one certificate per node, by trustme.

The files are what :meth:`TlsFiles.from_dir` reads: ``ca.pem`` and ``ca.key``
(the CA's certificate and key), then ``<name>.pem`` (the node's certificate
chain) and ``<name>.key`` (its key) per node. Keys are written with mode 0600.
trustme makes throwaway CAs for development and tests: production clusters
bring certificates from their own CA.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import trustme

from .._errors import ConfigError

__all__ = ["init_certs"]

# A node name is also a DNS name in its certificate (trustme refuses '_' and spaces).
_NODE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?")
_CA_FILES = ("ca.pem", "ca.key")


def init_certs(directory: Path, node_names: list[str]) -> None:
    """Make a development CA and a certificate for each node in ``directory``.

    Each node's certificate names ``127.0.0.1``, ``localhost`` and the node
    name. Files that exist are never overwritten: with every file present this
    does nothing, and with the CA present it issues certificates only for the
    nodes that have none yet (a cluster that grows keeps its CA).

    Raises:
        ConfigError: a node name that cannot be a file and DNS name, or a partial
            set (a certificate without its key, nodes without a CA, ...), naming
            the files; remove them, or the directory, and run again.
    """
    names = _check_names(node_names)
    directory = Path(directory)
    missing_nodes = [name for name in names if not _complete(directory, _node_files(name))]
    has_ca = _complete(directory, _CA_FILES)
    if has_ca and not missing_nodes:
        return
    _refuse_partial(directory, names, has_ca)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if has_ca:
        ca = _load_ca(directory)
    else:
        ca = trustme.CA(organization_name="actorctl development CA")
        _write(directory / "ca.pem", ca.cert_pem.bytes(), 0o644)
        _write(directory / "ca.key", ca.private_key_pem.bytes(), 0o600)
    for name in missing_nodes:
        cert = ca.issue_cert(*dict.fromkeys(("127.0.0.1", "localhost", name)), common_name=name)
        chain = b"".join(blob.bytes() for blob in cert.cert_chain_pems)
        _write(directory / f"{name}.pem", chain, 0o644)
        _write(directory / f"{name}.key", cert.private_key_pem.bytes(), 0o600)


def _check_names(node_names: list[str]) -> list[str]:
    if not node_names:
        raise ConfigError("no node names given: a certificate is made for each node")
    for name in node_names:
        if not _NODE_NAME.fullmatch(name) or name == "ca":
            raise ConfigError(
                f"node name {name!r} cannot name a certificate: use letters, digits, '-' "
                "and '.', starting and ending with a letter or digit (and not 'ca')"
            )
    return list(dict.fromkeys(node_names))


def _node_files(name: str) -> tuple[str, str]:
    return f"{name}.pem", f"{name}.key"


def _complete(directory: Path, files: tuple[str, ...]) -> bool:
    return all((directory / name).is_file() for name in files)


def _refuse_partial(directory: Path, names: list[str], has_ca: bool) -> None:
    """Files that belong to no complete set: a certificate without its key, or
    node files without the CA that issued them."""
    node_files = [_node_files(name) for name in names]
    allowed = set(_CA_FILES) if has_ca else set()
    if has_ca:
        allowed.update(f for files in node_files if _complete(directory, files) for f in files)
    stray = [
        directory / file
        for files in (_CA_FILES, *node_files)
        for file in files
        if file not in allowed and (directory / file).exists()
    ]
    if stray:
        listed = ", ".join(str(path) for path in stray)
        raise ConfigError(
            f"{directory} holds an incomplete set of certificates ({listed} without the rest): "
            "remove those files, or the directory, and run again"
        )


def _load_ca(directory: Path) -> trustme.CA:
    try:
        return trustme.CA.from_pem(
            (directory / "ca.pem").read_bytes(), (directory / "ca.key").read_bytes()
        )
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"the CA in {directory} (ca.pem, ca.key) cannot be read: {exc}") from None


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write a new file with ``mode`` (never over an existing one)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as file:
        os.fchmod(fd, mode)
        file.write(data)
