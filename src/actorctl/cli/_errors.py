"""What the ``actorctl`` command does with a failure that reached its top:
the exit code and the one line the user reads (``--debug``: the traceback too)."""

from __future__ import annotations

import sys
import traceback

import asyncclick as click

from .._errors import ActorctlError

__all__ = ["exit_code", "leaf"]

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
