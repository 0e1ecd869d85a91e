"""Benchmark: the durable store on against ``durable = false``, in the same run.

    python bench/durable.py            # a table of figures and ratios
    python bench/durable.py --json     # one JSON object
    python bench/durable.py --smoke    # does it still run? (tests/project/test_bench_smoke.py)

A cluster of a services node (the pool's router, the scheduler, the chord
barrier) and one worker node (bench/_task_app.py's pool, concurrency 1), run
with ``actorctl cluster up``, once with every node's store on disk (SQLite under
the cluster's data directory: the default) and once with ``durable = false``,
alternating for ``--rounds`` rounds; each figure is the median of its rounds.
From trio code (``app.aconnect``):

* pipelined_per_s: ``delay().get()`` with ``--window`` calls in flight, calls/s
  (through the router: every task is stored by the services node before it is
  confirmed, and its result is stored by the worker node);
* chains_per_s: chains of 5 steps with ``--window`` chains in flight, chains/s
  (every step a follow-up stored in the worker node's backlog).

Target (issue "Nothing lost"): durable at least 0.7x the in-memory figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples._cluster import running_cluster

from bench import _smoke
from bench._task_app import add, app

KEYS = {
    "pipelined_per_s": "delay().get(), window in flight, calls/s",
    "chains_per_s": "chains of 5 steps, window in flight, chains/s",
}
TARGET = 0.7
WAIT = 60.0


def _cluster_file(directory: Path, durable: bool) -> Path:
    flag = "" if durable else "durable = false\n"
    text = (
        '[cluster]\nname = "bench-durable"\ndev = true\ncontroller = "127.0.0.1:5950"\n\n'
        '[[node]]\nname = "services"\nlisten = "127.0.0.1:5951"\n'
        f'actors = "bench._task_app:app"\nservices = true\n{flag}\n'
        '[[node]]\nname = "worker"\nlisten = "127.0.0.1:5952"\n'
        f'actors = "bench._task_app:app"\npools = ["celery"]\n{flag}'
    )
    path = directory / ("durable.toml" if durable else "memory.toml")
    path.write_text(text)
    return path


async def _pipelined(count: int, window: int) -> float:
    async def caller(calls: int) -> None:
        for _ in range(calls):
            result = await add.adelay(1, 2)
            assert await result.aget(timeout=WAIT) == 3

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(window):
            nursery.start_soon(caller, count // window)
    return (count // window) * window / (time.perf_counter() - started)


async def _chains(count: int, window: int) -> float:
    async def caller(chains: int) -> None:
        for _ in range(chains):
            steps = add.s(1, 1) | add.s(1) | add.s(1) | add.s(1) | add.s(1)
            result = await steps.adelay()
            assert await result.aget(timeout=WAIT) == 6

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(window):
            nursery.start_soon(caller, count // window)
    return (count // window) * window / (time.perf_counter() - started)


async def _measure(path: Path, calls: int, chains: int, window: int) -> dict[str, float]:
    async with app.aconnect(path):
        await _pipelined(window, window)  # warm-up: connections, sessions, workers
        return {
            "pipelined_per_s": await _pipelined(calls, window),
            "chains_per_s": await _chains(chains, window),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--chains", type=int, default=400)
    parser.add_argument("--window", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = _smoke.parse_args(parser, rounds=1, calls=20, chains=10, window=10)
    figures: dict[str, dict[str, list[float]]] = {"durable": {}, "memory": {}}
    with tempfile.TemporaryDirectory() as directory:
        for round_ in range(args.rounds):
            for mode in ("durable", "memory"):
                toml = _cluster_file(Path(directory), mode == "durable")
                print(f"[bench/durable] round {round_ + 1}: {mode}", file=sys.stderr)
                with running_cluster(toml, echo=False) as path:
                    measured = trio.run(_measure, path, args.calls, args.chains, args.window)
                for key, value in measured.items():
                    figures[mode].setdefault(key, []).append(value)
    result: dict[str, float] = {}
    for key in KEYS:
        durable = statistics.median(figures["durable"][key])
        memory = statistics.median(figures["memory"][key])
        result[f"{key}_durable"] = round(durable, 1)
        result[f"{key}_memory"] = round(memory, 1)
        result[f"{key}_ratio"] = round(durable / memory, 3)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{'':48} {'durable':>10} {'memory':>10} {'ratio':>7}  target")
    for key, label in KEYS.items():
        print(
            f"{label:48} {result[f'{key}_durable']:>10.1f} {result[f'{key}_memory']:>10.1f} "
            f"{result[f'{key}_ratio']:>7.3f}  >= {TARGET}"
        )
    _smoke.print_json(args, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
