"""Options every command that talks to nodes shares: how it proves who it is."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any

import asyncclick as click
import attrs

from ..cluster import TlsFiles
from ..mailbox import Keyring

__all__ = ["Security", "security_options"]


@attrs.frozen
class Security:
    """What the command line said about TLS and keys."""

    certs: Path | None
    cert_name: str | None
    keys: Path | None
    key_name: str | None
    insecure: bool

    def node_options(self, name: str, members: Iterable[str] = ()) -> dict[str, Any]:
        """Keyword arguments for ``Node``: TLS files and keyring for ``name``
        (``members``: names of cluster members' keys besides its members file).

        Raises:
            click.UsageError: neither files nor --insecure were given.
        """
        tls = keyring = None
        if self.certs is not None:
            tls = TlsFiles.from_dir(self.certs, self.cert_name or name)
        if self.keys is not None:
            keyring = Keyring.load(self.keys, self.key_name or name, members=members)
        if (tls is None or keyring is None) and not self.insecure:
            missing = " and ".join(
                what
                for what, value in (
                    ("--certs DIR (`actorctl certs init DIR --node NAME`)", tls),
                    ("--keys DIR (`actorctl keys gen NAME --dir DIR`)", keyring),
                )
                if value is None
            )
            raise click.UsageError(f"pass {missing}, or --insecure for development")
        return {"tls": tls, "keyring": keyring, "insecure": self.insecure}


def security_options(
    command: Callable[..., Coroutine[Any, Any, None]],
) -> Callable[..., Coroutine[Any, Any, None]]:
    """Add --certs, --cert-name, --keys, --key-name and --insecure; the command
    gets them as one ``security`` argument."""

    @functools.wraps(command)
    async def with_security(
        *args: Any,
        certs: Path | None,
        cert_name: str | None,
        keys: Path | None,
        key_name: str | None,
        insecure: bool,
        **kwargs: Any,
    ) -> None:
        security = Security(certs, cert_name, keys, key_name, insecure)
        await command(*args, security=security, **kwargs)

    decorated: Any = with_security
    for option in reversed(
        [
            click.option(
                "--certs",
                type=click.Path(file_okay=False, path_type=Path),
                help="Directory made by `actorctl certs init`: mutual TLS with the cluster CA.",
            ),
            click.option("--cert-name", help="Our certificate in --certs (default: our name)."),
            click.option(
                "--keys",
                type=click.Path(file_okay=False, path_type=Path),
                help="Keyring directory: our NAME.key, and every *.pub we trust.",
            ),
            click.option("--key-name", help="Our key in --keys (default: our name)."),
            click.option(
                "--insecure",
                is_flag=True,
                help="Allow plain TCP and unsigned messages: development only (logs warnings).",
            ),
        ]
    ):
        decorated = option(decorated)
    return decorated  # type: ignore[no-any-return]
