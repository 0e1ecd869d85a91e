"""The first hour's mistakes, each answered with what was wrong and what to do.

One table: a mistake in cluster.toml (run through ``actorctl cluster up``) or
on the command line, the exit code it must end with, and words the message
must contain: one naming the cause, one naming the fix. None may print a
traceback. Every case runs through ``actorctl``'s own entry point, with its
own argv, stdout and stderr (tests/support/cli_driver.py: two processes run them all);
each case is its own test.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final

import attrs
import pytest

from tests.support.cli import run_cli
from tests.support.harness import free_port

ROOT: Final = Path(__file__).resolve().parents[2]
ENV: Final = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
W1, W2, GW, CTL = (free_port() for _ in range(4))
#: A cluster that would start: each case below breaks one thing in it.
GOOD: Final = f"""
[cluster]
name = "mistakes"
insecure = true
controller = "127.0.0.1:{CTL}"

[[node]]
name = "w1"
listen = "127.0.0.1:{W1}"
actors = "examples.workers:actors"
instances = 2

[[node]]
name = "w2"
listen = "127.0.0.1:{W2}"
actors = "examples.workers:actors"

[[node]]
name = "gateway"
listen = "127.0.0.1:{GW}"

[[router]]
name = "words"
node = "gateway"
instances = ["w1/words", "w1/words-2", "w2/words"]

[[supervisor]]
name = "pipeline"
node = "w1"
strategy = "rest_for_one"

  [[supervisor.child]]
  actor = "examples.workers:WordCounter"
  name = "counter"
"""
TASKS: Final = f"""
[cluster]
insecure = true
controller = "127.0.0.1:{CTL}"

[[node]]
name = "services"
listen = "127.0.0.1:{W1}"
actors = "tests.apps.task_app:app"
services = true

