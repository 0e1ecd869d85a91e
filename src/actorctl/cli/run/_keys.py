"""``actorctl keys`` and ``actorctl certs``: identity keys and development certificates."""

from __future__ import annotations

from pathlib import Path

import asyncclick as click

from ..._errors import ConfigError
from ...mailbox import ROLES_FILE, IdentityKey, PublicKey, Role
from ...mailbox._keydir import add_public_key, revoke_key
from ...mailbox._keyring import MEMBERS_FILE, REVOKED, add_member, members_file
from ...mailbox._roles import parse_role, read_roles, write_role
from ...ops import init_certs, issue_cert

__all__ = ["certs", "keys"]

_DIR = click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("keys"),
    show_default=True,
    help="The keyring directory.",
)


def _role(ctx: click.Context, param: click.Parameter, value: str | None) -> Role | None:
    if value is None:
        return None
    try:
        return parse_role(value, f"--{param.name}")
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from None


_ROLE = click.option(
    "--role",
    callback=_role,
    metavar="operator|member|client",
    help="Its role, kept in the keyring's roles file: an operator may stop, reload, "
    "revoke, purge and re-drive; a member is a node of the cluster; a client calls "
    "actors (docs/security.md). Without it a new key is a client, unless the "
    "cluster names it as a node (a member) or it is the Controller's (an operator).",
)


@click.group()
def keys() -> None:
    """Ed25519 identity keys: a node signs with its own and trusts the *.pub it holds.

    A running node watches its keyring directory: `keys add` and `keys revoke`
    apply to it within about a second, without a restart.
    """


@keys.command("gen")
@click.argument("name")
@_DIR
@click.option(
    "--member",
    is_flag=True,
    help="A cluster node's key: name it in the keyring's members file (its routers "
    "may then assert whom they forward for); the same as --role member.",
)
@_ROLE
def keys_gen(name: str, directory: Path, member: bool, role: Role | None) -> None:
    """Write NAME.key (private, mode 0600) and NAME.pub in the keyring directory."""
    if member and role not in (None, Role.MEMBER):
        raise click.UsageError(f"--member and --role {role} disagree: give one of them")
    try:
        private, public = IdentityKey.generate(name).save(directory, name)
        if member:
            add_member(directory, name)
        if role is not None:
            write_role(directory, name, role)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    key = PublicKey.load(public)
    click.echo(f"{private}\n{public}\nkey id {key.key_id}")
    if member:
        click.echo(f"member (in {directory / MEMBERS_FILE})")
    if role is not None:
        click.echo(f"role {role} (in {directory / ROLES_FILE})")


@keys.command("list")
@_DIR
def keys_list(directory: Path) -> None:
    """List the keys in a keyring directory: name, key id, which are private,
    and the role its roles file gives (or member, named in its members file)."""
    if not directory.is_dir():
        raise click.ClickException(
            f"keyring {directory} is not a directory "
            f"(`actorctl keys gen NAME --dir {directory}` makes one)"
        )
    private = {path.stem for path in directory.glob("*.key")}
    pubs = sorted(directory.glob("*.pub"))
    rows = []
    revoked = sorted((directory / REVOKED).glob("*.pub"))
    try:
        members = set(members_file(directory / MEMBERS_FILE, {p.stem: p.stem for p in pubs}))
        roles = read_roles(directory)
        for path in [*pubs, *revoked]:
            key = PublicKey.load(path)
            kind = "private+public" if path.stem in private else "public"
            role = roles.get(path.stem)
            if path in revoked:
                kind = "revoked"
            elif role is not None:
                kind += f", {role}"
            elif path.stem in members:
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


@keys.command("add")
@click.argument("pubkey_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--name", default=None, help="Its name in the keyring (default: the file's stem).")
@_DIR
@_ROLE
def keys_add(pubkey_file: Path, name: str | None, directory: Path, role: Role | None) -> None:
    """Trust the Ed25519 public key in PUBKEY_FILE: copy it into the keyring as
    NAME.pub. Nodes that watch the keyring trust it within about a second.

    Given a key the keyring trusts already (its own NAME.pub, say), --role
    changes its role; running nodes apply it within about a second too."""
    try:
        added, new = add_public_key(directory, pubkey_file, name)
        changed = role is not None and write_role(directory, added.path.stem, role)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    what = "trusted" if new else "already trusted"
    click.echo(f"{what}: {added.path.stem} (key id {added.key.key_id}) in {added.path}")
    if role is not None:
        click.echo(f"role {role}{'' if changed else ' (unchanged)'} in {directory / ROLES_FILE}")


@keys.command("revoke")
@click.argument("which", metavar="NAME|KEYID")
@_DIR
def keys_revoke(which: str, directory: Path) -> None:
    """Stop trusting a key: move NAME.pub into the keyring's revoked/ folder.

    Nodes that watch the keyring refuse its messages (actorctl:revoked-key)
    and close its sessions within about a second. A cluster on several hosts
    must copy the change to each host's keyring.
    """
    try:
        revoked, new = revoke_key(directory, which)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    what = "revoked" if new else "already revoked"
    click.echo(f"{what}: {revoked.path.stem} (key id {revoked.key.key_id}), now {revoked.path}")
    if new and (directory / f"{revoked.path.stem}.key").exists():
        click.echo(
            f"warning: {directory / (revoked.path.stem + '.key')} is its private key: "
            "the node that signs with it is no longer trusted (give it a new key)",
            err=True,
        )


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


@certs.command("issue")
@click.argument("name")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("certs"),
    show_default=True,
    help="The directory with the cluster CA (ca.pem and ca.key, from `certs init`).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where NAME.pem, NAME.key (and a copy of ca.pem) go (default: --dir).",
)
@click.option("--host", "hosts", multiple=True, help="Another DNS name or IP address it names.")
@click.option("--days", default=365, show_default=True, help="How long it is valid.")
@click.option("--force", is_flag=True, help="Issue a new one over an existing NAME.pem/NAME.key.")
def certs_issue(
    name: str, directory: Path, out: Path | None, hosts: tuple[str, ...], days: int, force: bool
) -> None:
    """Sign a certificate for NAME (a node, or a client) with the CA in --dir.

    It names 127.0.0.1, localhost, NAME and each --host, and serves a node
    and a client alike. Give the holder NAME.pem, NAME.key and ca.pem; it also
    needs an identity key that the nodes trust (`actorctl keys add`).
    """
    try:
        cert, key = issue_cert(directory, name, out=out, hosts=hosts, days=days, force=force)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{cert}  {key}\nsigned by {directory / 'ca.pem'}")
