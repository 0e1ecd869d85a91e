"""Benchmark: a trivial handler in a boxed worker against the same in Python.

    python bench/boxed.py                 # a table of calls/s and ratios
    python bench/boxed.py --seconds 2 --json
    python bench/boxed.py --smoke         # does it still run? (tests/project/test_bench_smoke.py)

``add(a, b)`` runs (1) as a Python function called in-process from trio (the
baseline: no IPC at all), and as a boxed worker's handler (docs/boxed.md)
called through :meth:`actorctl.supervision.Boxed.call`, with ``--callers``
requests kept in flight, in (2) C (examples/boxed/worker.c, built with cc),
(3) Node.js (examples/boxed/worker.js) and (4) the Python reference worker.
Each boxed figure is its calls/s over the same window; the ratio is boxed
calls/s over in-process calls/s. A language whose program is missing (node,
cc) is left out, named. One process per worker; no cluster: this measures the
protocol and the process boundary, not the message path.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from actorctl.supervision import Boxed, BoxedSpec  # noqa: E402
from bench import _smoke  # noqa: E402

PYTHON_WORKER = """
from actorctl.tasks.worker._boxed import serve
serve({"add": lambda a, b: a + b}, concurrency=1)
"""


def add(a: int, b: int) -> int:
    return a + b


async def in_process(seconds: float) -> float:
    calls = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for i in range(1000):
            add(i, 1)
        calls += 1000
        await trio.lowlevel.checkpoint()  # as a handler run by an actor would yield
    return calls / seconds


async def boxed(command: tuple[str, ...], seconds: float, callers: int) -> float:
    spec = BoxedSpec("bench", command, heartbeat=0)
    worker = Boxed(spec)
    calls = 0
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.supervise)
        assert await worker.call("add", [1, 2], {}) == 3

        async def caller() -> None:
            nonlocal calls
            while True:
                await worker.call("add", [calls, 1], {})
                calls += 1

        started = time.perf_counter()
        with trio.move_on_after(seconds):
            async with trio.open_nursery() as callers_nursery:
                for _ in range(callers):
                    callers_nursery.start_soon(caller)
        elapsed = time.perf_counter() - started
        nursery.cancel_scope.cancel()
    return calls / elapsed


def workers(directory: Path) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    found: dict[str, tuple[str, ...]] = {}
    missing: dict[str, str] = {}
    if shutil.which("cc"):
        binary = directory / "worker-c"
        source = ROOT / "examples" / "boxed" / "worker.c"
        subprocess.run(["cc", "-O2", "-o", str(binary), str(source)], check=True)
        found["C"] = (str(binary),)
    else:
        missing["C"] = "cc is not installed"
    if shutil.which("node"):
        found["Node.js"] = ("node", str(ROOT / "examples" / "boxed" / "worker.js"))
    else:
        missing["Node.js"] = "node is not installed"
    found["Python (reference worker)"] = (sys.executable, "-c", PYTHON_WORKER)
    return found, missing


async def measure(seconds: float, callers: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as directory:
        found, missing = workers(Path(directory))
        base = await in_process(seconds)
        figures = {name: await boxed(cmd, seconds, callers) for name, cmd in found.items()}
    return {
        "in_process_calls_per_s": base,
        "boxed_calls_per_s": figures,
        "ratios": {name: value / base for name, value in figures.items()},
        "missing": missing,
        "seconds": seconds,
        "callers": callers,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per measurement")
    parser.add_argument("--callers", type=int, default=16, help="requests kept in flight")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    options = _smoke.parse_args(parser, seconds=0.2, callers=4)
    result = trio.run(measure, options.seconds, options.callers)
    if options.json:
        print(json.dumps(result))
        return
    base = result["in_process_calls_per_s"]
    print(f"add(a, b), {options.callers} requests in flight, {options.seconds:g} s each")
    print(f"{'handler':<28}{'calls/s':>14}{'ratio':>10}")
    print(f"{'Python, in-process':<28}{base:>14,.0f}{1:>10.4f}")
    for name, value in result["boxed_calls_per_s"].items():
        print(f"{'boxed ' + name:<28}{value:>14,.0f}{result['ratios'][name]:>10.4f}")
    for name, why in result["missing"].items():
        print(f"{'boxed ' + name:<28}{'skipped: ' + why:>24}")
    _smoke.print_json(options, result)


if __name__ == "__main__":
    main()
