"""Structured logging: thin helpers over eliot that every layer may use.

Nothing here prints: a process's composition root (the CLI) chooses where eliot
writes (JSON lines on stdout by default).
"""

from __future__ import annotations

from typing import Any

from eliot import log_message

__all__ = ["log"]


def log(message_type: str, **fields: Any) -> None:
    """Write one structured log line of type ``message_type``."""
    log_message(message_type=message_type, **fields)
