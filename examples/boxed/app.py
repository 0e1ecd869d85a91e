"""Boxed workers in four languages serving one cluster's task pools (docs/boxed.md).

examples/boxed/boxed.toml runs one node with four pools, each served by
long-lived supervised processes speaking the boxed protocol: ``js`` (plain
Node.js, worker.js), ``c`` (worker.c, built with the system compiler by
run_c.sh), ``sh`` (POSIX shell, worker.sh) and ``python``, whose tasks are the
``boxed=True`` tasks below, run by the Python reference worker
(``python -m actorctl.tasks.worker._boxed``). The foreign handlers exist only in their
processes: a caller reaches them by name, ``app.send_task("add", [1, 2],
pool="js")``. Run it from the repository's root with ``python -m
examples.boxed.app``: it starts the cluster, calls every pool, and stops it.
"""

from __future__ import annotations

from pathlib import Path

from actorctl import App

app = App("boxed")
app.pool("python", concurrency=4)  # js, c and sh: as their [[boxed]] workers say


@app.task(pool="python", boxed=True)
def add(a: int, b: int) -> int:
    return a + b


@app.task(pool="python", boxed=True)
def fail(message: str) -> None:
    raise ValueError(message)


HERE = Path(__file__).resolve().parent


def cluster_text() -> str:
    """boxed.toml, its workers' ``cwd = "."`` made absolute: the file is run
    from a copy elsewhere (``running_cluster``)."""
    return HERE.joinpath("boxed.toml").read_text().replace('cwd = "."', f'cwd = "{HERE}"')


def main() -> None:
    import tempfile

    from examples._cluster import running_cluster

    with tempfile.TemporaryDirectory() as directory:
        toml = Path(directory) / "boxed.toml"
        toml.write_text(cluster_text())
        with running_cluster(toml) as cluster, app.connect(cluster):
            call_every_pool()
    print("cluster stopped")


def call_every_pool() -> None:
    print(f"python: add.delay(1, 2).get() == {add.delay(1, 2).get(timeout=30)}")
    for pool in ("js", "c", "sh"):
        value = app.send_task("add", [1, 2], pool=pool).get(timeout=30)
        greeting = app.send_task("greet", ["world"], pool=pool).get(timeout=30)
        print(f"{pool}: add(1, 2) == {value}; greet('world') == {greeting!r}")
        try:
            app.send_task("fail", ["on purpose"], pool=pool).get(timeout=30)
        except Exception as exc:
            print(f"{pool}: fail('on purpose') raised {exc}")


if __name__ == "__main__":
    main()
