"""The layer order of docs/architecture.md, checked on the source itself.

cli -> tasks -> cluster -> supervision -> actors -> mailbox: a layer imports
only the layers below it, the runtime (mailbox to cluster) never imports the
task layer, and no module imports another that imports it back (imports made
only for type checking count too: they are a cycle a reader has to untangle).
"""

from __future__ import annotations

import ast
from pathlib import Path

import actorctl

SRC = Path(actorctl.__file__).parent
# ``testing`` (the kit for apps' tests) uses the task layer; nothing but tests uses it.
LAYERS = ["mailbox", "actors", "supervision", "cluster", "tasks", "testing", "cli"]
RUNTIME = {"mailbox", "actors", "supervision", "cluster"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every actorctl module ``path`` imports, resolved to module names."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("actorctl"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("actorctl"):
                continue
            for alias in node.names:
                # `from . import _raw` imports a module; `from ._x import Y` a name.
                candidate = f"{target}.{alias.name}"
                found.add(candidate if candidate in MODULES else target)
    return {name for name in found if name in MODULES}


MODULES = {_module_name(p): p for p in SRC.rglob("*.py")}
GRAPH = {name: _imports(path) for name, path in MODULES.items()}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def test_the_runtime_never_imports_the_task_layer() -> None:
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if _layer(module) in RUNTIME
        for target in targets
        if _layer(target) == "tasks"
    )
    assert wrong == []


def test_no_layer_imports_a_layer_above_it() -> None:
    wrong = []
    for module, targets in GRAPH.items():
        mine = _layer(module)
        if mine is None:
            continue
        for target in targets:
            theirs = _layer(target)
            if theirs is not None and LAYERS.index(theirs) > LAYERS.index(mine):
                wrong.append(f"{module} ({mine}) imports {target} ({theirs})")
    assert sorted(wrong) == []


def test_no_module_imports_one_that_imports_it_back() -> None:
    # Package __init__ files re-export their package's modules: an edge into a
    # package's own __init__ from inside it is the re-export, not a cycle.
    def edges(module: str) -> set[str]:
        direct = {t for t in GRAPH[module] if not (module.startswith(t + ".") and t != "actorctl")}
        return direct | {p for t in GRAPH[module] for p in _packages_run(module, t)}

    cycles: set[tuple[str, ...]] = set()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(edges(module)):
            if state.get(target) == 1:
                cycle = stack[stack.index(target) :]
                turn = cycle.index(min(cycle))
                cycles.add(tuple(cycle[turn:] + cycle[:turn]))
            elif target not in state:
                visit(target)
        stack.pop()
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module)
    assert sorted(" -> ".join(c) for c in cycles) == []


def _packages_run(module: str, target: str) -> set[str]:
    """The packages whose ``__init__`` importing ``target`` runs first, that
    ``module`` is not inside (``actorctl.tasks`` for ``actorctl.tasks._signals``
    imported from ``actorctl.signals``): Python imports a module's packages
    before it, so they are edges of the graph too."""
    parts = target.split(".")
    packages = {".".join(parts[:i]) for i in range(2, len(parts))}
    return {p for p in packages if p in GRAPH and not f"{module}.".startswith(f"{p}.")}


def test_a_cycle_through_a_package_init_is_seen() -> None:
    # A guard on the cycle check: importing actorctl.tasks._signals runs
    # actorctl/tasks/__init__.py first, whatever imports it.
    assert _packages_run("actorctl.signals", "actorctl.tasks._signals") == {"actorctl.tasks"}
    assert _packages_run("actorctl.tasks._hooks", "actorctl.tasks._signals") == set()


def test_the_checks_see_real_imports() -> None:
    # A guard on the checker itself: it must find the imports that do exist.
    assert "actorctl.mailbox._envelope" in GRAPH["actorctl.cluster._peer"] or any(
        t.startswith("actorctl.mailbox") for t in GRAPH["actorctl.cluster._peer"]
    )
    assert "actorctl.cluster._raw" in GRAPH["actorctl.cluster._peer"]


# What a module of the task layer may hold at module level: constants and names.
# A ContextVar is task-local (it carries the client or the time limits through
# one running task), not state shared between callers.
# A Signal (tasks/_signals.py) is the one documented exception: the module-level
# registry of receivers that Celery projects expect (docs/celery.md).
_IMMUTABLE_CALLS = {"frozenset", "MappingProxyType", "ContextVar", "TypeVar", "compile", "Signal"}


def _mutable_at_module_level(path: Path) -> list[str]:
    """Module-level values of ``path`` that can change: containers, counters, memos."""
    found = []
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for decorator in node.decorator_list:
                if "cache" in ast.unparse(decorator):
                    found.append(f"{path.name}:{node.lineno} @{ast.unparse(decorator)}")
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if value is None or ast.unparse(target) == "__all__":
            continue
        mutable = isinstance(
            value, ast.Dict | ast.List | ast.Set | ast.DictComp | ast.ListComp | ast.SetComp
        )
        if isinstance(value, ast.Call):
            called = ast.unparse(value.func).rpartition(".")[2]
            mutable = called not in _IMMUTABLE_CALLS
        if mutable:
            found.append(f"{path.name}:{node.lineno} {ast.unparse(node)[:60]}")
    return found


def test_the_task_layer_holds_no_module_level_mutable_state() -> None:
    found = [
        m
        for layer in ("tasks", "testing")
        for path in sorted((SRC / layer).glob("*.py"))
        for m in _mutable_at_module_level(path)
    ]
    assert not found, (
        f"module-level mutable state (give it an owner, or make it immutable): {found}"
    )


def test_no_module_of_the_task_layer_or_the_cluster_is_over_500_lines() -> None:
    # STYLE.md: small modules, one concern each.
    long = {
        f"{path.parent.name}/{path.name}": lines
        for layer in ("tasks", "cluster", "testing")
        for path in sorted((SRC / layer).glob("*.py"))
        if (lines := len(path.read_text().splitlines())) > 500
    }
    assert not long, f"split these by concern: {long}"
