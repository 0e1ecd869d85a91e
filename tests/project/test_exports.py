"""The public API is what actorctl/__init__.py re-exports, once each."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import actorctl

INIT = Path(actorctl.__file__)


def test_every_public_name_is_exported_and_importable() -> None:
    for name in actorctl.__all__:
        assert hasattr(actorctl, name), name
    assert len(set(actorctl.__all__)) == len(actorctl.__all__)


def _imported_names(statements: list[ast.stmt]) -> dict[str, str]:
    """``from .MODULE import NAME as NAME`` among ``statements``: NAME -> .MODULE."""
    return {
        alias.asname or alias.name: "." * node.level + (node.module or "")
        for node in statements
        if isinstance(node, ast.ImportFrom) and node.level  # this package's own
        for alias in node.names
    }


def test_the_lazy_names_are_the_ones_type_checkers_see() -> None:
    # The names imported on first use (PEP 562) and the ``if TYPE_CHECKING:``
    # imports mypy reads must be the same names from the same modules, and
    # with the errors imported at once, exactly ``__all__``.
    body = ast.parse(INIT.read_text()).body
    eager = _imported_names(body)
    [checking] = [
        n for n in body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    ]
    typed = _imported_names(checking.body)
    lazy = {name: module for module, names in actorctl._LAZY.items() for name in names}
    assert typed == lazy
    assert set(eager) | set(lazy) == set(actorctl.__all__)
    assert not set(eager) & set(lazy)


def test_every_public_name_resolves_in_a_fresh_process() -> None:
    # Here the test session has imported everything already; a new process
    # has imported nothing, so each name goes through the lazy import.
    code = (
        "import json, actorctl\n"
        "print(json.dumps({n: getattr(actorctl, n).__class__.__name__ for n in actorctl.__all__}))"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    kinds = json.loads(ran.stdout)
    assert sorted(kinds) == sorted(actorctl.__all__)
    assert kinds["signals"] == "module"
    from actorctl import App, Node, signals  # the `from actorctl import X` form

    assert (App.__name__, Node.__name__, signals.__name__) == ("App", "Node", "actorctl.signals")


def test_importing_actorctl_does_not_import_the_runtime() -> None:
    # `import actorctl` (and every command, which starts with it) stays cheap:
    # the runtime's heavy dependencies load when a name that needs them is used.
    code = "import sys, actorctl\nprint(' '.join(sorted(sys.modules)))"
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(ran.stdout.split())
    heavy = {"trio", "proton", "cryptography", "eliot", "cattrs", "prometheus_client", "sqlite3"}
    assert not heavy & loaded
    assert not {m for m in loaded if m.startswith("actorctl.") and m != "actorctl._errors"}
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        actorctl.not_a_name  # noqa: B018


def test_every_error_shares_one_root() -> None:
    errors = [getattr(actorctl, n) for n in actorctl.__all__ if n.endswith(("Error", "Timeout"))]
    errors += [actorctl.Rejected, actorctl.Modified, actorctl.UnknownActor]
    assert errors
    for error in errors:
        assert issubclass(error, actorctl.ActorctlError), error


def test_layers_import_only_downwards() -> None:
    # cli -> tasks -> cluster -> supervision -> actors -> mailbox
    import ast
    from pathlib import Path

    order = ["mailbox", "actors", "supervision", "cluster", "tasks", "cli"]
    root = Path(actorctl.__file__).parent
    for rank, layer in enumerate(order):
        for path in (root / layer).glob("*.py"):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level >= 2 and node.module:
                    target = node.module.split(".")[0]
                    if target in order:
                        assert order.index(target) < rank, f"{path.name} imports {target}"
