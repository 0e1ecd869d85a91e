"""Identity keys for tests: one keyring directory that every named node trusts."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from actorctl.mailbox import IdentityKey, Keyring, Role
from actorctl.mailbox._roles import write_role


def make_keys(
    directory: Path, *names: str, roles: Mapping[str, Role] | None = None
) -> dict[str, Keyring]:
    """A key pair per name in ``directory``; each keyring signs as its name and
    trusts every public key there. ``roles``: the roles its roles file gives
    (a key it does not name is a client to the others)."""
    for name in names:
        IdentityKey.generate(name).save(directory, name)
    for name, role in (roles or {}).items():
        write_role(directory, name, role)
    return {name: Keyring.load(directory, name) for name in names}
