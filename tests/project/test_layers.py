"""The layer order of docs/architecture.md, checked on the source itself.

cli -> testing -> tasks -> ops -> cluster -> etcd -> store -> supervision ->
actors -> mailbox: a layer imports only the layers below it, the runtime
(mailbox to ops) never imports the task layer, and no module imports another
that imports it back (imports made only for type checking count too: they are a
cycle a reader has to untangle).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import actorctl

SRC = Path(actorctl.__file__).parent
# ``testing`` (the kit for apps' tests) uses the task layer; nothing but tests uses it.
LAYERS = [
    "mailbox",
    "actors",
    "supervision",
    "store",
    "etcd",
    "cluster",
    "ops",
    "tasks",
    "testing",
    "cli",
]
RUNTIME = {"mailbox", "actors", "supervision", "store", "etcd", "cluster", "ops"}


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
    ``module`` is not inside (``actorctl.tasks`` for ``actorctl.tasks.app._signals``
    imported from ``actorctl.signals``): Python imports a module's packages
    before it, so they are edges of the graph too."""
    parts = target.split(".")
    packages = {".".join(parts[:i]) for i in range(2, len(parts))}
    return {p for p in packages if p in GRAPH and not f"{module}.".startswith(f"{p}.")}


def test_a_cycle_through_a_package_init_is_seen() -> None:
    # A guard on the cycle check: importing actorctl.tasks.app._signals runs
    # actorctl/tasks/__init__.py and tasks/app/__init__.py first, whatever imports it.
    assert _packages_run("actorctl.signals", "actorctl.tasks.app._signals") == {
        "actorctl.tasks",
        "actorctl.tasks.app",
    }
    assert _packages_run("actorctl.tasks.app._task", "actorctl.tasks.app._signals") == set()


def test_the_checks_see_real_imports() -> None:
    # A guard on the checker itself: it must find the imports that do exist.
    assert "actorctl.mailbox._envelope" in GRAPH["actorctl.cluster.link.peer._peer"] or any(
        t.startswith("actorctl.mailbox") for t in GRAPH["actorctl.cluster.link.peer._peer"]
    )
    assert "actorctl.cluster.link._raw" in GRAPH["actorctl.cluster.link.peer._peer"]


# What a module of the task layer may hold at module level: constants and names.
# A ContextVar is task-local (it carries the client or the time limits through
# one running task), not state shared between callers.
# A Signal (tasks/app/_signals.py) is the one documented exception: the module-level
# registry of receivers that Celery projects expect (docs/celery.md).
_IMMUTABLE_CALLS = {"frozenset", "MappingProxyType", "ContextVar", "TypeVar", "compile", "Signal"}
_IMMUTABLE_CALLS |= {"CounterSchema"}  # a frozen attrs record (actors/_counters.py)


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
        for path in sorted((SRC / layer).rglob("*.py"))
        for m in _mutable_at_module_level(path)
    ]
    assert not found, (
        f"module-level mutable state (give it an owner, or make it immutable): {found}"
    )


# A folder holds one concern and stays small enough to see at a glance
# (docs/architecture.md: 20 modules at most). A module is sized by its concern: past
# ~500 lines a reviewer reads it as a signal to split it by concern, never as a
# number to squeeze under. MODULE_CEILING is far above that, a smoke detector
# for a module that has grown two concerns nobody split, not a target.
FOLDER_MODULES = 20
MODULE_CEILING = 700


def test_every_folder_is_small_enough_to_see_at_a_glance() -> None:
    crowded = {
        str(folder.relative_to(SRC)): count
        for folder in sorted({p.parent for p in SRC.rglob("*.py")})
        if (count := len([p for p in folder.glob("*.py") if p.name != "__init__.py"]))
        > FOLDER_MODULES
    }
    assert not crowded, f"split these folders by concern: {crowded}"


