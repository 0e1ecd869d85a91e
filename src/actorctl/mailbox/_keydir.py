"""Changing a keyring directory: trust a public key, revoke one.

What ``actorctl keys add`` and ``actorctl keys revoke`` do. A running node that
loaded its keyring from the directory sees the change within about a second
(``cluster/_keywatch.py``), so neither needs a restart. Each change is one
``rename`` in the directory, so a node never reads half a file:

- trusting a key writes ``NAME.pub`` (through a temporary file whose name does
  not end in ``.pub``);
- revoking one moves its ``.pub`` into ``revoked/``: a key there is never
  trusted, even if a copy of it comes back beside the others.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from .._errors import ConfigError
from ._keyring import REVOKED
from ._keys import _KEY_NAME, PublicKey

__all__ = ["KeyFile", "add_public_key", "find_key", "revoke_key"]


class KeyFile(NamedTuple):
    """A public key with the file it is in."""

    key: PublicKey
    path: Path


def add_public_key(directory: Path, source: Path, name: str | None = None) -> tuple[KeyFile, bool]:
    """Trust the Ed25519 public key in ``source``: write it as ``NAME.pub`` in
    the keyring ``directory`` (``NAME`` is the file's stem unless given).

    Returns:
        the key as written, and whether it was new (False: that very key was
        trusted under that name already, and nothing changed).

    Raises:
        ConfigError: ``source`` is not an Ed25519 public key; a bad name; the
            name holds another key; the key is trusted under another name; or
            it was revoked (a revoked key is not trusted again).
    """
    key = PublicKey.load(source)
    name = name or source.stem
    if not _KEY_NAME.fullmatch(name):
        raise ConfigError(
            f"key name {name!r} must be letters, digits, '.', '_' or '-' "
            "and start with a letter or digit"
        )
    if not directory.is_dir():
        raise ConfigError(
            f"keyring {directory} is not a directory (`actorctl keys gen NAME --dir "
            f"{directory}` makes one)"
        )
    revoked = find_key(directory / REVOKED, key.key_id)
    if revoked is not None:
        raise ConfigError(
            f"key {key.key_id} was revoked ({revoked.path}): a revoked key is not trusted "
            "again; make a new key (`actorctl keys gen`), or delete that file if it was "
            "revoked by mistake"
        )
    target = directory / f"{name}.pub"
    present = find_key(directory, key.key_id)
    if present is not None and present.path != target:
        raise ConfigError(f"key {key.key_id} is trusted already, as {present.path}")
    if target.exists():
        held = _load(target)
        if held.key.key_id == key.key_id:
            return held, False
        raise ConfigError(
            f"{target} holds another key ({held.key.key_id}): revoke it first "
            f"(`actorctl keys revoke {name}`) or choose another --name"
        )
    _write_then_rename(target, key.pem(), 0o644)
    return _load(target), True


def revoke_key(directory: Path, which: str) -> tuple[KeyFile, bool]:
    """Stop trusting the key that ``which`` names (a name, ``NAME.pub``'s stem,
    or a key id): move its ``.pub`` into ``directory/revoked/``.

    Returns:
        the key as it is now filed, and whether this revoked it (False: it was
        revoked already).

    Raises:
        ConfigError: no key in the directory (or in ``revoked/``) has that name
            or id, naming the keys there.
    """
    if not directory.is_dir():
        raise ConfigError(
            f"keyring {directory} is not a directory "
            f"(`actorctl keys gen NAME --dir {directory}` makes one)"
        )
    revoked_dir = directory / REVOKED
    found = find_key(directory, which)
    if found is None:
        already = find_key(revoked_dir, which)
        if already is not None:
            return already, False
        known = ", ".join(f"{k.path.stem} ({k.key.key_id})" for k in _keys_in(directory))
        raise ConfigError(
            f"keyring {directory} has no key named {which!r} or with that key id "
            f"(it has: {known or 'none'})"
        )
    revoked_dir.mkdir(mode=0o700, exist_ok=True)
    target = revoked_dir / found.path.name
    if target.exists():  # another key of that name was revoked before
        target = revoked_dir / f"{found.path.stem}.{found.key.key_id}.pub"
    os.rename(found.path, target)
    return KeyFile(found.key, target), True


def find_key(directory: Path, which: str) -> KeyFile | None:
    """The key in ``directory`` named ``which`` (the stem of its ``.pub``) or
    whose key id is ``which``, or None."""
    if not directory.is_dir():
        return None
    named = directory / f"{which}.pub"
    if _KEY_NAME.fullmatch(which) and named.is_file():
        return _load(named)
    for found in _keys_in(directory):
        if found.key.key_id == which:
            return found
    return None


def _keys_in(directory: Path) -> list[KeyFile]:
    found = []
    for path in sorted(directory.glob("*.pub")):
        try:
            found.append(_load(path))
        except ConfigError:
            continue  # not a key: nothing to find in it
    return found


def _load(path: Path) -> KeyFile:
    return KeyFile(PublicKey.load(path), path)


def _write_then_rename(path: Path, data: bytes, mode: int) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as file:
        os.fchmod(fd, mode)
        file.write(data)
    os.rename(temporary, path)
