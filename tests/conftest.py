"""Shared fixtures: captured eliot logs, and secrets for a server and a client node.

The helpers they are built on (and that fixtures fit less well) are in tests/harness.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import eliot
import pytest

from .harness import Secrets


class Logs:
    """Every eliot message written while a test runs."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def __call__(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    def of_type(self, message_type: str) -> list[dict[str, Any]]:
        return [m for m in self.messages if m.get("message_type") == message_type]


@pytest.fixture
def logs() -> Iterator[Logs]:
    captured = Logs()
    eliot.add_destinations(captured)
    try:
        yield captured
    finally:
        eliot.remove_destination(captured)


@pytest.fixture
def secrets(tmp_path: Path) -> Secrets:
    """TLS files from one CA, and keyrings that trust each other, for "server" and "client"."""
    return Secrets.make(tmp_path, "server", "client")
