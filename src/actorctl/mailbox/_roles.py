"""Roles for keys: what each trusted identity is to the cluster, and where a
keyring directory says so.

Every trusted key has one role (docs/security.md tables what each may do):

- ``operator``: runs the cluster (the ``actorctl`` CLI, the Controller): it
  may stop, reload, revoke, purge and re-drive;
- ``member``: a node of the cluster: it hosts actors and forwards for others;
- ``client``: calls actors and gets its own replies, nothing more.

A keyring directory's ``roles`` file names them, one key a line: ``NAME ROLE``
(``#`` starts a comment). A key it does not name is a ``member`` if the
keyring's ``members`` file or the cluster's node names name it, else the
default its loader gives that name (the Controller's key is an operator), else
a ``client``: least privilege for what nobody granted more. A running node
reads the file again with the keys (``cluster/_keywatch.py``).
"""

from __future__ import annotations

import enum
import os
from pathlib import Path
from typing import Final

from .._errors import ConfigError

__all__ = ["ROLES_FILE", "Role", "parse_role", "read_roles", "weakest", "write_role"]

#: The file of a keyring directory that gives keys their roles.
ROLES_FILE: Final = "roles"


class Role(enum.StrEnum):
    """What a trusted key is to the cluster."""

    OPERATOR = "operator"
    MEMBER = "member"
    CLIENT = "client"


_RANK: Final = {Role.CLIENT: 0, Role.MEMBER: 1, Role.OPERATOR: 2}


def weakest(a: Role, b: Role) -> Role:
    """The lesser of two roles (client < member < operator): what a message a
    member forwards for another identity counts as, so that forwarding never
    raises anyone's role."""
    return a if _RANK[a] <= _RANK[b] else b


def parse_role(text: str, where: str = "role") -> Role:
    """The role ``text`` names.

    Raises:
        ConfigError: naming ``where``, the text and the roles there are.
    """
    try:
        return Role(text.strip().lower())
    except ValueError:
        known = ", ".join(r.value for r in Role)
        raise ConfigError(f"{where}: {text!r} is not a role (give one of: {known})") from None


def read_roles(directory: Path) -> dict[str, Role]:
    """The roles a keyring directory's ``roles`` file gives, by key name; none
    without the file.

    Raises:
        ConfigError: the file cannot be read, or a line is not ``NAME ROLE``.
    """
    path = directory / ROLES_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} cannot be read: {exc}") from None
    roles: dict[str, Role] = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.partition("#")[0].split()
        if not words:
            continue
        if len(words) != 2:
            raise ConfigError(
                f"{path}, line {number}: {line.strip()!r} is not 'NAME ROLE' "
                "(a key's name, then operator, member or client)"
            )
        roles[words[0]] = parse_role(words[1], f"{path}, line {number}")
    return roles


def write_role(directory: Path, name: str, role: Role) -> bool:
    """Give the key ``name`` the role ``role`` in the directory's ``roles`` file
    (made if missing), in one rename: a node never reads half a file.

    Returns:
        whether it changed anything.

    Raises:
        ConfigError: the file cannot be read or written.
    """
    path = directory / ROLES_FILE
    roles = read_roles(directory)
    if roles.get(name) == role:
        return False
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        kept = [line for line in text.splitlines() if line.partition("#")[0].split()[:1] != [name]]
        kept.append(f"{name} {role.value}")
        temporary = path.with_name(f".{ROLES_FILE}.{os.getpid()}.tmp")
        temporary.write_text("\n".join(kept) + "\n", encoding="utf-8")
        os.chmod(temporary, 0o644)
        os.rename(temporary, path)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} cannot be written: {exc}") from None
    return True
