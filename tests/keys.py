"""Identity keys for tests: one keyring directory that every named node trusts."""

from __future__ import annotations

from pathlib import Path

from actorctl.mailbox import IdentityKey, Keyring


def make_keys(directory: Path, *names: str) -> dict[str, Keyring]:
    """A key pair per name in ``directory``; each keyring signs as its name and
    trusts every public key there."""
    for name in names:
        IdentityKey.generate(name).save(directory, name)
    return {name: Keyring.load(directory, name) for name in names}
