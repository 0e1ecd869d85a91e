"""Shared fixtures: captured eliot logs, and actors used across the suite."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import eliot
import pytest


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