def test_no_module_has_grown_past_the_ceiling() -> None:
    # Splitting by concern is the remedy; cutting docs or comments is not.
    grown = {
        str(path.relative_to(SRC)): lines
        for path in sorted(SRC.rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MODULE_CEILING
    }
    assert not grown, f"split these modules by concern: {grown}"


def test_the_layers_named_here_are_the_packages_that_exist() -> None:
    # A guard: a new top-level package must be given its place in the order.
    packages = {p.parent.name for p in SRC.glob("*/__init__.py")}
    assert packages == set(LAYERS)


# What the task layer reaches runtime objects by: names that hold one.
_RUNTIME_HOLDERS = re.compile(r"\b(outbox|cell|node|backlog|store|settings|supervisor|engine)\b")
# ... and what the task layer used to reach for on them.
_RUNTIME_ATTRIBUTES = frozenset({"store", "backlog", "settings", "hand_over", "outbox", "keyring"})


def _getattr_on_runtime_objects(path: Path) -> list[str]:
    """Each ``getattr``/``hasattr`` in ``path`` on a name that holds a runtime object."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id in {"getattr", "hasattr"} and node.args:
            words = ast.unparse(node.args[0]).replace(".", " ").replace("_", " ")
            attribute = node.args[1] if len(node.args) > 1 else None
            named = isinstance(attribute, ast.Constant) and attribute.value in _RUNTIME_ATTRIBUTES
            if _RUNTIME_HOLDERS.search(words) or named:
                found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    return found


def test_the_task_layer_uses_the_runtime_through_typed_interfaces() -> None:
    # A getattr on an outbox or a cell is an interface nobody declared: it
    # fails silently (a store in memory instead of the node's) when the
    # runtime renames what it reaches for.
    found = [
        hit
        for layer in ("tasks", "testing")
        for path in sorted((SRC / layer).rglob("*.py"))
        for hit in _getattr_on_runtime_objects(path)
    ]
    assert found == []


def test_the_getattr_check_sees_a_getattr_on_an_outbox(tmp_path: Path) -> None:
    # A guard on the check itself: the form the task layer used before.
    probe = tmp_path / "probe.py"
    probe.write_text(
        'store = getattr(self._require_cell().outbox, "store", None)\n'
        'backlog = getattr(client.thing, "backlog", None)\n'
    )
    assert len(_getattr_on_runtime_objects(probe)) == 2


# The task layer's words: its role and actor names, its cluster.toml tables,
# the names of its services. The runtime (mailbox to ops) holds none of them,
# in code or in a string: the task layer declares its tables, roles and
# checks through ClusterApp (cluster/config/_app.py, tasks/_cluster_app.py).
# Docstrings and comments may mention the task layer (they explain it), and
# words the runtime owns as well (a router's pool, a trio task) are not here.
TASK_WORDS = frozenset({"beat", "periodic", "scheduler", "services", "chord", "chords"})
# Strings that are one of the task layer's words whole: its cluster.toml keys,
# its package's name and its control actor's. Within a name or a sentence they
# are the runtime's too (a router's pools, a trio task), as a key or a value
# alone they are not (the node record named its workers "pools" before issue
# 29). With TASK_WORDS these are the words the project's structure check looks
# for, in every layer of the runtime, the ops tier too: the web page's task
# actions and the task counters' names and label are the task layer's to
# declare (its AppPage: tasks/_page.py), since issue 29.
TASK_STRINGS = frozenset({"pools", "source", "sources", "task", "tasks", "_tasks"})
STRINGS_CHECKED = RUNTIME
TASK_PREFIXES = ("source.", "[[periodic", "[[source", "[[task", "actorctl_task_")


def _task_words(path: Path, root: Path = SRC, *, strings: bool = True) -> list[str]:
    """Each identifier or string of ``path`` (not a docstring) that holds a task
    word (``strings``: or is one of TASK_STRINGS whole)."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) in docstrings:
                continue
            text = node.value.lower()
            words = set(re.findall(r"[a-z]+", text))
            whole = strings and text in TASK_STRINGS
            if words & TASK_WORDS or whole or any(p in text for p in TASK_PREFIXES):
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.value[:50]!r}")
        else:
            name = _name_of(node)
            if name and set(_words_of(name)) & TASK_WORDS:
                found.append(f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)} {name}")
    return found


