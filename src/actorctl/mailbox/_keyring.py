"""The keyring a node loads at start, and reads again when it changes.

A keyring directory holds the node's own ``NAME.key`` and a ``.pub`` for every
key it trusts (``_keys.py``), and in its ``revoked/`` subdirectory the ``.pub``
of every key it must no longer trust; keep it apart from the TLS directory,
whose ``NAME.key`` files are TLS keys. Its optional ``members`` file names (one
per line) the keys of the cluster's own nodes: a member that forwards a message
may assert who sent it (docs/protocol.md §11.4). Its optional ``roles`` file
gives keys their roles (operator, member, client: ``_roles.py``). A running node
reads the directory again when it changes (``cluster/_keywatch.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, final

from .._errors import ConfigError
from ._keys import IdentityKey, PublicKey
from ._roles import Role, read_roles

__all__ = [
    "MEMBERS_FILE",
    "REVOKED",
    "Keyring",
    "KeyringChange",
    "add_member",
    "members_file",
    "read_public_keys",
]

#: The file of a keyring directory that names the cluster members' keys.
MEMBERS_FILE = "members"


@final
class Keyring:
    """The node's own identity key, the public keys it trusts, and which of
    those are cluster members.

    Args:
        identity: the node's private key; its public key is trusted too
            (unless it is revoked), and a member.
        trusted: the public keys whose signatures are accepted.
        members: key ids of trusted keys that belong to the cluster's own nodes
            (routers among them): their role is ``member`` unless ``roles``
            says otherwise, and a message they sign may assert its origin
            (``origin-key``, docs/protocol.md §11.4).
        revoked: keys that are never trusted, even where ``trusted`` names them.
        directory: the directory it was loaded from (what :meth:`reload` reads
            again), or None.
        member_names: the cluster's node names: their keys are members.
        roles: the roles given explicitly (a ``roles`` file), by key id; they
            win over ``members`` and the defaults.
        operator_names: key names that are operators unless ``roles`` says
            otherwise (the Controller's key). Any other key is a ``client``.

    Attributes:
        generation: goes up by one at each change of what is trusted, so that
            whoever caches the keys (a :class:`Verifier`) sees the change.
    """

    def __init__(
        self,
        identity: IdentityKey,
        trusted: Iterable[PublicKey] = (),
        members: Iterable[str] = (),
        *,
        revoked: Iterable[PublicKey] = (),
        directory: Path | None = None,
        member_names: Iterable[str] = (),
        roles: Mapping[str, Role] | None = None,
        operator_names: Iterable[str] = (),
    ) -> None:
        self.identity = identity
        self.directory = directory
        self.generation = 0
        #: Asked when a message names a key it does not know: a directory's
        #: watch looks at once (a key just added), and says whether it changed.
        self.on_unknown: Callable[[], bool] | None = None
        self._member_names = tuple(member_names)
        self._operator_names = frozenset(operator_names)
        self._explicit: dict[str, Role] = dict(roles or {})
        self._revoked = {key.key_id: key for key in revoked}
        self._trusted = self._without_revoked((identity.public, *trusted))
        self._members = frozenset({identity.key_id, *members})
        self._roles: dict[str, Role] = {}
        self.members: frozenset[str] = frozenset()
        self._resolve_roles()

    def __repr__(self) -> str:
        return (
            f"Keyring(identity={self.identity!r}, trusted={len(self._trusted)} keys, "
            f"members={len(self.members)})"
        )

    @classmethod
    def load(
        cls,
        path: Path | str,
        name: str | None = None,
        *,
        members: Iterable[str] = (),
        operators: Iterable[str] = (),
    ) -> Keyring:
        """Load a keyring directory: every ``*.pub`` in it is trusted, except the
        keys in its ``revoked/`` subdirectory, and the identity is ``NAME.key``
        (or the only ``*.key`` there is, without a name). The members are the
        keys its ``members`` file names (key names, one per line; ``#`` starts a
        comment) and those named in ``members`` (a cluster's node names: names
        with no ``.pub`` here are skipped). Its ``roles`` file gives roles
        explicitly (``_roles.py``); a key it does not name is a member (as
        above), an operator if ``operators`` names it, else a client.

        Raises:
            ConfigError: naming the directory or file and what is wrong.
        """
        directory = Path(path)
        if not directory.is_dir():
            raise ConfigError(
                f"keyring {directory} is not a directory "
                f"(`actorctl keys gen NAME --dir {directory}` makes one)"
            )
        identity = IdentityKey.load(_identity_file(directory, name))
        trusted = [PublicKey.load(p) for p in sorted(directory.glob("*.pub"))]
        revoked = [PublicKey.load(p) for p in sorted((directory / REVOKED).glob("*.pub"))]
        members = tuple(members)
        named = _member_ids(directory, trusted, members)
        roles, _ = _role_ids(directory, trusted, revoked)
        return cls(
            identity,
            trusted,
            named,
            revoked=revoked,
            directory=directory,
            member_names=members,
            roles=roles,
            operator_names=operators,
        )

    def trusted(self, key_id: str) -> PublicKey | None:
        """The trusted key with that id, or None."""
        return self._trusted.get(key_id)

    def revoked(self, key_id: str) -> PublicKey | None:
        """The revoked key with that id, or None."""
        return self._revoked.get(key_id)

    def is_member(self, key_id: str) -> bool:
        """Whether the key belongs to one of the cluster's own nodes."""
        return key_id in self.members

    def role(self, key_id: str) -> Role:
        """The role of a trusted key; ``client`` for any other key id (an
        origin a member asserts may name a key this node does not hold)."""
        return self._roles.get(key_id, Role.CLIENT)

    def roles(self) -> dict[str, Role]:
        """Every trusted key's role, by key id."""
        return dict(self._roles)

    def _resolve_roles(self) -> None:
        """Each trusted key's role: given explicitly, else a member, else an
        operator by name, else a client; the members are the keys whose role
        is member, and the node's own key."""
        roles: dict[str, Role] = {}
        for key_id, key in self._trusted.items():
            role = self._explicit.get(key_id)
            if role is None:
                if key_id in self._members:
                    role = Role.MEMBER
                elif key.name is not None and key.name in self._operator_names:
                    role = Role.OPERATOR
                else:
                    role = Role.CLIENT
            roles[key_id] = role
        self._roles = roles
        members = {key_id for key_id, role in roles.items() if role is Role.MEMBER}
        if self.identity.key_id in self._trusted:
            members.add(self.identity.key_id)  # it may always speak for itself
        self.members = frozenset(members)

    def public_keys(self) -> list[PublicKey]:
        """Every trusted key, by name."""
        return sorted(self._trusted.values(), key=lambda k: (k.name or "", k.key_id))

    def replace(
        self,
        trusted: Iterable[PublicKey],
        revoked: Iterable[PublicKey],
        members: Iterable[str] | None = None,
        roles: Mapping[str, Role] | None = None,
    ) -> KeyringChange:
        """Trust ``trusted`` (and the identity) minus ``revoked`` from now on;
        what :meth:`reload` does with what it read. ``members`` and ``roles``
        (explicit roles by key id): None keeps them as they are.

        Returns:
            what changed; :attr:`generation` goes up if anything did.
        """
        before, before_revoked, before_members = self._trusted, self._revoked, self.members
        before_roles = self._roles
        self._revoked = now_revoked = {key.key_id: key for key in revoked}
        self._trusted = now = self._without_revoked((self.identity.public, *trusted))
        if members is not None:
            self._members = frozenset({self.identity.key_id, *members})
        if roles is not None:
            self._explicit = dict(roles)
        self._resolve_roles()
        change = KeyringChange(
            added=[k for kid, k in now.items() if kid not in before],
            removed=[k for kid, k in before.items() if kid not in now and kid not in now_revoked],
            revoked=[k for kid, k in now_revoked.items() if kid not in before_revoked],
        )
        if (
            change
            or self._revoked.keys() != before_revoked.keys()
            or self.members != before_members
            or self._roles != before_roles
        ):
            self.generation += 1
        return change

    def name_members(self, names: Iterable[str]) -> None:
        """The cluster's node names from now on (its file was reloaded): their
        keys are members once the directory is read again (:meth:`reload`)."""
        self._member_names = tuple(names)

    def reload(self) -> tuple[KeyringChange, list[str]]:
        """Read the directory again (see :meth:`load`) and trust what it holds now.

        A file that cannot be read or is not an Ed25519 public key is left out
        (a copy still being written, say) and named in the problems; the
        identity key is not read again.

        Returns:
            what changed, and the problems found (one sentence each).

        Raises:
            ConfigError: the keyring was not loaded from a directory, or the
                directory cannot be listed (nothing is changed then).
        """
        if self.directory is None:
            raise ConfigError("this keyring was not loaded from a directory: nothing to reload")
        trusted, revoked, problems = read_public_keys(self.directory)
        try:
            members: list[str] | None = self.member_ids(trusted)
        except ConfigError as exc:
            problems.append(str(exc))
            members = None  # the members file is unreadable: keep the members as they are
        roles = self.role_ids(trusted, revoked, problems)
        return self.replace(trusted, revoked, members, roles), problems

    def role_ids(
        self, trusted: list[PublicKey], revoked: list[PublicKey], problems: list[str]
    ) -> dict[str, Role] | None:
        """The roles its directory's ``roles`` file gives the keys among
        ``trusted``, by key id; None (keep the roles as they are) when the file
        cannot be read or has a bad line. What is wrong goes into ``problems``."""
        if self.directory is None:
            return dict(self._explicit)
        try:
            roles, unknown = _role_ids(self.directory, trusted, revoked)
        except ConfigError as exc:
            problems.append(str(exc))
            return None
        problems.extend(unknown)
        return roles

    def member_ids(self, trusted: list[PublicKey]) -> list[str]:
        """The key ids among ``trusted`` that its directory's ``members`` file and
        the member names it was loaded with name.

        Raises:
            ConfigError: the members file cannot be read, or names an unknown key.
        """
        if self.directory is None:
            return sorted(self._members)
        return _member_ids(self.directory, trusted, self._member_names)

    def _without_revoked(self, keys: Iterable[PublicKey]) -> dict[str, PublicKey]:
        return {key.key_id: key for key in keys if key.key_id not in self._revoked}


#: The subdirectory of a keyring that holds the revoked keys' ``.pub`` files.
REVOKED: Final = "revoked"


@final
@dataclass(frozen=True)
class KeyringChange:
    """What a reload changed: keys trusted now that were not, keys no longer in
    the directory, and keys revoked since."""

    added: list[PublicKey]
    removed: list[PublicKey]
    revoked: list[PublicKey]

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.revoked)


