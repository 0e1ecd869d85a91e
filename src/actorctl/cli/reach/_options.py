"""Options the commands that talk to nodes share: how a command proves who it
is (``security_options``), and where etcd is for a cluster that spans hosts:
the file's [etcd] table, or ``--etcd URL`` (repeated for each member), which
wins (``etcd_option``, ``etcd_to_reach``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import asyncclick as click

from ..._errors import ConfigError

if TYPE_CHECKING:
    from ...cluster import ClusterConfig, EtcdSettings, NodeSecurity

__all__ = [
    "Security",
    "etcd_given",
    "etcd_option",
    "etcd_settings",
    "etcd_to_reach",
    "security_options",
]


@dataclass(frozen=True, slots=True)
class Security:
    """What the command line said about TLS and keys."""

    certs: Path | None
    cert_name: str | None
    keys: Path | None
    key_name: str | None
    insecure: bool

    def node_security(
        self, name: str, members: Iterable[str] = (), operators: Iterable[str] = ()
    ) -> NodeSecurity:
        """The ``Node``'s security: TLS files and keyring for ``name``
        (``members``: names of cluster members' keys besides its members file;
        ``operators``: keys that are operators unless the roles file says
        otherwise, as a cluster's Controller is).

        Raises:
            click.UsageError: neither files nor --insecure were given.
        """
        # Imported here, not above: a command's --help needs neither.
        from ...cluster import NodeSecurity, TlsFiles
        from ...mailbox import Keyring

        tls = keyring = None
        if self.certs is not None:
            tls = TlsFiles.from_dir(self.certs, self.cert_name or name)
        if self.keys is not None:
            keyring = Keyring.load(
                self.keys, self.key_name or name, members=members, operators=operators
            )
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
        return NodeSecurity(tls=tls, keyring=keyring, insecure=self.insecure)


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


F = TypeVar("F", bound=Callable[..., Any])
#: Where the endpoints given with --etcd are kept, in click's context.
_GIVEN = "actorctl.etcd"
_HELP = (
    "An etcd endpoint (repeat for each member), e.g. http://10.0.0.1:2379; "
    "default: the file's [etcd] endpoints."
)

#: --etcd for ``host up`` and ``node run``, as the command's ``etcd`` argument.
etcd_option = click.option("--etcd", "etcd", multiple=True, metavar="URL", help=_HELP)


def _keep(ctx: click.Context, _: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    ctx.meta[_GIVEN] = value
    return value


def etcd_to_reach(command: F) -> F:
    """--etcd for a command that asks a running cluster (``etcd_given`` has it)."""
    option = click.option(
        "--etcd", multiple=True, metavar="URL", help=_HELP, expose_value=False, callback=_keep
    )
    return option(command)


def etcd_given() -> tuple[str, ...]:
    """The endpoints the running command was given with --etcd (none: the file's)."""
    ctx = click.get_current_context(silent=True)
    return tuple(ctx.meta.get(_GIVEN, ())) if ctx is not None else ()


def etcd_settings(config: ClusterConfig, endpoints: Sequence[str]) -> EtcdSettings:
    """Where etcd is for ``config``: ``endpoints`` (``--etcd``) over its [etcd] table.

    Raises:
        ConfigError: neither says, or an endpoint is not a URL.
    """
    from ...cluster import EtcdSettings

    if config.etcd is None and not endpoints:
        raise ConfigError(
            f"{config.path}: no etcd to register in: add an [etcd] table "
            '(endpoints = ["http://HOST:2379"]) or pass --etcd URL'
        )
    settings = config.etcd or EtcdSettings(tuple(endpoints))
    return settings.with_endpoints(endpoints)
