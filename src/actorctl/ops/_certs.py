"""Certificates: a development cluster CA (trustme), and certificates it issues.

The files are what :meth:`TlsFiles.from_dir` reads: ``ca.pem`` and ``ca.key``
(the CA's certificate and key), then ``<name>.pem`` (the node's certificate
chain) and ``<name>.key`` (its key) per node. Keys are written with mode 0600.
trustme makes throwaway CAs for development and tests (:func:`init_certs`);
:func:`issue_cert` signs a certificate for one more node or client with a CA
that exists already (any CA key that ``cryptography`` reads: EC, RSA, Ed25519),
so that a cluster grows without signing by hand. Production clusters may
bring certificates from their own CA instead.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from collections.abc import Iterable
from pathlib import Path

import trustme
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .._errors import ConfigError

__all__ = ["init_certs", "issue_cert"]

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


_SigningKey = (
    ec.EllipticCurvePrivateKey
    | rsa.RSAPrivateKey
    | ed25519.Ed25519PrivateKey
    | ed448.Ed448PrivateKey
)


def issue_cert(
    directory: Path,
    name: str,
    *,
    out: Path | None = None,
    hosts: Iterable[str] = (),
    days: int = 365,
    force: bool = False,
) -> tuple[Path, Path]:
    """Sign a certificate for ``name`` with the CA in ``directory`` (``ca.pem``
    and ``ca.key``, as :func:`init_certs` writes them), with a fresh key.

    The certificate names ``127.0.0.1``, ``localhost``, ``name`` and ``hosts``
    and serves both ends of a mutual TLS connection (a node, or a client that
    only dials). ``NAME.pem`` and ``NAME.key`` go to ``out`` (by default
    ``directory``), with a copy of ``ca.pem`` if ``out`` has none: the
    directory a client is given.

    Returns:
        the certificate's path and the key's.

    Raises:
        ConfigError: no CA in ``directory``; a CA key that cannot be read (or
            does not match ``ca.pem``); a bad name or host; ``NAME.pem`` or
            ``NAME.key`` in ``out`` already (unless ``force``); another CA's
            ``ca.pem`` in ``out``.
    """
    directory = Path(directory)
    out = directory if out is None else Path(out)
    [name] = _check_names([name])
    if days < 1:
        raise ConfigError(f"--days {days}: a certificate is valid for at least one day")
    names = _subject_names([*dict.fromkeys(("127.0.0.1", "localhost", name, *hosts))])
    ca_pem, ca_cert, ca_key = _read_ca(directory)
    cert_path, key_path = out / f"{name}.pem", out / f"{name}.key"
    existing = [str(p) for p in (cert_path, key_path) if p.exists()]
    if existing and not force:
        raise ConfigError(
            f"{' and '.join(existing)} exist already: {name!r} has a certificate "
            "(pass --force to issue a new one in its place, or choose another name)"
        )
    out_ca = out / "ca.pem"
    if out_ca.exists() and out_ca.read_bytes() != ca_pem:
        raise ConfigError(
            f"{out_ca} is not the CA of {directory}: a certificate issued there would not "
            "be trusted with it; choose another --out directory"
        )
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=True,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    hash_algorithm = (
        None
        if isinstance(ca_key, ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey)
        else hashes.SHA256()
    )
    signed = cert.sign(ca_key, hash_algorithm)
    out.mkdir(mode=0o700, parents=True, exist_ok=True)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _replace(key_path, key_pem, 0o600)
    _replace(cert_path, signed.public_bytes(serialization.Encoding.PEM), 0o644)
    if not out_ca.exists():
        _write(out_ca, ca_pem, 0o644)
    return cert_path, key_path


def _subject_names(hosts: list[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            if not _NODE_NAME.fullmatch(host):
                raise ConfigError(
                    f"host {host!r} is neither an IP address nor a DNS name"
                ) from None
            names.append(x509.DNSName(host))
    return names


def _read_ca(directory: Path) -> tuple[bytes, x509.Certificate, _SigningKey]:
    """The CA's certificate (as read, and parsed) and key, checked to match."""
    cert_file, key_file = directory / "ca.pem", directory / "ca.key"
    if not cert_file.is_file() or not key_file.is_file():
        missing = " and ".join(str(p) for p in (cert_file, key_file) if not p.is_file())
        raise ConfigError(
            f"no CA in {directory}: {missing} missing. `actorctl certs init {directory} "
            "--node NAME` makes one; a cluster whose certificates come from another CA "
            "has them signed there"
        )
    try:
        ca_pem = cert_file.read_bytes()
        ca_cert = x509.load_pem_x509_certificate(ca_pem)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"the CA certificate {cert_file} cannot be read: {exc}") from None
    try:
        ca_key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    except (OSError, ValueError, TypeError, UnsupportedAlgorithm) as exc:
        detail = getattr(exc, "strerror", None) or exc
        raise ConfigError(
            f"the CA key {key_file} cannot be read: {detail} (it must be an unencrypted "
            "PEM private key)"
        ) from None
    if not isinstance(
        ca_key,
        ec.EllipticCurvePrivateKey
        | rsa.RSAPrivateKey
        | ed25519.Ed25519PrivateKey
        | ed448.Ed448PrivateKey,
    ):
        raise ConfigError(f"the CA key {key_file} is a {type(ca_key).__name__}: it cannot sign")
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    if ca_key.public_key().public_bytes(
        serialization.Encoding.DER, public
    ) != ca_cert.public_key().public_bytes(serialization.Encoding.DER, public):
        raise ConfigError(f"the CA key {key_file} does not belong to the certificate {cert_file}")
    return ca_pem, ca_cert, ca_key


def _replace(path: Path, data: bytes, mode: int) -> None:
    """Write ``path`` anew (over an existing file, through a rename)."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.unlink(missing_ok=True)
    _write(temporary, data, mode)
    os.rename(temporary, path)
