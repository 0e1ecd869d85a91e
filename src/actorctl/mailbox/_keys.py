"""Ed25519 identity keys and their files (the keyring that holds them:
``_keyring.py``).

A key file is PEM: ``NAME.key`` an unencrypted PKCS#8 private key (mode 0600),
``NAME.pub`` a SubjectPublicKeyInfo public key. A keyring directory holds the
node's own ``NAME.key`` and a ``.pub`` for every key it trusts, and in its
``revoked/`` subdirectory the ``.pub`` of every key it must no longer trust; keep
it apart from the TLS directory, whose ``NAME.key`` files are TLS keys. Its
optional ``members`` file names (one per line) the keys of the cluster's own
nodes: a member that forwards a message may assert who sent it
(docs/protocol.md §11.4). Its optional ``roles`` file gives keys their roles
(operator, member, client: ``_roles.py``). A running node reads the directory
again when it changes (``cluster/_keywatch.py``).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import final

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from .._errors import ConfigError
from ._auth import AuthError
from ._conditions import BAD_SIGNATURE

__all__ = ["IdentityKey", "PublicKey", "key_id"]


_KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def key_id(raw_public_key: bytes) -> str:
    """A key's id: the first 16 hex digits of SHA-256 of its 32-byte raw public key."""
    return hashlib.sha256(raw_public_key).hexdigest()[:16]


@final
class PublicKey:
    """A trusted Ed25519 public key.

    Attributes:
        raw: the 32-byte raw public key.
        key_id: see :func:`key_id`; what ``sig_key`` carries.
        name: the name it was loaded under (the file's stem), for logs.
    """

    __slots__ = ("_key", "key_id", "name", "raw")

    def __init__(self, key: Ed25519PublicKey, name: str | None = None) -> None:
        self._key = key
        self.raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.key_id = key_id(self.raw)
        self.name = name

    def __repr__(self) -> str:
        return f"PublicKey(name={self.name!r}, key_id={self.key_id!r})"

    @classmethod
    def from_raw(cls, raw: bytes, name: str | None = None) -> PublicKey:
        """The key whose raw 32 bytes are ``raw``."""
        return cls(Ed25519PublicKey.from_public_bytes(raw), name)

    @classmethod
    def load(cls, path: Path) -> PublicKey:
        """Read a PEM (SubjectPublicKeyInfo) file; its stem becomes the name.

        Raises:
            ConfigError: naming the file: unreadable, not a key, not Ed25519.
        """
        data = _read_key_file(path)
        try:
            key = serialization.load_pem_public_key(data)
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise ConfigError(f"{path} is not a PEM public key: {exc}") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ConfigError(f"{path} holds a {_kind(key)} public key, not an Ed25519 one")
        return cls(key, path.stem)

    def pem(self) -> bytes:
        """The key as PEM (SubjectPublicKeyInfo)."""
        return self._key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def verify(self, signature: bytes, data: bytes) -> None:
        """Check an Ed25519 signature of ``data``.

        Raises:
            AuthError: ``actorctl:bad-signature`` if it does not match.
        """
        try:
            self._key.verify(signature, data)
        except InvalidSignature:
            raise AuthError(
                BAD_SIGNATURE, f"Ed25519 signature does not match key {self.key_id}"
            ) from None


@final
class IdentityKey:
    """A node's (or client's) own Ed25519 private key. Its repr shows no secret.

    Attributes:
        public: the matching :class:`PublicKey`.
        key_id: the public key's id.
    """

    __slots__ = ("_key", "key_id", "public")

    def __init__(self, key: Ed25519PrivateKey, name: str | None = None) -> None:
        self._key = key
        self.public = PublicKey(key.public_key(), name)
        self.key_id = self.public.key_id

    def __repr__(self) -> str:
        return f"IdentityKey(name={self.public.name!r}, key_id={self.key_id!r})"

    @classmethod
    def generate(cls, name: str | None = None) -> IdentityKey:
        """A fresh random key."""
        return cls(Ed25519PrivateKey.generate(), name)

    @classmethod
    def from_seed(cls, seed: bytes, name: str | None = None) -> IdentityKey:
        """The key whose 32-byte RFC 8032 seed is ``seed`` (for test vectors)."""
        return cls(Ed25519PrivateKey.from_private_bytes(seed), name)

    @classmethod
    def load(cls, path: Path) -> IdentityKey:
        """Read an unencrypted PEM (PKCS#8) private key; its stem becomes the name.

        Raises:
            ConfigError: naming the file: unreadable, not a key, encrypted, not Ed25519.
        """
        data = _read_key_file(path)
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
            raise ConfigError(
                f"{path} is not an unencrypted PEM private key: {exc}".rstrip()
            ) from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ConfigError(
                f"{path} holds a {_kind(key)} private key, not an Ed25519 identity key "
                "(a TLS key? keep identity keys in a directory of their own)"
            )
        return cls(key, path.stem)

    def save(self, directory: Path, name: str) -> tuple[Path, Path]:
        """Write ``NAME.key`` (mode 0600) and ``NAME.pub`` in ``directory``.

        Returns:
            the paths of the private and the public key file.

        Raises:
            ConfigError: a bad name, or either file exists already (keys are
                never overwritten).
        """
        if not _KEY_NAME.fullmatch(name):
            raise ConfigError(
                f"key name {name!r} must be letters, digits, '.', '_' or '-' "
                "and start with a letter or digit"
            )
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        private, public = directory / f"{name}.key", directory / f"{name}.pub"
        pem = self._key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        _write_new(private, pem, 0o600)
        _write_new(public, self.public.pem(), 0o644)
        return private, public

    def sign(self, data: bytes) -> bytes:
        """The 64-byte Ed25519 signature of ``data`` (deterministic)."""
        return self._key.sign(data)


def _kind(key: object) -> str:
    return type(key).__name__.removeprefix("_").removesuffix("PrivateKey").removesuffix("PublicKey")


def _read_key_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"key file {path} cannot be read: {exc.strerror or exc}") from None


def _write_new(path: Path, data: bytes, mode: int) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        raise ConfigError(f"{path} exists already: keys are never overwritten") from None
    with os.fdopen(fd, "wb") as file:
        os.fchmod(fd, mode)
        file.write(data)