def _name_of(node: ast.AST) -> str | None:
    """The name a node gives or uses: a variable, an attribute, a parameter, a
    keyword argument, a function, a class."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.arg | ast.keyword):
        return node.arg
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name
    return None


def _words_of(name: str) -> list[str]:
    """``snake_case`` and ``CamelCase`` names, in lower-case words."""
    return [w.lower() for w in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])", name)]


def test_the_runtime_knows_no_word_of_the_task_layer() -> None:
    found = [
        hit
        for layer in sorted(RUNTIME)
        for path in sorted((SRC / layer).rglob("*.py"))
        for hit in _task_words(path, strings=layer in STRINGS_CHECKED)
    ]
    assert found == []


# The task layer's words in the web page's HTML (ops/_page.html): its control
# actions and its runs' states. (The page's Task section is a trace of an
# eliot task, the runtime's word as much as the task layer's; ``retry`` is the
# page's own action, of a dead letter.)
PAGE_WORDS = re.compile(r"\b(revoke|suspend|SUCCESS|FAILURE|REVOKED|RETRY)\b")


def _page_words(path: Path) -> list[str]:
    """Each line of ``path`` that holds one of PAGE_WORDS or TASK_WORDS."""
    found = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        words = set(re.findall(r"[a-z]+", line.lower()))
        if PAGE_WORDS.search(line) or words & TASK_WORDS:
            found.append(f"{path.name}:{number} {line.strip()[:60]}")
    return found


def test_the_web_page_knows_no_word_of_the_task_layer() -> None:
    # The task layer's forms and colours are its page script's (tasks/_page.js).
    found = [hit for path in sorted((SRC / "ops").glob("*.html")) for hit in _page_words(path)]
    assert found == []


def test_the_page_word_check_sees_an_action_form(tmp_path: Path) -> None:
    # A guard on the check itself: what the page held before issue 29.
    probe = tmp_path / "probe.html"
    probe.write_text(
        '<form id="revokeform"><button>revoke</button></form>\n'
        ".SUCCESS { color: #060; }\n"
        "<button onclick=\"control('retry')\">retry</button>\n"
    )
    assert [hit.partition(" ")[0] for hit in _page_words(probe)] == ["probe.html:1", "probe.html:2"]


def test_the_task_word_check_sees_a_role_name_and_a_table(tmp_path: Path) -> None:
    # A guard on the check itself: what the runtime held before.
    probe = tmp_path / "probe.py"
    probe.write_text(
        'SCHEDULER_ROLE = "scheduler"\nKEYS = {"periodic": 1}\nname = "source." + x\n'
        "class BeatLease: ...\nasync def schedules(chords=1): ...\nf(services=2)\n"
        'body.get("pools", {})\nlog("the pools of a router", pools=1)\n'
        'AGENT = "_tasks"\nNAMED = {"actorctl_task_messages_failed_total": 1}\n'
    )
    found = {hit.partition(" ")[2] for hit in _task_words(probe, tmp_path)}
    assert found == {
        *("SCHEDULER_ROLE", "'scheduler'", "'periodic'", "'source.'", "BeatLease"),
        *("chords", "services", "'pools'", "'_tasks'", "'actorctl_task_messages_failed_total'"),
    }


def test_proton_is_wrapped_once_in_the_link_package() -> None:
    # One vocabulary per foreign object: proton's C engine (lib.pn_*) and the
    # raw pointers behind its Python wrappers (._impl) are the link's alone.
    link = SRC / "cluster" / "link"
    found = [
        f"{path.relative_to(SRC)}:{number}"
        for path in sorted(SRC.rglob("*.py"))
        if link not in path.parents
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\blib\.pn_|\._impl\b|\bcproton\b", line)
    ]
    assert found == []
