"""``actorctl keys`` and ``actorctl certs``: identity keys and development certificates."""

from __future__ import annotations

from pathlib import Path

import asyncclick as click

from .._errors import ConfigError
from ..cluster import init_certs
from ..mailbox import IdentityKey, PublicKey
from ..mailbox._keys import MEMBERS_FILE, add_member, members_file

__all__ = ["certs", "keys"]

_DIR = click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("keys"),
    show_default=True,
    help="The keyring directory.",
)


@click.group()
def keys() -> None:
    """Ed25519 identity keys: a node signs with its own and trusts the *.pub it holds."""


@keys.command("gen")
@click.argument("name")
@_DIR
@click.option(
    "--member",
    is_flag=True,
    help="A cluster node's key: name it in the keyring's members file (its routers "
    "may then assert whom they forward for).",
)
def keys_gen(name: str, directory: Path, member: bool) -> None:
    """Write NAME.key (private, mode 0600) and NAME.pub in the keyring directory."""
    try:
        private, public = IdentityKey.generate(name).save(directory, name)
        if member:
            add_member(directory, name)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    key = PublicKey.load(public)
    click.echo(f"{private}\n{public}\nkey id {key.key_id}")
    if member:
        click.echo(f"member (in {directory / MEMBERS_FILE})")


@keys.command("list")
@_DIR
def keys_list(directory: Path) -> None:
    """List the keys in a keyring directory: name, key id, and which are private."""
    if not directory.is_dir():
        raise click.ClickException(f"keyring {directory} is not a directory")
    private = {path.stem for path in directory.glob("*.key")}
    pubs = sorted(directory.glob("*.pub"))
    rows = []
    try:
        members = set(members_file(directory / MEMBERS_FILE, {p.stem: p.stem for p in pubs}))
        for path in pubs:
            key = PublicKey.load(path)
            kind = "private+public" if path.stem in private else "public"
            if path.stem in members:
                kind += ", member"
            rows.append((path.stem, key.key_id, kind))
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    if not rows:
        click.echo(f"no keys in {directory}: `actorctl keys gen NAME --dir {directory}`")
        return
    width = max(len(name) for name, _, _ in rows)
    for name, key_id, kind in rows:
        click.echo(f"{name:<{width}}  {key_id}  {kind}")


@click.group()
def certs() -> None:
    """Development TLS certificates (a throwaway cluster CA made with trustme)."""


@certs.command("init")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--node", "names", multiple=True, required=True, help="A node to certify.")
def certs_init(directory: Path, names: tuple[str, ...]) -> None:
    """Make ca.pem and, per --node NAME, NAME.pem and NAME.key in DIRECTORY."""
    try:
        init_certs(directory, list(names))
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    for name in names:
        click.echo(f"{directory / (name + '.pem')}  {directory / (name + '.key')}")
    click.echo(f"{directory / 'ca.pem'}  (the cluster CA)")
