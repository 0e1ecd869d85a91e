"""The ``actorctl`` command: the composition root of every actorctl process.

Only this layer prints to a terminal; it also chooses where eliot writes (JSON
lines on stdout by default for a node, stderr for one-shot commands).

The root group names each command's module and one-line help (``COMMANDS``)
and imports a command's module only when that command is used (``_lazy.py``):
``actorctl --help`` lists them all without importing any, and a command
imports the runtime it needs when it runs.
"""

from __future__ import annotations

import sys
from typing import Final

import asyncclick as click

from ._lazy import Lazy, LazyGroup
from .output._errors import INTERRUPTED, exit_code, usage_error

__all__ = ["COMMANDS", "main"]

#: Every command: its module (relative to this package), its object there, and its
#: one-line help as ``actorctl --help`` shows it (the first sentence of its
#: docstring; tests/cli/test_cli_start.py checks that they agree).
COMMANDS: Final = {
    "call": Lazy(
        ".operate._call",
        "call",
        "Call ADDRESS's HANDLER (an actor's handler, or a task of a pool or a worker) "
        "and print its result as JSON.",
    ),
    "certs": Lazy(
        ".run._keys",
        "certs",
        "Development TLS certificates (a throwaway cluster CA made with trustme).",
    ),
    "cluster": Lazy(".run._cluster", "cluster", "Run a cluster described by a cluster.toml."),
    "control": Lazy(
        ".operate._control",
        "control",
        "Change a running cluster: task limits (rate limits, suspend and resume, pool "
        "budgets; `limits` shows them), revoke tasks, shut nodes down.",
    ),
    "deadletters": Lazy(
        ".operate._deadletters",
        "deadletters",
        "Dead letters: messages that ran out of retries, were poison, expired, or could "
        "not be retried (no scheduler).",
    ),
    "host": Lazy(
        ".run._host", "host", "Run one host's nodes of a cluster that spans hosts (etcd)."
    ),
    "inspect": Lazy(
        ".operate._inspect",
        "inspect",
        "Look at the task workers of a running cluster: the tasks they run, hold and have "
        "scheduled, their counts, and the tasks they know.",
    ),
    "keys": Lazy(
        ".run._keys",
        "keys",
        "Ed25519 identity keys: a node signs with its own and trusts the *.pub it holds.",
    ),
    "logs": Lazy(
        ".operate._logs",
        "logs",
        "Show the trace of task ID across every node of the cluster FILE names, as one "
        "tree: read from the nodes' log files (logs/ beside FILE).",
    ),
    "node": Lazy(".run._node", "node", "Run a node."),
    "schedule": Lazy(
        ".operate._schedule",
        "schedule",
        "Periodic tasks: what the beat fires, when it last did and when it will next.",
    ),
    "send": Lazy(
        ".operate._call",
        "send",
        "Send a message to ADDRESS's HANDLER and wait until it is handled.",
    ),
}


def main() -> None:
    """Entry point of the ``actorctl`` console script.

    An expected failure (an ``ActorctlError`` that no command turned into its
    own message) is one ``error:`` line and exit code 1; Ctrl-C is
    "interrupted" and 130. ``actorctl --debug ...`` shows the traceback too.
    """
    debug = "--debug" in sys.argv[1:]
    try:
        # Not click's standalone mode: its own errors would say "Error:" and
        # "Aborted!" where every other failure says "error:" and "interrupted".
        result = cli(standalone_mode=False, _anyio_backend="trio")
    except click.ClickException as exc:
        raise SystemExit(usage_error(exc)) from None
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        raise SystemExit(INTERRUPTED) from None
    except BaseException as exc:
        code = exit_code(exc, debug=debug)
        if code is None:
            raise
        raise SystemExit(code) from None
    raise SystemExit(result if isinstance(result, int) else 0)


@click.group(cls=LazyGroup, lazy=COMMANDS)
@click.version_option(package_name="actorctl")
@click.option("--debug", is_flag=True, help="Show the traceback of a failure, too.")
def cli(debug: bool) -> None:
    """actorctl: supervised actors reachable over AMQP 1.0 peer links."""
