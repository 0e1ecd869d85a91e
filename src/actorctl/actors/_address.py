"""Actor addresses: ``amqp[s]://host:port/<actor-name>``."""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit

import attrs

from .._errors import ConfigError

__all__ = ["DEFAULT_PORT", "Address"]

DEFAULT_PORT: Final = 5672
_SCHEMES: Final = {"amqp": 5672, "amqps": 5671}


@attrs.frozen(slots=True)
class Address:
    """Where an actor lives: its node's endpoint and its name on that node."""

    host: str
    port: int
    name: str
    scheme: str = "amqp"

    @classmethod
    def parse(cls, text: str) -> Address:
        """Parse ``amqp://host:port/name``.

        Raises:
            ConfigError: naming what is missing or wrong in ``text``.
        """
        parts = urlsplit(text)
        if parts.scheme not in _SCHEMES:
            raise ConfigError(
                f"address {text!r}: scheme must be amqp:// or amqps://, e.g. amqp://127.0.0.1:5672/echo"
            )
        if not parts.hostname:
            raise ConfigError(f"address {text!r} has no host, e.g. amqp://127.0.0.1:5672/echo")
        try:
            port = parts.port or _SCHEMES[parts.scheme]
        except ValueError:
            raise ConfigError(
                f"address {text!r}: its port must be a number from 1 to 65535, "
                "e.g. amqp://127.0.0.1:5672/echo"
            ) from None
        name = parts.path.lstrip("/")
        if not name or "/" in name:
            raise ConfigError(
                f"address {text!r} must end with one actor name, as in amqp://host:port/<actor-name>"
            )
        return cls(parts.hostname, port, name, parts.scheme)

    @property
    def endpoint(self) -> tuple[str, int]:
        return (self.host, self.port)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}/{self.name}"
