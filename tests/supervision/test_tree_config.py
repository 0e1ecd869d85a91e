"""[[supervisor]] tables in cluster.toml: trees as data, mistakes named."""

from __future__ import annotations

from pathlib import Path

import pytest

from actorctl import ActorSpec, ConfigError, ProcessSpec, Restart, Strategy, SupervisorSpec
from actorctl.cluster import load_cluster

NODE = '[[node]]\nname = "n1"\nlisten = "127.0.0.1:5801"\n'
TREE = """
[[supervisor]]
name = "top"
node = "n1"
strategy = "rest_for_one"
max_restarts = 2
within = 3.0
  [[supervisor.child]]
  actor = "tests.apps.actors:Calculator"
  name = "calc"
  restart = "transient"
  [[supervisor.child]]
  supervisor = "inner"
[[supervisor]]
name = "inner"
strategy = "one_for_all"
  [[supervisor.child]]
  process = ["python3", "-V"]
  name = "version"
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cluster.toml"
    path.write_text(NODE + text)
    return path


def test_a_two_level_tree_is_read_and_built_on_its_node(tmp_path: Path) -> None:
    config = load_cluster(_write(tmp_path, TREE))
    node = config.node("n1")
    assert node.supervisors == ("top",)
    [top] = config.supervisor_specs(node)
    assert isinstance(top, SupervisorSpec)
    assert (top.strategy, top.max_restarts, top.within) == (Strategy.REST_FOR_ONE, 2, 3.0)
    calc, inner = top.children
    assert isinstance(calc, ActorSpec)
    assert (calc.child_name, calc.restart) == ("calc", Restart.TRANSIENT)
    assert isinstance(inner, SupervisorSpec)
    assert inner.strategy is Strategy.ONE_FOR_ALL
    assert inner.children == (ProcessSpec("version", ("python3", "-V")),)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ('strategy = "rest_for_one"', 'stratgy = "rest_for_one"'),
            r"no such key 'supervisor\[0\]\.stratgy' \(= .*\): did you mean 'strategy'\?",
        ),
        (
            ('strategy = "rest_for_one"', 'strategy = ["rest_for_one"]'),
            r"key 'supervisor\[0\]\.strategy': expected one of .*got \['rest_for_one'\]",
        ),
        (
            ('strategy = "rest_for_one"', 'strategy = "rest_for_all"'),
            r"key 'supervisor\[0\]\.strategy': expected one of \['one_for_one', 'one_for_all', "
            r"'rest_for_one'\], got 'rest_for_all'",
        ),
        (
            ('node = "n1"', 'node = "n9"'),
            r"key 'supervisor\[0\]\.node': expected one of the nodes \['n1'\], got 'n9'",
        ),
        (
            ('supervisor = "inner"', 'supervisor = "innr"'),
            r"key 'supervisor\[0\]\.child\[1\]\.supervisor': "
            r"expected the name of a \[\[supervisor\]\]",
        ),
        (
            ('restart = "transient"', 'restart = "sometimes"'),
            r"key 'supervisor\[0\]\.child\[0\]\.restart': expected one of \['permanent'",
        ),
        (
            ('actor = "tests.apps.actors:Calculator"', 'actor = "Calculator"'),
            r"key 'supervisor\[0\]\.child\[0\]\.actor'",
        ),
        (
            ('  supervisor = "inner"\n', '  supervisor = "top"\n'),
            r"child\[1\]\.supervisor': expected a supervisor that does not contain this one "
            r"\(a cycle\)",
        ),
    ],
)
def test_mistakes_name_the_file_the_key_and_the_fix(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    path = _write(tmp_path, TREE.replace(*change))
    with pytest.raises(ConfigError, match=message) as caught:
        load_cluster(path)
    assert str(caught.value).startswith(str(path))


def test_a_supervisor_without_a_node_must_be_nested(tmp_path: Path) -> None:
    path = _write(tmp_path, TREE.replace('  [[supervisor.child]]\n  supervisor = "inner"\n', ""))
    with pytest.raises(ConfigError, match=r"'inner' has no node and no other supervisor nests it"):
        load_cluster(path)
