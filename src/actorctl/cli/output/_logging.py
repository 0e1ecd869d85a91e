"""Where a command's log goes, and how much of it: ``-v`` and ``--log-json``.

A one-shot command (``call``, ``send``, ``cluster status``, ...) prints its
answer on stdout and nothing else there; its log goes to stderr, warnings only,
one short line each, unless ``-v`` asks for every event or ``--log-json`` for
eliot's JSON lines. A node (``node run``) writes every event as JSON on stdout
(or to ``--log``): the cluster reads it. Those lines are written in batches
(``_logfile.py``): each within a tenth of a second, and what waits at exit.
"""

from __future__ import annotations

import atexit
import functools
import json
import sys
from collections.abc import Callable, Coroutine
from typing import IO, Any

import asyncclick as click

# eliot (and .._log, ._journal, which import it) are imported in the functions
# that use them: a command's --help needs none of them.

__all__ = ["log_options", "log_to", "show_log"]

_BOOKKEEPING = frozenset({"timestamp", "task_uuid", "task_level", "message_type"})


def log_to(path: str, default: IO[str], *, journal: bool = False) -> None:
    """Every event, as JSON lines, to ``path`` ('-': ``default``), in batches
    (what waits is written at exit). When systemd connected ``default`` to
    the journal (``_journal.py``), to the journal instead, if ``path`` is '-'
    or ``journal`` prefers it to ``path``."""
    import eliot

    from ..._log import add_only_destination
    from ._journal import journal_for
    from ._logfile import BatchedFile, raw_of

    to_journal = journal_for(default) if path == "-" or journal else None
    if to_journal is not None:
        eliot.add_destinations(to_journal)
        return
    stream: IO[str] = default if path == "-" else open(path, "a", encoding="utf-8")  # noqa: SIM115
    batched = BatchedFile(stream, raw=raw_of(stream))
    atexit.register(batched.close)
    # While it is eliot's only destination (a node's, unless a user adds one),
    # a task's lines are handed to it straight (_log.py).
    add_only_destination(batched.line)


def show_log(*, verbose: bool, as_json: bool, stream: IO[str] | None = None) -> None:
    """Log to stderr (or ``stream``): warnings only unless ``verbose``; one
    readable line each unless ``as_json``."""
    import eliot

    from ..._log import is_routine

    out = stream if stream is not None else sys.stderr

    def write(message: dict[str, Any]) -> None:
        kind = message.get("message_type") or message.get("action_type") or "?"
        if not verbose and (is_routine(kind) or "action_type" in message):
            return
        if as_json:
            out.write(json.dumps(message, default=repr) + "\n")
        else:
            level = "info" if is_routine(kind) else "warning"
            fields = " ".join(
                f"{key}={value}" for key, value in message.items() if key not in _BOOKKEEPING
            )
            out.write(f"{level}: {str(kind).removeprefix('actorctl:')} {fields}\n")
        out.flush()

    eliot.add_destinations(write)


def log_options(
    command: Callable[..., Coroutine[Any, Any, None]],
) -> Callable[..., Coroutine[Any, Any, None]]:
    """Add -v/--verbose and --log-json to a one-shot command and set its log up."""

    @functools.wraps(command)
    async def with_log(*args: Any, verbose: bool, log_json: bool, **kwargs: Any) -> None:
        show_log(verbose=verbose, as_json=log_json)
        await command(*args, **kwargs)

    verbose = click.option(
        "-v", "--verbose", is_flag=True, help="Log every event, not only warnings (on stderr)."
    )
    as_json = click.option("--log-json", is_flag=True, help="Log as eliot JSON lines (on stderr).")
    decorated: Callable[..., Coroutine[Any, Any, None]] = verbose(as_json(with_log))
    return decorated