def read_public_keys(directory: Path) -> tuple[list[PublicKey], list[PublicKey], list[str]]:
    """The ``*.pub`` keys of a keyring directory and of its ``revoked/``. A file
    of the directory that is not a key is left out and described; one in
    ``revoked/`` is an error (leaving it out would trust that key again).

    Raises:
        ConfigError: either directory cannot be listed, or a file in
            ``revoked/`` is not a key.
    """

    def listed(folder: Path) -> list[Path]:
        try:
            return sorted(folder / name for name in os.listdir(folder) if name.endswith(".pub"))
        except OSError as exc:
            raise ConfigError(f"keyring {folder} cannot be read: {exc.strerror or exc}") from None

    trusted, problems = [], []
    for path in listed(directory):
        try:
            trusted.append(PublicKey.load(path))
        except ConfigError as exc:
            problems.append(str(exc))
    revoked_dir = directory / REVOKED
    revoked = [PublicKey.load(p) for p in listed(revoked_dir)] if revoked_dir.is_dir() else []
    return trusted, revoked, problems


def _member_ids(directory: Path, trusted: list[PublicKey], names: Iterable[str]) -> list[str]:
    by_name = {key.name: key.key_id for key in trusted}
    ids = members_file(directory / MEMBERS_FILE, by_name)
    ids.extend(by_name[n] for n in names if n in by_name)
    return ids


