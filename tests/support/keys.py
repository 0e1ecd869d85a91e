"""Identity keys for tests: one keyring directory that every named node trusts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from actorctl.mailbox import IdentityKey, Keyring, Role
from actorctl.mailbox._keyring import MEMBERS_FILE
from actorctl.mailbox._roles import write_role

#: How long a keyring change may take to apply (a node looks every second).
APPLIES_WITHIN = 10.0


def make_keys(
    directory: Path,
    *names: str,
    roles: Mapping[str, Role] | None = None,
    members: Iterable[str] | None = None,
) -> dict[str, Keyring]:
    """A key pair per name in ``directory``; each keyring signs as its name and
    trusts every public key there. ``roles``: the roles its roles file gives
    (a key it does not name is a client to the others); ``members``: the names
    its members file lists, if it is to have one."""
    for name in names:
        IdentityKey.generate(name).save(directory, name)
    if members is not None:
        (directory / MEMBERS_FILE).write_text("".join(f"{m}\n" for m in members))
    for name, role in (roles or {}).items():
        write_role(directory, name, role)
    return {name: Keyring.load(directory, name) for name in names}
