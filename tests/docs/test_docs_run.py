"""Every code block of README.md and docs/*.md runs as written.

The blocks are found and their marks read by tests/support/docs_blocks.py; the marks
are documented in docs/testing.md ("The docs run"). A page's blocks run in
order in one scratch directory (what one block writes, the next may use), with
``actorctl``, ``python`` and ``python3`` on PATH (this interpreter) and the
project on PYTHONPATH. Every ``127.0.0.1:PORT`` of a page is one free port for
all of the page's blocks, and for a cluster file a block names. A serving
command (``actorctl node run``, ``actorctl cluster up``) starts in the
background, as a reader starts it in a terminal of its own; the next line runs
once it said it is ready; it is stopped, by its PID (SIGTERM: for a cluster,
the warm stop ``cluster down`` asks for), when the page's last block has run.
A console block's output lines are checked: each command must print the
lines shown under it, in order.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
import yaml

from actorctl.cluster.config._load import load_cluster
from actorctl.tasks import cluster_app
from tests.support.docs_blocks import PAGES, ROOT, RUNS, Block, blocks, fence_lines, unknown_keys
from tests.support.harness import free_port

ALL: Final = blocks()
RUN: Final = [block for block in ALL if block.not_run is None]
LAST: Final = {block.page: block.id for block in RUN}  # the page's last block to run
TIMEOUT: Final = 60.0  # seconds a block (or a server's start) may take
PORT: Final = re.compile(r"(127\.0\.0\.1:|port=)(\d{2,5})\b")
SERVES: Final = re.compile(r"^actorctl (node run|cluster up)\b")


class Server:
    """A serving command a page started, in the background, and its output."""

    def __init__(self, command: str, page: Page, cwd: Path) -> None:
        self.command = command
        self.page = page
        self.cwd = cwd
        self.process = subprocess.Popen(
            ["bash", "-c", f"exec {command}"],
            cwd=cwd,
            env=page.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_ready(self) -> None:
        """Until it says it is ready: a node's ready line, a cluster's."""
        while True:
            try:
                line = self.lines.get(timeout=TIMEOUT)
            except queue.Empty:
                pytest.fail(f"{self.command!r} said nothing for {TIMEOUT:g} s: {self.seen}")
            if line is None:
                pytest.fail(f"{self.command!r} ended before it was ready:\n" + "\n".join(self.seen))
            self.seen.append(line)
            if '"actorctl:node:ready"' in line or re.fullmatch(r"cluster '.*' ready", line):
                return

    def stop(self) -> None:
        """SIGTERM to our PID (a cluster's warm stop, as ``cluster down`` asks
        for: its nodes in reverse order, within 30 s), then SIGKILL."""
        cluster = self.command.split()[1:3] == ["cluster", "up"]
        for wait in (30.0, 10.0) if cluster else (10.0,):  # again: a cluster's cold stop
            if self.process.poll() is None:
                self.process.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(wait)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


class Page:
    """A page's scratch directory, its ports, and the servers its blocks started."""

    def __init__(self, directory: Path, bin_dir: Path) -> None:
        self.directory = directory
        self.ports: dict[str, int] = {}
        self.servers: dict[tuple[Path, str], Server] = {}
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
            "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]),
        }

    def text(self, text: str) -> str:
        """``text`` with each of the page's ports the free port it stands for."""
        return PORT.sub(lambda m: f"{m.group(1)}{self._port(m.group(2))}", text)

    def _port(self, port: str) -> int:
        if port not in self.ports:
            self.ports[port] = free_port()
        return self.ports[port]

    def serve(self, command: str, cwd: Path) -> None:
        """Start a serving command (once) and wait until it is ready."""
        if (cwd, command) not in self.servers:
            server = Server(command, self, cwd)
            self.servers[cwd, command] = server
            server.wait_ready()

    def stop(self) -> None:
        for server in reversed(list(self.servers.values())):
            server.stop()
        self.servers.clear()


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``actorctl``, ``python`` and ``python3``: this interpreter, as a reader's PATH has them."""
    directory = tmp_path_factory.mktemp("bin")
    for name, run in [("actorctl", "-m actorctl "), ("python", ""), ("python3", "")]:
        script = directory / name
        script.write_text(f'#!/bin/sh\nexec {sys.executable} {run}"$@"\n')
        script.chmod(0o755)
    return directory