[[node]]
name = "worker"
listen = "127.0.0.1:{W2}"
actors = "tests.apps.task_app:app"
pools = ["celery"]
"""


@attrs.frozen
class Mistake:
    """One mistake: ``args`` for ``actorctl`` (``{file}`` is the broken
    cluster.toml), or a change to a good cluster.toml."""

    name: str
    code: int
    cause: str
    fix: str
    args: tuple[str, ...] = ("cluster", "up", "{file}")
    edit: Callable[[str], str] = lambda text: text
    within: float = 10.0  # seconds: the answer comes at once, nothing waits for a timeout


def _swap(old: str, new: str, base: str = GOOD) -> Callable[[str], str]:
    assert old in base, old

    def edit(text: str) -> str:
        return base.replace(old, new, 1)

    return edit


def _add(extra: str, base: str = GOOD) -> Callable[[str], str]:
    return lambda text: base + extra


PERIODIC = '\n[[periodic]]\nname = "tick"\ntask = "t.add"\nargs = [1, 2]\n{}\n'
ACTORS_LINE = '"examples.workers:actors"\ninstances'
NOWHERE = f"amqp://127.0.0.1:{free_port()}/x"
CALL = ("call", NOWHERE, "add", "1", "2")
MISTAKES: Final = [
    # cluster.toml: keys that nothing reads, or that are missing
    Mistake("misspelled instances", 2, "'node[0].instancse'", "'instances'",
            edit=_swap("instances = 2", "instancse = 2")),
    Mistake("misspelled node name key", 2, "'node[0].name' is missing", "misspelling of 'name'",
            edit=_swap('name = "w1"', 'nmae = "w1"')),
    Mistake("misspelled listen", 2, "'node[1].listen' is missing", "misspelling of 'listen'",
            edit=_swap(f'listen = "127.0.0.1:{W2}"', f'lisen = "127.0.0.1:{W2}"')),
    Mistake("unknown cluster key", 2, "'cluster.nmae'", "'name'",
            edit=_swap('name = "mistakes"', 'nmae = "mistakes"')),
    Mistake("key of the older format", 2, "'cluster.app'", "moved to the nodes",
            edit=_swap("insecure = true", 'insecure = true\napp = "tests.apps.task_app:app"')),
    Mistake("table misspelled", 2, "'nodes'", "'node'", edit=_add('[[nodes]]\nname = "x"\n')),
    Mistake("router instances misspelled", 2, "'router[0].instances' is missing",
            "misspelling of 'instances'", edit=_swap("instances = [", "instance = [")),
    Mistake("router on an unknown node", 2, "'router[0].node'", "one of the nodes",
            edit=_swap('node = "gateway"', 'node = "gatewey"')),
    Mistake("router instance on an unknown node", 2, "'w9/words'", "a known NODE",
            edit=_swap('"w2/words"]', '"w9/words"]')),
    Mistake("router instance its node does not host", 2, "hosts no actor 'wordz'",
            "'primes', 'words'", edit=_swap('"w2/words"]', '"w2/wordz"]')),
    Mistake("router names an instance beyond instances", 2, "hosts no actor 'words-2'",
            "instances = N", edit=_swap('"w2/words"]', '"w2/words-2"]')),
    Mistake("unknown limit", 2, "'node[0].limits.max_mesage_size'", "'max_message_size'",
            edit=_swap("instances = 2", "instances = 2\nlimits = { max_mesage_size = 10 }")),
    Mistake("bad limit value", 2, "'node[0].limits.max_message_size'", "expected",
            edit=_swap("instances = 2", "instances = 2\nlimits = { max_message_size = -1 }")),
    Mistake("listen without a port", 2, "'node[0].listen'", "HOST:PORT",
            edit=_swap(f'listen = "127.0.0.1:{W1}"', 'listen = "127.0.0.1"')),
    Mistake("listen port out of range", 2, "'node[0].listen'", "HOST:PORT",
            edit=_swap(f'listen = "127.0.0.1:{W1}"', 'listen = "127.0.0.1:70000"')),
    Mistake("no instances", 2, "'node[0].instances'", "from 1 to 1000",
            edit=_swap("instances = 2", "instances = 0")),
    Mistake("durable not a boolean", 2, "'node[0].durable'", "true or false",
            edit=_swap("instances = 2", 'instances = 2\ndurable = "yes"')),
    Mistake("actors without an object", 2, "'node[0].actors'", "MODULE:OBJECT",
            edit=_swap('actors = "examples.workers:actors"', 'actors = "examples.workers"')),
    Mistake("actors module not found", 2, "cannot import module 'examples.workerz'",
            "modules are looked up in",
            edit=_swap(ACTORS_LINE, ACTORS_LINE.replace("workers", "workerz"))),
    Mistake("actors object misspelled", 2, "no object 'actorz'", "did you mean 'actors'?",
            edit=_swap(ACTORS_LINE, ACTORS_LINE.replace(":actors", ":actorz"))),
    Mistake("actors object of the wrong kind", 2, "examples.workers:Document", "expected an Actor",
            edit=_swap(ACTORS_LINE, ACTORS_LINE.replace(":actors", ":Document"))),
    Mistake("setting on a node without actors", 2, "'node[2].pools'", "nothing reads it",
            edit=_swap(f'listen = "127.0.0.1:{GW}"', f'listen = "127.0.0.1:{GW}"\npools = ["x"]')),
    Mistake("setting that a plain actors list does not read", 2, "'node[1].pools'",
            "not an actors factory",
            edit=_swap(f'listen = "127.0.0.1:{W2}"', f'listen = "127.0.0.1:{W2}"\npools = ["x"]')),
    Mistake("node name used twice", 2, "'w2' is used twice", "must be unique",
            edit=_swap('name = "gateway"', 'name = "w2"')),
    Mistake("port used twice", 2, f"port {W2} is used twice", "controller",
            edit=_swap(f'listen = "127.0.0.1:{GW}"', f'listen = "127.0.0.1:{W2}"')),
    Mistake("node name with a space", 2, "'node[0].name'", "letters, digits",
            edit=_swap('name = "w1"', 'name = "w 1"')),
    Mistake("dev not a boolean", 2, "'cluster.dev'", "true or false",
            edit=_swap("insecure = true", 'insecure = true\ndev = "yes"')),
    Mistake("controller without a port", 2, "'cluster.controller'", "HOST:PORT",
            edit=_swap(f'controller = "127.0.0.1:{CTL}"', 'controller = "localhost"')),
    Mistake("listen on a host that does not resolve", 2, "host 'nosuchhost.invalid'",
            "e.g. 127.0.0.1", edit=_swap(f'listen = "127.0.0.1:{GW}"',
                                         f'listen = "nosuchhost.invalid:{GW}"')),
    Mistake("listen on another machine's address", 2, "192.0.2.1 is not an address of this",
            "127.0.0.1 or 0.0.0.0", edit=_swap(f'listen = "127.0.0.1:{GW}"',
                                               f'listen = "192.0.2.1:{GW}"')),
    Mistake("not TOML", 2, "not valid TOML", "line", edit=lambda text: GOOD + "\n[[node]\n"),
    Mistake("no nodes", 2, "'node'", "at least one [[node]]",
            edit=lambda text: '[cluster]\nname = "x"\n'),
    Mistake("no such file", 2, "cannot read it", "No such file",
            args=("cluster", "up", "{file}.missing")),
    Mistake("supervisor child kind misspelled", 2, "'supervisor[0].child[0].actr'", "'actor'",
            edit=_swap('actor = "examples.workers:WordCounter"',
                       'actr = "examples.workers:WordCounter"')),
    Mistake("supervisor strategy misspelled", 2, "'supervisor[0].strategy'", "one_for_one",
            edit=_swap('strategy = "rest_for_one"', 'strategy = "rest_for_on"')),
    Mistake("supervisor name misspelled", 2, "'supervisor[0].nmae'", "'name'",
            edit=_swap('name = "pipeline"', 'nmae = "pipeline"')),
    Mistake("supervisor on an unknown node", 2, "'supervisor[0].node'", "one of the nodes",
            edit=_swap('node = "w1"', 'node = "w9"')),
    Mistake("supervisor child object misspelled", 2, "no object 'WordCountr'",
            "did you mean 'WordCounter'?",
            edit=_swap("workers:WordCounter", "workers:WordCountr")),
    Mistake("pool name typo", 2, "celeri", "celery",
            edit=_swap('pools = ["celery"]', 'pools = ["celeri"]', TASKS)),
    Mistake("task app key misspelled", 2, "'node[1].pool'", "'pools'",
            edit=_swap('pools = ["celery"]', 'pool = ["celery"]', TASKS)),
    Mistake("task app module that connects as it is imported", 2,
            "app.connect(...) runs as the module is imported, and the nodes import this module",
            'under `if __name__ == "__main__":`, or in another module',
            edit=lambda text: TASKS.replace("tests.apps.task_app:app",
                                            "tests.apps.connects_on_import_app:app")),
    # cluster.toml: [[periodic]] tables (docs/scheduling.md)
    Mistake("periodic task name typo", 2, "no task named 't.ad'", "did you mean 't.add'?",
            edit=_add(PERIODIC.replace('"t.add"', '"t.ad"').format("every = 60"), TASKS)),
    Mistake("periodic cron with a bad field", 2, "'61 * * * *': Bad minute",
            "field 1, minute: '61'", edit=_add(PERIODIC.format('cron = "61 * * * *"'), TASKS)),
    Mistake("periodic with cron and every", 2, "got both", "exactly one of cron=... and every=",
            edit=_add(PERIODIC.format('cron = "* * * * *"\nevery = 60'), TASKS)),
    Mistake("periodic with neither cron nor every", 2, "got neither", "exactly one of cron",
            edit=_add(PERIODIC.format(""), TASKS)),
    Mistake("periodic timezone typo", 2, "unknown timezone 'Europe/Pari'",
            "did you mean 'Europe/Paris'?",
            edit=_add(PERIODIC.format('every = 60\ntz = "Europe/Pari"'), TASKS)),
    Mistake("periodic key misspelled", 2, "'periodic[0].catchup'", "'catch_up'",
            edit=_add(PERIODIC.format("every = 60\ncatchup = false"), TASKS)),
    Mistake("periodic name used twice", 2, "'tick' is used twice", "must be unique",
            edit=_add(PERIODIC.format("every = 60") + PERIODIC.format("every = 5"), TASKS)),
    Mistake("periodic with no beat to fire it", 2, "[[periodic]] tables need a node",
            "services = true", edit=_add(PERIODIC.format("every = 60"))),
    Mistake("taken port", 1, f"port {W1} of node w1", "another port", edit=lambda text: GOOD),
    # the command line
    Mistake("unknown command", 2, "No such command 'cal'", "call", args=("cal",)),
    Mistake("call without a handler", 2, "Missing argument 'HANDLER'", "Usage:",
            args=("call", NOWHERE)),
    Mistake("call with a bad scheme", 2, "scheme must be amqp://", "amqp://127.0.0.1:5672",
            args=("call", "http://example/x", "add", "--insecure")),
    Mistake("call --kw without =", 2, "--kw 'noequals'", "KEY=VALUE",
            args=(*CALL, "--insecure", "--kw", "noequals")),
    Mistake("call without certificates or --insecure", 2, "--certs DIR", "--insecure",
            args=CALL),
    Mistake("call amqps:// with --insecure only", 2, "amqps:// is TLS", "amqp:// with --insecure",
            args=("call", NOWHERE.replace("amqp:", "amqps:"), "add", "--insecure")),
    Mistake("call with a timeout of 0", 2, "--timeout 0", "above 0",
            args=(*CALL, "--insecure", "--timeout", "0")),
    Mistake("call with a certificate directory that is not there", 2, "/nonexistent",
            "certs init", args=(*CALL, "--certs", "/nonexistent/certs", "--keys", "/tmp")),
    Mistake("call where nothing listens", 1, "nothing listens on", "is the node running",
            args=(*CALL, "--insecure", "--timeout", "1")),
    Mistake("node run with a bad --listen", 2, "--listen '127.0.0.1'", "HOST:PORT",
            args=("node", "run", "examples.workers:actors", "--listen", "127.0.0.1", "--insecure")),
    Mistake("node run with a port out of range", 2, "--listen '127.0.0.1:99999'", "0 to 65535",
            args=("node", "run", "examples.workers:actors", "--listen", "127.0.0.1:99999",
                  "--insecure")),
    Mistake("node run with a bad --route", 2, "--route 'words'", "NAME=ADDRESS",
            args=("node", "run", "--route", "words", "--listen", "127.0.0.1:0", "--insecure")),
    Mistake("node run with a misspelled object", 2, "no object 'actorz'",
            "did you mean 'actors'?",
            args=("node", "run", "examples.workers:actorz", "--listen", "127.0.0.1:0",
                  "--insecure")),
    Mistake("node run on a taken port", 2, f"port {W1} is taken", "another port",
            args=("node", "run", "examples.workers:actors", "--listen", f"127.0.0.1:{W1}",
                  "--insecure")),
    Mistake("call a port out of range", 2, "'amqp://127.0.0.1:99999/x'", "from 1 to 65535",
            args=("call", "amqp://127.0.0.1:99999/x", "add", "--insecure")),
    Mistake("node run with a bad --name", 2, "--name 'bad name'", "letters, digits",
            args=("node", "run", "examples.workers:actors", "--name", "bad name", "--listen",
                  "127.0.0.1:0", "--insecure")),
    Mistake("node run --route to a port out of range", 2, "amqp://127.0.0.1:99999/x",
            "from 1 to 65535", args=("node", "run", "--route", "w=amqp://127.0.0.1:99999/x",
                                     "--listen", "127.0.0.1:0", "--insecure")),
    Mistake("node run --cluster naming no such node", 2, "no node named 'nobody'",
            "'w1', 'w2', 'gateway'", args=("node", "run", "examples.workers:actors", "--cluster",
                                          "{file}", "--name", "nobody", "--insecure")),
    Mistake("node run with a log file it cannot open", 2, "--log /nonexistent/n.log",
            "a directory that exists", args=("node", "run", "examples.workers:actors", "--log",
                                             "/nonexistent/n.log", "--insecure")),
    Mistake("cluster status with the cluster down", 1, "not running", "cluster up",
            args=("cluster", "status", "{file}"), edit=lambda text: GOOD, within=3.0),
]  # fmt: skip


@attrs.frozen
class Ran:
    code: int
    out: str
    seconds: float


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ran]:
    """Every case run through the real ``actorctl`` entry point, in two
    processes side by side (tests/support/cli_driver.py), the taken port held."""
    commands = []
    for mistake in MISTAKES:
        file = tmp_path_factory.mktemp("mistake") / "cluster.toml"
        file.write_text(mistake.edit(GOOD), encoding="utf-8")
        commands.append([a.replace("{file}", str(file)) for a in mistake.args])

    def run(batch: list[list[str]]) -> list[Ran]:
        done = subprocess.run(
            [sys.executable, "-m", "tests.support.cli_driver"],
            input=json.dumps(batch),
            cwd=ROOT,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return [Ran(r["code"], r["out"], r["seconds"]) for r in json.loads(done.stdout)]

    with socket.socket() as holder:  # the "taken port" cases' port
        holder.bind(("127.0.0.1", W1))
        holder.listen()
        with ThreadPoolExecutor(max_workers=2) as pool:
            halves = list(pool.map(run, [commands[0::2], commands[1::2]]))
    ran = [r for pair in itertools.zip_longest(*halves) for r in pair if r is not None]
    return dict(zip((m.name for m in MISTAKES), ran, strict=True))


def test_there_are_enough_mistakes() -> None:
    assert len(MISTAKES) >= 40
    assert len({m.name for m in MISTAKES}) == len(MISTAKES)


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.name for m in MISTAKES])
def test_a_mistake_says_what_was_wrong_and_what_to_do(
    mistake: Mistake, outcomes: dict[str, Ran]
) -> None:
    ran = outcomes[mistake.name]
    assert "Traceback" not in ran.out, ran.out
    assert ran.code == mistake.code, ran.out
    assert mistake.cause in ran.out, ran.out
    assert mistake.fix in ran.out, ran.out
    assert ran.seconds < mistake.within, ran.seconds


def test_debug_shows_the_traceback_of_an_expected_failure() -> None:
    done = run_cli("--debug", *CALL, "--insecure", "--timeout", "1", env=ENV, timeout=60)
    assert done.returncode == 1
    assert "Traceback" in done.stderr
    assert "PeerUnavailable" in done.stderr
    # and the one line the user needs still comes last
    assert done.stderr.splitlines()[-1].startswith("error: no connection to node 127.0.0.1:")


def test_verbose_shows_every_event_and_log_json_as_json() -> None:
    def run(*flags: str) -> list[str]:
        done = run_cli(*CALL, "--insecure", "--timeout", "1", *flags, env=ENV, timeout=60)
        assert done.returncode == 1
        assert done.stdout == ""  # the answer's place: nothing, as there is none
        return done.stderr.splitlines()

    quiet, verbose, as_json = run(), run("-v"), run("-v", "--log-json")
    # the error, and of the log only its one warning (--insecure is plain TCP)
    assert quiet[0].startswith("warning: node:insecure node=cli warning=plain TCP")
    assert quiet[1].startswith("error: no connection to node")
    assert len(quiet) == 2
    assert any(line.startswith("info: node:ready node=cli") for line in verbose)
    events = [json.loads(line) for line in as_json[:-1]]
    assert "actorctl:node:ready" in {e["message_type"] for e in events}
    assert as_json[-1] == quiet[1]


MODULE_CODE: Final = """
import trio
from actorctl import App

