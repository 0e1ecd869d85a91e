"""The public API is what actorctl/__init__.py re-exports, once each."""

from __future__ import annotations

import actorctl


def test_every_public_name_is_exported_and_importable() -> None:
    for name in actorctl.__all__:
        assert hasattr(actorctl, name), name
    assert len(set(actorctl.__all__)) == len(actorctl.__all__)


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