class Pages:
    """The pages whose blocks ran, each made at its first block."""

    def __init__(self, factory: pytest.TempPathFactory, bin_dir: Path) -> None:
        self.factory = factory
        self.bin_dir = bin_dir
        self.made: dict[str, Page] = {}

    def __getitem__(self, name: str) -> Page:
        if name not in self.made:
            self.made[name] = Page(self.factory.mktemp(Path(name).stem), self.bin_dir)
        return self.made[name]


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory, bin_dir: Path) -> Iterator[Pages]:
    made = Pages(tmp_path_factory, bin_dir)
    yield made
    for page in made.made.values():
        page.stop()


def test_every_block_runs_or_is_marked_with_why_not() -> None:
    # Given every fence of every page
    for page in PAGES:
        on_page = [block for block in ALL if block.page == str(page.relative_to(ROOT))]
        assert fence_lines(page) == 2 * len(on_page), f"{page}: a fence the parser missed"
    # Then each block runs, or says why it does not
    for block in ALL:
        if block.not_run is None:
            assert block.language in RUNS, (
                f"{block.id}: a {block.language or 'plain'} block runs as nothing: give it a "
                f"language ({', '.join(sorted(RUNS))}) or mark it <!-- docs-test: output -->"
            )
        else:
            kind, _, reason = block.not_run.partition(": ")
            assert kind == "output" or reason, f"{block.id}: say why it needs {kind}"
    not_run = [block for block in ALL if block.not_run is not None]
    assert len(RUN) + len(not_run) == len(ALL)
    assert len(RUN) >= 51


@pytest.mark.parametrize("block", RUN, ids=[block.id for block in RUN])
def test_the_block_runs_as_written(block: Block, pages: Pages) -> None:
    page = pages[block.page]
    try:
        _run_block(block, page)
    finally:
        if LAST[block.page] == block.id:
            page.stop()


def _run_block(block: Block, page: Page) -> None:
    cwd = page.directory / (block.mark("dir") or "")
    cwd.mkdir(exist_ok=True)
    for command in block.all("setup"):
        _shell(page, command, block, cwd)
    text = page.text(block.text)
    name = block.mark("file") or f"_block_L{block.line}.{_SUFFIX.get(block.language, 'txt')}"
    path = cwd / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    cluster = block.mark("cluster")
    if cluster is not None:  # after the block's file: the cluster's nodes may import it
        local = cwd / Path(cluster).name
        if not local.exists():  # the file, its ports the page's, and what lies beside it
            for sibling in (ROOT / cluster).parent.iterdir():
                target = cwd / sibling.name
                if sibling.suffix == ".toml" and not target.exists():  # this or another
                    target.write_text(page.text(sibling.read_text()))  # cluster file
                elif sibling.is_file() and not target.exists():
                    shutil.copy(sibling, target)
        page.serve(f"actorctl cluster up {local.name}", cwd)
    RUNNERS[block.language](block, page, path)


_SUFFIX: Final = {"python": "py", "toml": "toml", "json": "json", "yaml": "yaml"}


def _python(block: Block, page: Page, path: Path) -> None:
    if path.name.startswith("test_"):  # a test module: pytest runs it, as its reader would
        args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "trio_mode=true", path.name]
    elif block.mark("file"):  # a module: imported here, run by a later block
        args = ["-c", f"import runpy; runpy.run_path({path.name!r}, run_name={path.stem!r})"]
    else:
        args = [path.name]
    _check(block, page, [sys.executable, *args], path.parent)


def _sh(block: Block, page: Page, path: Path) -> None:
    _lines(block, page, _logical_lines(path.read_text()), path.parent)


