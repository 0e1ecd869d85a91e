"""The README's task snippet put in one module as written: the app, and the
block that connects at the module's top level. The nodes import this module
(``actors = "tests.apps.connects_on_import_app:app"``), so ``cluster up`` refuses it,
saying where the block belongs (tests/cli/test_mistakes.py).
"""

from __future__ import annotations

from actorctl import App

app = App("connects")


@app.task
def add(x: int, y: int) -> int:
    return x + y


with app.connect("cluster.toml"):  # wrong here: runs as a node imports the module
    assert add.delay(1, 2).get(timeout=10) == 3