def _role_ids(
    directory: Path, trusted: list[PublicKey], revoked: list[PublicKey]
) -> tuple[dict[str, Role], list[str]]:
    """The roles the directory's ``roles`` file gives, by key id, and a
    sentence for each name in it that is no key of the directory (a revoked
    key's line is no mistake: it is skipped quietly).

    Raises:
        ConfigError: the file cannot be read, or a line is not ``NAME ROLE``.
    """
    by_name = {key.name: key.key_id for key in trusted}
    gone = {key.name for key in revoked}
    roles, unknown = {}, []
    for name, role in read_roles(directory).items():
        if name in by_name:
            roles[by_name[name]] = role
        elif name not in gone:
            unknown.append(
                f"{directory / 'roles'}: {name!r} is not a key of this keyring "
                f"(it needs {name}.pub beside the file): its role {role.value} is ignored"
            )
    return roles, unknown


def members_file(path: Path, by_name: Mapping[str | None, str]) -> list[str]:
    """What ``by_name`` maps the names in a keyring's ``members`` file to (key ids),
    in order; none if there is no file.

    Raises:
        ConfigError: the file cannot be read, or names a key ``by_name`` lacks.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} cannot be read: {exc}") from None
    ids = []
    for number, line in enumerate(text.splitlines(), 1):
        member = line.partition("#")[0].strip()
        if not member:
            continue
        if member not in by_name:
            raise ConfigError(
                f"{path}, line {number}: {member!r} is not a key of this keyring "
                f"(it needs {member}.pub beside the file)"
            )
        ids.append(by_name[member])
    return ids


def add_member(directory: Path, name: str) -> None:
    """Name ``name`` in the keyring's ``members`` file (made if missing)."""
    path = directory / MEMBERS_FILE
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        if name in (line.partition("#")[0].strip() for line in text.splitlines()):
            return
        path.write_text(text + ("" if not text or text.endswith("\n") else "\n") + name + "\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} cannot be written: {exc}") from None


def _identity_file(directory: Path, name: str | None) -> Path:
    if name is not None:
        path = directory / f"{name}.key"
        if not path.is_file():
            raise ConfigError(f"keyring {directory} has no private key {path.name}")
        return path
    found = sorted(directory.glob("*.key"))
    if not found:
        raise ConfigError(f"keyring {directory} holds no private key (NAME.key)")
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        raise ConfigError(
            f"keyring {directory} holds {len(found)} private keys ({names}): "
            "name the one this node signs with"
        )
    return found[0]