def _console(block: Block, page: Page, path: Path) -> None:
    """The ``$ `` lines in order, as ``_lines`` runs them; what each prints
    must hold the lines shown under it (``_shows``)."""
    steps = _transcript(path.read_text())
    assert steps, f"{block.id}: a console block with no `$ ` command"
    script: list[str] = []
    shown: list[tuple[str, list[str]]] = []
    for command, lines in steps:
        if SERVES.match(command):
            assert not lines, f"{block.id}: `{command}` serves; its output is not checked here"
            _run_transcript(block, page, script, shown, path.parent)
            script, shown = [], []
            page.serve(command.split("  #", 1)[0].strip(), path.parent)
        else:
            script += [f"echo {shlex.quote(_OUTPUT)}", command]
            shown.append((command, lines))
    _run_transcript(block, page, script, shown, path.parent)


_OUTPUT: Final = "@@ docs-test: the output of the next command @@"


def _transcript(text: str) -> list[tuple[str, list[str]]]:
    """Each ``$ `` command of a console block, with the output lines shown under it."""
    steps: list[tuple[str, list[str]]] = []
    for line in _logical_lines(text):
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif line.strip() and steps:
            steps[-1][1].append(line)
    return steps


def _run_transcript(
    block: Block, page: Page, script: list[str], shown: list[tuple[str, list[str]]], cwd: Path
) -> None:
    if not script:
        return
    out = _check(block, page, ["bash", "-e", "-c", "\n".join(script)], cwd)
    printed = out.split(_OUTPUT + "\n")[1:]
    for (command, lines), output in zip(shown, printed, strict=True):
        assert _shows(output, lines), (
            f"{block.id}: `{command}` printed\n{output}\nnot the lines the page shows:\n"
            + "\n".join(lines)
        )


def _shows(output: str, lines: list[str]) -> bool:
    """Whether ``output`` holds ``lines`` in order: runs of spaces compare as
    one, and ``…`` in a line stands for any text."""
    printed = [" ".join(line.split()) for line in output.splitlines()]
    at = 0
    for line in lines:
        parts = " ".join(line.split()).split("…")
        pattern = re.compile(".*".join(re.escape(part) for part in parts))
        while at < len(printed) and not pattern.fullmatch(printed[at]):
            at += 1
        if at == len(printed):
            return False
        at += 1
    return True


def _lines(block: Block, page: Page, lines: list[str], cwd: Path) -> None:
    """Run the lines in order: a serving command in the background, the rest
    as one ``bash -e`` script between them."""
    script: list[str] = []
    for line in lines:
        if SERVES.match(line):
            _shell(page, "\n".join(script), block, cwd)
            script = []
            page.serve(line.split("  #", 1)[0].strip(), cwd)
        else:
            script.append(line)
    _shell(page, "\n".join(script), block, cwd)


def _logical_lines(text: str) -> list[str]:
    """The lines of a shell text, a line ending in a backslash joined to the next."""
    return text.replace("\\\n", " ").splitlines()


def _shell(page: Page, script: str, block: Block, cwd: Path) -> None:
    if script.strip():
        _check(block, page, ["bash", "-e", "-c", script], cwd)


def _check(block: Block, page: Page, args: list[str], cwd: Path) -> str:
    """Run ``args`` in ``cwd``; fail the block, with its output,
    unless it exits 0 within the timeout. Its output (stdout and stderr)."""
    process = subprocess.Popen(
        args,
        cwd=cwd,
        env=page.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its children are ours to stop, by its group
    )
    try:
        out, _ = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
        pytest.fail(f"{block.id}: did not finish within {TIMEOUT:g} s:\n{out}")
    assert process.returncode == 0, f"{block.id}: exit {process.returncode}:\n{out}"
    return out


def _toml(block: Block, page: Page, path: Path) -> None:
    data = tomllib.loads(path.read_text())
    if "cluster" in data:  # a whole cluster file: loaded as `cluster up` loads it
        load_cluster(path, cluster_app())
    else:
        assert unknown_keys(data) == [], f"{block.id}: keys cluster.toml does not have"


def _json(block: Block, page: Page, path: Path) -> None:
    json.loads(path.read_text())


def _yaml(block: Block, page: Page, path: Path) -> None:
    assert yaml.safe_load(path.read_text()) is not None


RUNNERS: Final = {
    "python": _python,
    "sh": _sh,
    "bash": _sh,
    "console": _console,
    "toml": _toml,
    "json": _json,
    "yaml": _yaml,
}

assert set(RUNNERS) == RUNS
assert shutil.which("bash") is not None, "the shell blocks run with bash"
