"""Where etcd is, for the commands of a cluster that spans hosts: the file's
[etcd] table, or ``--etcd URL`` (repeated for each member), which wins."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import asyncclick as click

from .._errors import ConfigError
from ..cluster import ClusterConfig, EtcdSettings

__all__ = ["etcd_given", "etcd_option", "etcd_settings", "etcd_to_reach"]

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
    if config.etcd is None and not endpoints:
        raise ConfigError(
            f"{config.path}: no etcd to register in: add an [etcd] table "
            '(endpoints = ["http://HOST:2379"]) or pass --etcd URL'
        )
    settings = config.etcd or EtcdSettings(tuple(endpoints))
    return settings.with_endpoints(endpoints)
