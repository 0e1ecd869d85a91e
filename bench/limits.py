"""Benchmark: what a rate limiter costs a task that it never holds back.

    python bench/limits.py            # a table of figures and the ratio
    python bench/limits.py --json     # one JSON object
    python bench/limits.py --smoke    # does it still run? (tests/project/test_bench_smoke.py)

One cluster (``actorctl cluster up``: a services node with the pool's router
and one worker node, concurrency 1, durable stores, mutual TLS, signed
messages) runs bench/_limits_app.py: ``add``, with no limits, and
``add_limited``, the same function with a per-worker and a global rate limit of
1,000,000/s, far above any rate it reaches, so the limiter is on (the router's
pacer and the worker's gate take a token for every task) but never holds one
back. Each round measures both, in turn, with ``delay().get()`` and
``--window`` calls in flight; each figure is the median of ``--rounds``.

Target (issue "The scheduler"): limited at least 0.95x unlimited.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples._cluster import running_cluster

from bench import _smoke
from bench._limits_app import add, add_limited, app

TARGET = 0.95
WAIT = 60.0
CLUSTER = """[cluster]
name = "bench-limits"
dev = true
controller = "127.0.0.1:5960"

[[node]]
name = "services"
listen = "127.0.0.1:5961"
actors = "bench._limits_app:app"
services = true

[[node]]
name = "worker"
listen = "127.0.0.1:5962"
actors = "bench._limits_app:app"
pools = ["celery"]
"""


async def _pipelined(task: Any, count: int, window: int) -> float:
    async def caller(calls: int) -> None:
        for _ in range(calls):
            result = await task.adelay(1, 2)
            assert await result.aget(timeout=WAIT) == 3

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(window):
            nursery.start_soon(caller, count // window)
    return (count // window) * window / (time.perf_counter() - started)


async def _measure(path: Path, rounds: int, calls: int, window: int) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {"unlimited": [], "limited": []}
    async with app.aconnect(path):
        await _pipelined(add, window, window)  # warm-up: connections, sessions
        await _pipelined(add_limited, window, window)
        for round_ in range(rounds):
            print(f"[bench/limits] round {round_ + 1}/{rounds}", file=sys.stderr)
            # Alternate which goes first, so that neither always meets a warmer node.
            order = [("unlimited", add), ("limited", add_limited)]
            for name, task in order if round_ % 2 == 0 else order[::-1]:
                figures[name].append(await _pipelined(task, calls, window))
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--window", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = _smoke.parse_args(parser, rounds=1, calls=20, window=10)
    with tempfile.TemporaryDirectory() as directory:
        toml = Path(directory) / "limits.toml"
        toml.write_text(CLUSTER)
        with running_cluster(toml, echo=False) as path:
            figures = trio.run(_measure, path, args.rounds, args.calls, args.window)
    unlimited = statistics.median(figures["unlimited"])
    limited = statistics.median(figures["limited"])
    result = {
        "unlimited_per_s": round(unlimited, 1),
        "limited_per_s": round(limited, 1),
        "ratio": round(limited / unlimited, 3),
    }
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{'delay().get(), window in flight, calls/s':48} {'per s':>10}")
    print(f"{'no limits':48} {result['unlimited_per_s']:>10.1f}")
    print(f"{'rate limits far above the rate (limiter on)':48} {result['limited_per_s']:>10.1f}")
    print(f"{'ratio':48} {result['ratio']:>10.3f}  (target >= {TARGET})")
    _smoke.print_json(args, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
