"""The ``actorctl`` command in a subprocess, as the tests start it.

Every test that runs the command runs ``python -m actorctl`` from the
checkout's root, with the checkout first on PYTHONPATH (so that nodes import
the apps of tests/apps/ by their module strings), then the actorctl this run
imports (the one under test): ``run_cli`` runs a command to its end from a plain test,
``run_cli_async`` from a trio test (``cli_output`` when all it wants is
what a command that must succeed prints), and ``start_cli`` starts one that keeps
running (a node, ``cluster up``) in the test's nursery; ``node_ready`` reads
such a node's log until it is ready, and ``drain`` reads the rest.
``start_watched`` starts one whose output (stdout and stderr together) a
test waits on as it comes: a :class:`Watched` process, read by
tests/support/output.py's ``Output`` in a task of its own.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import trio

import actorctl
from tests.support.output import Output

__all__ = [
    "ACTORCTL",
    "ROOT",
    "Watched",
    "cli_env",
    "cli_output",
    "drain",
    "node_ready",
    "run_cli",
    "run_cli_async",
    "start_cli",
    "start_watched",
]

#: The checkout's root: where the commands run.
ROOT = Path(__file__).resolve().parents[2]
#: Where the actorctl this run imports is (``src`` of a checkout, or site-packages).
UNDER_TEST = Path(actorctl.__file__).resolve().parents[1]
#: The command line that runs ``actorctl`` with this interpreter.
ACTORCTL = (sys.executable, "-m", "actorctl")


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with ``extra``, the checkout and the actorctl
    under test first on the path."""
    env = {**os.environ, **(extra or {})}
    paths = [str(ROOT), str(UNDER_TEST), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


def run_cli(
    *args: str | Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``actorctl ARGS`` run to its end (for ``timeout`` s at most), its output as text."""
    return subprocess.run(
        [*ACTORCTL, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(env) if env is not None else cli_env(),
        timeout=timeout,
        check=check,
    )


async def run_cli_async(
    *args: str | Path, env: Mapping[str, str] | None = None, timeout: float = 30.0
) -> subprocess.CompletedProcess[bytes]:
    """``actorctl ARGS`` run to its end from a trio test (failing past ``timeout`` s),
    its output as bytes."""
    with trio.fail_after(timeout):
        return await trio.run_process(
            [*ACTORCTL, *map(str, args)],
            cwd=ROOT,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=dict(env) if env is not None else cli_env(),
        )


async def cli_output(*args: str | Path) -> str:
    """``actorctl ARGS`` run from a trio test: its standard output (it must succeed)."""
    done = await run_cli_async(*args)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


async def start_cli(
    nursery: trio.Nursery,
    *args: str | Path,
    env: Mapping[str, str] | None = None,
    **options: Any,
) -> trio.Process:
    """``actorctl ARGS`` started in ``nursery`` (its stdout a pipe unless ``options``
    say otherwise; ``options`` go to ``trio.run_process``)."""
    options.setdefault("stdout", subprocess.PIPE)
    process: trio.Process = await nursery.start(
        functools.partial(
            trio.run_process,
            [*ACTORCTL, *map(str, args)],
            cwd=ROOT,
            check=False,
            env=dict(env) if env is not None else cli_env(),
            **options,
        )
    )
    return process


async def node_ready(process: trio.Process, timeout: float = 60.0) -> tuple[dict[str, Any], bytes]:
    """Read the log (JSON lines) a node started by ``start_cli`` writes to its
    stdout until it logs ``actorctl:node:ready``: that line, and all it read."""
    assert process.stdout is not None
    said = b""
    with trio.fail_after(timeout):
        while True:
            for line in said.split(b"\n")[:-1]:
                if b'"actorctl:node:ready"' in line:
                    return json.loads(line), said
            chunk = await process.stdout.receive_some(65536)
            assert chunk, f"the node exited before it was ready: {said!r}"
            said += chunk


async def drain(stream: trio.abc.ReceiveStream) -> None:
    """Keep reading a process's output, so that a full pipe never blocks it."""
    while await stream.receive_some(65536):
        pass


@attrs.frozen
class Watched:
    """A command ``start_watched`` started, and what it says as it comes."""

    process: trio.Process
    output: Output


async def start_watched(
    nursery: trio.Nursery, *args: str | Path, env: Mapping[str, str] | None = None
) -> Watched:
    """``actorctl ARGS`` started in ``nursery``, its stdout and stderr read
    together in a task of their own there (a full pipe would stop it)."""
    process = await start_cli(nursery, *args, env=env, stderr=subprocess.STDOUT)
    assert process.stdout is not None
    output = Output(process.stdout)
    nursery.start_soon(output.run)
    return Watched(process, output)
