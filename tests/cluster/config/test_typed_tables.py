"""The values of cluster.toml's tables that were once read as they came and
checked by hand are typed now, read by the converter (issue 29, item 5):
``[[periodic]]``'s interval, expiry, args and kwargs, ``[[source]]``'s poll
and settings, ``[[boxed]]``'s command (a program or a list), args, cwd and
env, ``[[router]]``'s instances. A string is never a list of its letters,
and a wrong value is named by its key's path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actorctl import ConfigError
from actorctl.cluster import ClusterConfig, load_cluster
from actorctl.tasks import cluster_app
from actorctl.tasks._cluster_tables import PeriodicTable, SourceTable

NODE = '[[node]]\nname = "n1"\nlisten = "127.0.0.1:5701"\n'
BOXED = '[[boxed]]\nname = "js"\nnode = "n1"\n'
PERIODIC = '[[periodic]]\nname = "p"\ntask = "t.ping"\n'
SOURCE = '[[source]]\nname = "s"\nkind = "m:Src"\ntask = "t.ping"\n'


def _load(tmp_path: Path, text: str, app: Any = None) -> ClusterConfig:
    path = tmp_path / "cluster.toml"
    path.write_text(text)
    return load_cluster(path, app)


def _refused(tmp_path: Path, text: str, app: Any = None) -> str:
    with pytest.raises(ConfigError) as refused:
        _load(tmp_path, text, app)
    return str(refused.value)


def test_a_boxed_workers_command_is_a_program_or_a_list_and_its_env_may_be_empty(
    tmp_path: Path,
) -> None:
    # Given a program with args, and a command line with an environment
    text = (
        NODE
        + BOXED
        + 'command = "node"\nargs = ["w.js", "-v"]\ncwd = "sub"\n'
        + '[[boxed]]\nname = "sh"\nnode = "n1"\ncommand = ["sh", "w.sh"]\n'
        + 'env = { MODE = "", LEVEL = "2" }\n'
    )
    # Then each is read into its spec's command line (an empty variable is an
    # environment's own), cwd beside the file
    js, sh = (spec for _, spec in _load(tmp_path, text).boxed)
    assert js.command == ("node", "w.js", "-v")
    assert js.cwd == str(tmp_path.resolve() / "sub")
    assert sh.command == ("sh", "w.sh")
    assert dict(sh.env or {}) == {"MODE": "", "LEVEL": "2"}


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ("command = []", "key 'boxed[0].command': expected a program, or a list like"),
        ('command = ["node", 3]', "key 'boxed[0].command': expected a program, or a list like"),
        ('command = ["node", ""]', "key 'boxed[0].command': expected a program, or a list like"),
        ('command = { a = "b" }', "key 'boxed[0].command': expected a program, or a list like"),
        (
            'command = "node"\nargs = "w.js"',
            "key 'boxed[0].args': expected a list of strings, got 'w.js'",
        ),
        (
            'command = "node"\nargs = ["w.js", ""]',
            "key 'boxed[0].args': expected a list of strings, got ['w.js', '']",
        ),
        (
            'command = "node"\nenv = { A = 1 }',
            "key 'boxed[0].env': expected a table of strings, got {'A': 1}",
        ),
        (
            'command = "node"\ncwd = 3',
            "key 'boxed[0].cwd': expected a directory (relative to the cluster file), got 3",
        ),
    ],
)
def test_a_boxed_workers_wrong_command_args_env_or_cwd_is_named_by_its_path(
    tmp_path: Path, table: str, says: str
) -> None:
    assert says in _refused(tmp_path, NODE + BOXED + table + "\n")


def test_a_routers_instances_are_a_tuple_of_strings(tmp_path: Path) -> None:
    text = NODE + '[[router]]\nname = "r"\nnode = "n1"\ninstances = ["n1/a", "n1/b"]\n'
    assert _load(tmp_path, text).nodes[0].routes == (("r", ("n1/a", "n1/b")),)
    for wrong in ("[]", "[1]", '"n1/a"'):
        text = NODE + f'[[router]]\nname = "r"\nnode = "n1"\ninstances = {wrong}\n'
        said = _refused(tmp_path, text)
        assert "key 'router[0].instances': expected a list like [\"n1/emails\"]" in said


def test_a_periodic_and_a_source_tables_values_are_read_into_their_types(
    tmp_path: Path,
) -> None:
    text = (
        NODE
        + PERIODIC
        + "every = 60\nexpires = 30\nargs = [1, [2]]\nkwargs = { a = { b = 1 } }\n"
        + SOURCE
        + "poll = 2\nsettings = { depth = 3 }\n"
    )
    config = _load(tmp_path, text, cluster_app())
    (periodic,) = config.records("periodic", PeriodicTable)
    assert (periodic.every, periodic.expires) == (60.0, 30.0)
    assert isinstance(periodic.every, float)
    assert periodic.args == (1, [2])
    assert periodic.kwargs == {"a": {"b": 1}}
    (source,) = config.records("source", SourceTable)
    assert source.poll == 2.0
    assert isinstance(source.poll, float)
    assert source.settings == {"depth": 3}


@pytest.mark.parametrize(
    ("table", "says"),
    [
        (PERIODIC + 'every = "5m"', "key 'periodic[0].every': expected seconds > 0, got '5m'"),
        (PERIODIC + "every = true", "key 'periodic[0].every': expected seconds > 0, got True"),
        (PERIODIC + "every = 0", "key 'periodic[0].every': expected seconds > 0, got 0"),
        (
            PERIODIC + 'every = 1\nexpires = "soon"',
            "key 'periodic[0].expires': expected seconds > 0, got 'soon'",
        ),
        (PERIODIC + 'every = 1\nargs = "x"', "key 'periodic[0].args': expected a list, got 'x'"),
        (
            PERIODIC + "every = 1\nkwargs = [1]",
            "key 'periodic[0].kwargs': expected a table of keyword arguments, got [1]",
        ),
        (SOURCE + 'poll = "fast"', "key 'source[0].poll': expected seconds > 0, got 'fast'"),
        (SOURCE + "poll = -1", "key 'source[0].poll': expected seconds > 0, got -1"),
        (SOURCE + 'settings = "x"', "key 'source[0].settings': expected a table, got 'x'"),
    ],
)
def test_a_periodic_or_source_tables_wrong_value_is_named_by_its_path(
    tmp_path: Path, table: str, says: str
) -> None:
    assert says in _refused(tmp_path, NODE + table + "\n", cluster_app())
