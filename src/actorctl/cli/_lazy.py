"""A command group whose subcommands are imported when they are used.

Most of ``actorctl``'s start was importing every command's module, and with
them the whole runtime (trio, proton, cryptography, eliot, the store, the task
layer), before anything ran: ``actorctl --help`` needs none of it, ``actorctl
call`` only what a call needs. A :class:`LazyGroup` names each subcommand's
module and its one-line help; the module is imported when the subcommand is
run (or its own help is asked for), and the group's help lists them all from
the table alone. tests/cli/test_cli_start.py checks that each table line's help is
the one its command gives.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncclick as click
from asyncclick import Command
from asyncclick.utils import make_default_short_help

__all__ = ["Lazy", "LazyGroup"]


@dataclass(frozen=True, slots=True)
class Lazy:
    """Where a subcommand is: ``attribute`` of ``module`` (relative to this
    package), and what the group's help says of it."""

    module: str
    attribute: str
    help: str

    def load(self) -> click.Command:
        command = getattr(importlib.import_module(self.module, __package__), self.attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.module}.{self.attribute} is not a command: {command!r}")
        return command


class LazyGroup(click.Group):
    """A group with ``lazy`` subcommands besides those added to it."""

    def __init__(self, *args: Any, lazy: Mapping[str, Lazy] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy: dict[str, Lazy] = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            self.commands[cmd_name] = self.lazy[cmd_name].load()
        return self.commands.get(cmd_name)

    async def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return await super().resolve_command(ctx, args)
        except click.NoSuchCommand as exc:
            # click suggests from the commands imported so far: from all of them
            raise click.NoSuchCommand(
                exc.command_name, possibilities=self.list_commands(ctx), ctx=ctx
            ) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The subcommands and their one-line help, without importing any:
        as :class:`click.Group` lists them once they are imported."""
        rows: list[tuple[str, Command | Lazy]] = []
        for name in self.list_commands(ctx):
            command = self.commands.get(name)
            if command is None:
                rows.append((name, self.lazy[name]))
            elif not command.hidden:
                rows.append((name, command))
        if not rows:
            return
        limit = formatter.width - 6 - max(len(name) for name, _ in rows)
        with formatter.section("Commands"):
            formatter.write_dl(
                [
                    (name, make_default_short_help(it.help, limit))
                    if isinstance(it, Lazy)
                    else (name, it.get_short_help_str(limit))
                    for name, it in rows
                ]
            )