app = App({name!r})

@app.task
def add(x, y):
    return x + y

{tail}
"""
CONNECTS: Final = {
    "connect": 'with app.connect("cluster.toml"):\n    add.delay(1, 2).get(timeout=10)\n',
    "aconnect": (
        "async def main():\n"
        '    async with app.aconnect("cluster.toml"):\n'
        "        await add.adelay(1, 2)\n\n"
        "trio.run(main)\n"
    ),
}


@pytest.mark.parametrize("method", sorted(CONNECTS))
def test_a_node_importing_a_module_that_connects_names_the_line_and_the_place(
    method: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from actorctl import ConfigError
    from actorctl.supervision import import_target, importing_for_node

    monkeypatch.syspath_prepend(str(tmp_path))
    name = f"connects_with_{method}"
    source = tmp_path / f"{name}.py"
    source.write_text(MODULE_CODE.format(name=name, tail=CONNECTS[method]), encoding="utf-8")
    lines = source.read_text(encoding="utf-8").splitlines()
    # the module's own line that made the call: the block, or what runs trio
    line = 1 + next(i for i, text in enumerate(lines) if text.startswith(("with", "trio.run")))
    with pytest.raises(ConfigError) as refused:
        import_target(f"{name}:app")
    assert str(refused.value).startswith(
        f"{source}, line {line}: app.{method}(...) runs as the module is imported, "
        f"and the nodes import this module to host '{name}:app'"
    )
    assert 'under `if __name__ == "__main__":`, or in another module' in str(refused.value)
    assert importing_for_node() is None  # only while the import runs


def test_the_readme_shape_is_imported_by_a_node_and_connects_as_a_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from actorctl.supervision import import_target, importing_for_node

    monkeypatch.syspath_prepend(str(tmp_path))
    tail = 'if __name__ == "__main__":\n    ' + CONNECTS["connect"].replace("\n    ", "\n        ")
    (tmp_path / "readme_shape.py").write_text(
        MODULE_CODE.format(name="readme_shape", tail=tail), encoding="utf-8"
    )
    assert import_target("readme_shape:app").name == "readme_shape"
    assert importing_for_node() is None
