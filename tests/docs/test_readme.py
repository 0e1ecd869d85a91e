"""The README, followed as a new user would, in a fresh clone: its shell
commands work, ``call`` and ``send`` print their answer only, and the checkout
is as clean afterwards as before (``git status --porcelain`` prints nothing).
Every type its code uses is exported from ``actorctl``.
"""

from __future__ import annotations

import collections
import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest
import trio

import actorctl
from tests.support.harness import free_port

ROOT: Final = Path(__file__).resolve().parents[2]
README: Final = (ROOT / "README.md").read_text(encoding="utf-8")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.DOTALL)


def _commands() -> list[str]:
    """The README's ``actorctl`` commands, in order, without their comments."""
    commands = []
    # The task example's block (`cluster up`, then `python tasks.py`) runs in
    # a project of its own: tests/docs/test_docs_run.py runs it.
    for block in (b for b in _blocks("sh") if "actorctl cluster up" not in b):
        for line in block.splitlines():
            line = line.split("  #", 1)[0].strip()
            commands += [part.strip() for part in line.split("&&") if part.strip()]
    return [c for c in commands if c.startswith("actorctl ")]


def test_every_type_the_readme_uses_is_exported() -> None:
    code = "\n".join(_blocks("python")) + README
    imported = {
        name.strip()
        for names in re.findall(r"from actorctl import ([\w, ]+)", code)
        for name in names.split(",")
    }
    used = set(re.findall(r"\b(\w+)\.(?:load|from_dir)\(", code))  # Keyring.load(...)
    assert {"Keyring", "TlsFiles"} <= used
    missing = sorted(name for name in imported | used if name not in actorctl.__all__)
    assert not missing


async def test_the_readme_commands_leave_a_fresh_clone_clean(tmp_path: Path) -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("git (and a git checkout to clone) is needed to clone the project")
    clone = tmp_path / "clone"
    await trio.run_process(["git", "clone", "--quiet", str(ROOT), str(clone)])
    env = {**os.environ, "PYTHONPATH": f"{clone / 'src'}{os.pathsep}{clone}"}
    port = free_port()
    commands = [c.replace("127.0.0.1:5680", f"127.0.0.1:{port}") for c in _commands()]
    assert len(commands) >= 10
    actorctl_cmd = [sys.executable, "-m", "actorctl"]
    answers: dict[str, str] = collections.defaultdict(str)
    node: trio.Process | None = None
    async with trio.open_nursery() as nursery:
        for command in commands:
            args = [*actorctl_cmd, *shlex.split(command)[1:]]
            if args[3:5] == ["node", "run"]:
                run = functools.partial(
                    trio.run_process, args, cwd=clone, env=env, stdout=subprocess.PIPE, check=False
                )
                node = await nursery.start(run)
                await _ready(node)
                continue
            with trio.fail_after(30):
                done = await trio.run_process(
                    args, cwd=clone, env=env, capture_stdout=True, capture_stderr=True,
                    check=False,
                )  # fmt: skip
            assert done.returncode == 0, (command, done.stderr.decode())
            assert b"Traceback" not in done.stderr
            answers[command.split()[1]] += done.stdout.decode()
            if command.split()[1] in ("call", "send"):
                assert not done.stderr, done.stderr.decode()  # no log lines at all
        assert node is not None
        node.terminate()
    # call printed the answer, and nothing else; send said it was accepted
    assert answers["call"] == "9592\n25\n"  # the worker's client, then carol
    assert answers["send"].startswith("accepted: totals_top")
    status = await trio.run_process(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=clone, capture_stdout=True
    )
    assert status.stdout.decode() == ""
    # What `cluster up` and the examples write beside a cluster.toml is ignored
    # too (the demo itself runs in a temporary directory).
    made = [
        "examples/certs/ca.pem",
        "examples/keys/cli.key",
        "examples/logs/worker-1.log",
        "examples/data/worker-1/store.sqlite",
        ".venv/bin/python",
        "src/actorctl.egg-info/PKG-INFO",
    ]
    ignored = await trio.run_process(
        ["git", "check-ignore", "--no-index", *made], cwd=clone, capture_stdout=True
    )
    assert ignored.stdout.decode().split() == made


async def _ready(process: trio.Process) -> None:
    assert process.stdout is not None
    seen = b""
    with trio.fail_after(30):
        while b'"actorctl:node:ready"' not in seen:
            chunk = await process.stdout.receive_some(65536)
            assert chunk, seen.decode()
            seen += chunk
