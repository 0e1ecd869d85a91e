"""The ``actorctl`` command imports what a command needs when it runs it.

Its root group (and ``cluster``) names each subcommand's module and one-line
help, and imports the module only when the subcommand is used
(src/actorctl/cli/_lazy.py). What is checked here is structure, not time
(bench/cli_start.py times it): which modules a command's start imports, and
that the help the table gives is the help each command gives itself.
"""

from __future__ import annotations

import json
import subprocess
import sys

import asyncclick as click
import pytest
from asyncclick.utils import make_default_short_help

from actorctl.cli._lazy import LazyGroup
from actorctl.cli._main import cli
from actorctl.cli.run._cluster import cluster

#: What a command's start must not import: the runtime's heavy dependencies,
#: and the runtime and task layer themselves. (trio is imported: asyncclick
#: runs every command, --help too, in trio's event loop.)
HEAVY = (
    "proton",
    "cryptography",
    "eliot",
    "cattrs",
    "prometheus_client",
    "sqlite3",
    "trustme",
    "actorctl.tasks",
    "actorctl.cluster",
    "actorctl.ops",
    "actorctl.store",
    "actorctl.mailbox",
)

_LOADED = """
import json, sys
from actorctl.cli import main
sys.argv = ["actorctl", *json.loads(sys.argv[1])]
try:
    main()
except SystemExit as exc:
    assert exc.code in (0, 2), exc.code
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _modules_after(*args: str) -> set[str]:
    ran = subprocess.run(
        [sys.executable, "-c", _LOADED, json.dumps(args)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    loaded: list[str] = json.loads(ran.stderr.splitlines()[-1])
    return set(loaded)


@pytest.mark.parametrize(
    "args",
    [("--help",), ("call", "--help"), ("send", "--help"), ("node", "run", "--help"), ("call",)],
    ids=" ".join,
)
def test_a_command_s_help_and_usage_errors_import_no_runtime(args: tuple[str, ...]) -> None:
    loaded = _modules_after(*args)
    heavy = sorted(m for m in loaded for h in HEAVY if m == h or m.startswith(h + "."))
    assert heavy == []


def test_the_entry_point_imports_no_command_module() -> None:
    code = "import sys, actorctl.cli\nprint(sorted(m for m in sys.modules if 'actorctl' in m))"
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    entry = ["actorctl", "actorctl._errors", "actorctl.cli", "actorctl.cli._lazy"]
    output = ["actorctl.cli.output", "actorctl.cli.output._errors"]
    assert ran.stdout.strip() == str([*entry, "actorctl.cli._main", *output])


def _lazy_groups() -> list[tuple[str, LazyGroup]]:
    assert isinstance(cli, LazyGroup)
    assert isinstance(cluster, LazyGroup)
    return [("actorctl", cli), ("actorctl cluster", cluster)]


@pytest.mark.parametrize("limit", [30, 45, 60, 200])
def test_each_table_line_is_the_help_its_command_gives(limit: int) -> None:
    for prefix, group in _lazy_groups():
        for name, lazy in group.lazy.items():
            command = lazy.load()
            assert command.name == name, f"{prefix} {name}"
            assert make_default_short_help(lazy.help, limit) == command.get_short_help_str(limit), (
                f"{prefix} {name}: the table's help is not the command's first sentence"
            )


def _listing(group: click.Group) -> str:
    formatter = click.HelpFormatter(width=100)
    group.format_commands(click.Context(group, info_name=group.name), formatter)
    return formatter.getvalue()


def test_the_root_help_lists_every_command_as_if_each_were_imported() -> None:
    for _, group in _lazy_groups():
        eager = {n: c for n, c in group.commands.items() if n not in group.lazy}
        unloaded = LazyGroup(group.name, lazy=group.lazy, commands=eager)
        loaded = click.Group(
            group.name, commands={**eager, **{n: it.load() for n, it in group.lazy.items()}}
        )
        assert _listing(unloaded) == _listing(loaded)
        assert all(f"  {name} " in _listing(unloaded) for name in group.lazy)
