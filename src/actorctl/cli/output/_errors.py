"""What the ``actorctl`` command does with a failure that reached its top:
the exit code and the one line the user reads (``--debug``: the traceback too)."""

from __future__ import annotations

import sys
import traceback
from typing import NoReturn

import asyncclick as click

from ..._errors import ActorctlError

__all__ = ["INTERRUPTED", "exit_code", "fail", "leaf", "usage_error"]

INTERRUPTED = 130  # as a shell reports a command ended by SIGINT


def leaf(error: BaseException) -> BaseException:
    """The first exception inside nested exception groups."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def exit_code(error: BaseException, *, debug: bool) -> int | None:
    """The exit code for ``error`` once it is reported, or None: not an
    expected failure (a bug), to be raised with its traceback."""
    first = leaf(error)
    if isinstance(first, SystemExit):
        code = first.code
        return code if isinstance(code, int) else 1
    if isinstance(first, KeyboardInterrupt):
        click.echo("interrupted", err=True)
        return INTERRUPTED
    if isinstance(first, ActorctlError):
        if debug:
            traceback.print_exception(error, file=sys.stderr)
        click.echo(f"error: {first}", err=True)
        return 1
    return None


def usage_error(error: click.ClickException) -> int:
    """Report one of click's own errors (a usage error: an unknown option or
    command, a missing argument) as every other failure is reported, after the
    command's usage line; its exit code (2 for a usage error)."""
    if isinstance(error, click.exceptions.NoArgsIsHelpError):  # no command: the help
        click.echo(error.format_message(), err=True)
        return error.exit_code
    if isinstance(error, click.UsageError) and error.ctx is not None:
        click.echo(error.ctx.get_usage(), err=True)
        click.echo(f"Try '{error.ctx.command_path} --help' for help.\n", err=True)
    click.echo(f"error: {error.format_message()}", err=True)
    return error.exit_code


def fail(message: str, code: int = 2) -> NoReturn:
    """End the command with ``error: message`` on stderr and exit ``code``
    (2: the input was wrong; 1: what it asked for failed). With ``--debug``,
    the exception being handled, if any, is shown first."""
    context = click.get_current_context(silent=True)
    debug = context is not None and bool(context.find_root().params.get("debug"))
    if debug and sys.exc_info()[1] is not None:
        traceback.print_exc(file=sys.stderr)
    click.echo(f"error: {message}", err=True)
    raise SystemExit(code)
