"""Logging to systemd's journal when systemd connected our output to it.

systemd sets ``JOURNAL_STREAM=DEVICE:INODE`` for a service whose stdout or
stderr is the journal. A process whose own stream matches it writes each eliot
message to the journal socket (``/run/systemd/journal/socket``) in the
journal's native protocol, as one entry with fields: ``MESSAGE`` (one readable
line), ``PRIORITY`` (6 information, 4 warning, 3 a failed action),
``SYSLOG_IDENTIFIER=actorctl``, ``MESSAGE_TYPE``, ``ELIOT_TASK_UUID``,
``ELIOT_TASK_LEVEL`` and ``ELIOT_JSON`` (the whole message, for ``journalctl -o
json``). A process that merely inherited the variable (a node whose output
``cluster up`` copies to a file) keeps its own destination. When the socket is
absent, messages go to stderr as JSON lines. ``ACTORCTL_JOURNAL_SOCKET`` names
another socket (tests, containers with the journal socket mounted elsewhere).
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
from collections.abc import Callable, Mapping
from typing import IO, Any, Final, final

from ..._log import is_routine

__all__ = ["JOURNAL_SOCKET", "JournalDestination", "encode_entry", "journal_for"]

JOURNAL_SOCKET: Final = "/run/systemd/journal/socket"
_BOOKKEEPING: Final = frozenset({"timestamp", "task_uuid", "task_level", "message_type"})


def journal_for(
    stream: IO[str], environ: Mapping[str, str] | None = None
) -> Callable[[dict[str, Any]], None] | None:
    """An eliot destination for the journal if systemd connected ``stream`` to
    it (``JOURNAL_STREAM`` names its device and inode), else None. Falls back
    to JSON lines on stderr when the journal's socket cannot be reached."""
    env = os.environ if environ is None else environ
    wanted = env.get("JOURNAL_STREAM", "")
    device, sep, inode = wanted.partition(":")
    if not sep or not device.isdigit() or not inode.isdigit():
        return None
    try:
        status = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):  # no file descriptor (captured)
        return None
    if (status.st_dev, status.st_ino) != (int(device), int(inode)):
        return None
    path = env.get("ACTORCTL_JOURNAL_SOCKET") or JOURNAL_SOCKET
    try:
        return JournalDestination(path)
    except OSError:
        return _json_lines


def _json_lines(message: dict[str, Any]) -> None:
    sys.stderr.write(json.dumps(message, default=repr) + "\n")
    sys.stderr.flush()


@final
class JournalDestination:
    """Sends each eliot message as one journal entry (a datagram)."""

    def __init__(self, path: str) -> None:
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self._socket.connect(path)
        except OSError:
            self._socket.close()
            raise

    def __call__(self, message: dict[str, Any]) -> None:
        entry = encode_entry(message)
        try:
            self._socket.send(entry)
        except OSError:
            # Too large for one datagram (or the journal went away): the entry
            # without its JSON copy, and stderr as the last resort.
            try:
                self._socket.send(encode_entry(message, with_json=False))
            except OSError:
                _json_lines(message)

    def close(self) -> None:
        self._socket.close()


def encode_entry(message: dict[str, Any], *, with_json: bool = True) -> bytes:
    """One eliot message as a datagram of the journal's native protocol."""
    kind = str(message.get("message_type") or message.get("action_type") or "?")
    status = message.get("action_status")
    if status == "failed":
        priority = 3
    elif is_routine(kind) or "action_type" in message:
        priority = 6
    else:
        priority = 4
    fields = " ".join(
        f"{key}={value}"
        for key, value in message.items()
        if key not in _BOOKKEEPING and key not in ("action_type", "action_status")
    )
    text = f"{kind.removeprefix('actorctl:')}{f' {status}' if status else ''} {fields}".strip()
    entry = {
        "MESSAGE": text,
        "PRIORITY": str(priority),
        "SYSLOG_IDENTIFIER": "actorctl",
        "MESSAGE_TYPE": kind,
        "ELIOT_TASK_UUID": str(message.get("task_uuid", "")),
        "ELIOT_TASK_LEVEL": "/" + "/".join(str(n) for n in message.get("task_level", [])),
    }
    if with_json:
        entry["ELIOT_JSON"] = json.dumps(message, default=repr)
    return b"".join(_field(key, value) for key, value in entry.items())


def _field(key: str, value: str) -> bytes:
    data = value.encode("utf-8", "replace")
    if b"\n" not in data:
        return key.encode() + b"=" + data + b"\n"
    # A value with a line feed: the key, a line feed, its length (64 bits,
    # little-endian), the value, a line feed (systemd's native protocol).
    return key.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"
