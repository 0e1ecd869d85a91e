"""A running node watches its keyring directory: keys added or revoked apply
within about a second, with no restart; a message signed by a key the node does
not know makes it look at once (at most every ``LOOK_AGAIN`` seconds), so a key
just added is trusted at its first message.

Every ``interval`` seconds the node lists the directory and its ``revoked/``
subdirectory and compares the ``.pub`` files and the ``members`` and ``roles``
files (name, size, modification time, inode) with what it saw last: a few
``stat`` calls, off the event loop's thread.
When they differ, it reads the keys again (:meth:`Keyring.reload`) and swaps
them in on the event loop's thread; every verifier picks the new keys up on its
next message and drops the sessions of keys no longer trusted.

The directory is the one source of truth on one machine: nodes that share it
(a cluster run by ``actorctl cluster up``) all see a change. A cluster on
several hosts distributes the directory to each (configuration management, a
synchronised folder); etcd is for a later version.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Final, final

import trio

from .._errors import ConfigError
from .._log import log
from .._threads import run_sync
from ..mailbox import Keyring, PublicKey
from ..mailbox._keyring import MEMBERS_FILE, REVOKED, KeyringChange, read_public_keys
from ..mailbox._roles import ROLES_FILE

__all__ = ["KEY_POLL", "KeyringWatch"]

#: Seconds between two looks at a keyring directory.
KEY_POLL: Final = 1.0
#: The least time (s) between two looks asked by messages signed by unknown keys.
LOOK_AGAIN: Final = 0.1

_Listing = tuple[tuple[str, int, int, int], ...]


@final
class KeyringWatch:
    """Reloads a keyring whenever its directory changes (run :meth:`run`).

    Args:
        keyring: loaded from a directory (``Keyring.load``).
        node: the node's name, for the logs.
        interval: seconds between two looks at the directory.
    """

    def __init__(self, keyring: Keyring, *, node: str, interval: float = KEY_POLL) -> None:
        if keyring.directory is None:
            raise ConfigError(f"node {node!r}: its keyring was not loaded from a directory")
        self.keyring = keyring
        self.directory = keyring.directory
        self.node = node
        self.interval = interval
        self._changed = trio.Event()
        self._last: _Listing = ()  # the directory as it was at the last look
        self._looked = -math.inf  # when a message's unknown key last made it look
        keyring.on_unknown = self.look_now

    async def wait_changed(self, generation: int) -> None:
        """Return once the keyring's ``generation`` is past ``generation`` (read
        it before changing the directory)."""
        while self.keyring.generation <= generation:
            await self._changed.wait()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Look at the directory every ``interval`` seconds, until cancelled.

        A directory that cannot be listed (gone, or no permission) keeps the
        keys the node has, and is logged once until it can be read again.
        """
        directory = self.directory
        self._last = await run_sync(_listing, directory)
        task_status.started()
        failing = False
        while True:
            await trio.sleep(self.interval)
            try:
                now = await run_sync(_listing, directory)
                if now == self._last:
                    failing = False
                    continue
                # Read off the loop's thread, swap in on it: a verifier sees
                # one set of keys or the other.
                trusted, revoked, problems = await run_sync(read_public_keys, directory)
            except (OSError, ConfigError) as exc:
                if not failing:
                    log(
                        "actorctl:keyring:unreadable",
                        node=self.node,
                        directory=str(directory),
                        error=str(exc),
                        kept="the keys read last",
                    )
                failing = True
                continue
            failing = False
            self._last = now
            self._swap(trusted, revoked, problems)

    def look_now(self) -> bool:
        """Look at the directory at once, on the event loop's thread, and swap
        in what changed; whether anything did. Asked by a verifier that met a
        key it does not know; at most once per ``LOOK_AGAIN`` seconds, so that
        messages signed by unknown keys cannot keep the loop at the disk (a
        listing is a few ``stat`` calls of a local directory)."""
        now = trio.current_time()
        if now - self._looked < LOOK_AGAIN:
            return False
        self._looked = now
        try:
            listing = _listing(self.directory)
            if listing == self._last:
                return False
            trusted, revoked, problems = read_public_keys(self.directory)
        except (OSError, ConfigError):
            return False  # the watch's next look logs it
        self._last = listing
        generation = self.keyring.generation
        self._swap(trusted, revoked, problems)
        return self.keyring.generation != generation

    async def refresh(self) -> None:
        """Read the directory now and swap in what changed (``cluster reload``
        asks it, so that a node added to the cluster is trusted at once).

        Raises:
            ConfigError: the directory cannot be read (the keys stay as they are).
        """
        try:
            trusted, revoked, problems = await run_sync(read_public_keys, self.directory)
        except OSError as exc:
            raise ConfigError(
                f"keyring directory {self.directory} cannot be read: {exc.strerror or exc}"
            ) from None
        self._swap(trusted, revoked, problems)

    def _swap(
        self,
        trusted: list[PublicKey],
        revoked: list[PublicKey],
        problems: list[str],
    ) -> None:
        try:
            members: list[str] | None = self.keyring.member_ids(trusted)
        except ConfigError as exc:
            problems.append(str(exc))
            members = None  # an unreadable members file: the members stay as they are
        roles = self.keyring.role_ids(trusted, revoked, problems)
        change = self.keyring.replace(trusted, revoked, members, roles)
        _report(self.node, self.keyring, change, problems)
        self._changed.set()
        self._changed = trio.Event()


def _report(node: str, keyring: Keyring, change: KeyringChange, problems: list[str]) -> None:
    for problem in problems:
        log("actorctl:keyring:bad-file", node=node, error=problem, skipped=True)
    if not change:
        return
    log(
        "actorctl:keyring:changed",
        node=node,
        added=_named(change.added),
        removed=_named(change.removed),
        revoked=_named(change.revoked),
        generation=keyring.generation,
    )
    if keyring.revoked(keyring.identity.key_id) is not None:
        log(
            "actorctl:keyring:own-key-revoked",
            node=node,
            key=keyring.identity.key_id,
            warning="this node's own key is revoked: nodes that watch the keyring "
            "refuse what it signs; give it a new key and restart it",
        )


def _named(keys: list[PublicKey]) -> list[str]:
    return [f"{key.name} ({key.key_id})" for key in keys]


def _listing(directory: Path) -> _Listing:
    """What identifies the keyring's files as they are now."""
    entries = []
    for folder, prefix in ((directory, ""), (directory / REVOKED, f"{REVOKED}/")):
        try:
            scan = os.scandir(folder)
        except FileNotFoundError:
            if folder == directory:
                raise
            continue
        with scan:
            for entry in scan:
                if entry.name.endswith(".pub") or (
                    not prefix and entry.name in (MEMBERS_FILE, ROLES_FILE)
                ):
                    st = entry.stat()
                    entries.append((prefix + entry.name, st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(sorted(entries))
