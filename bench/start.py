"""Benchmark: how long one node takes to start N idle actors (and to stop), and their memory.

    python bench/start.py                 # 10,000, 100,000 and 1,000,000 actors
    python bench/start.py --counts 1000 10000 --json
    python bench/start.py --smoke         # 200: does it still run?
                                          # (tests/project/test_bench_smoke.py)

Each count runs in a fresh subprocess (so the RSS is that node's alone): the
process measures its RSS before the node starts, then starts a node hosting N
instances of an idle actor, and prints the time from the call until the node
is ready (every actor started and addressable) and the RSS grown per actor,
then the time from ``node.stop(grace=0)`` until the node has stopped. A
reference row measures the same process's cost of N bare trio tasks each
blocked on a memory channel (and of cancelling them), the floor any actor
runtime on trio pays. Starting and stopping N actors should be linear in N:
compare the per-actor figures.

An idle actor is its cell, its mailbox, its address, its spec and its
supervisor's record of it, 1.1-1.3 KiB (docs/architecture.md, "Who owns
what"): the 1,000,000 rows need about 1.1 GB for the actors and 4 GB for
the tasks beside them, and take a few minutes on a loaded machine of two
cores (six, most of it the tasks row). ``--counts 10000 100000`` skips them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _smoke

ROOT = Path(__file__).resolve().parent.parent


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def _child(count: int, what: str) -> dict[str, Any]:
    import gc

    import trio

    from actorctl import Actor, handler, open_node

    class Idle(Actor):
        @handler
        async def ping(self) -> str:
            return "pong"

    gc.collect()
    before = _rss_kib()
    result: dict[str, Any] = {"count": count, "what": what}

    async def actors() -> None:
        started = time.perf_counter()
        specs = {f"idle-{i}": Idle for i in range(count)}
        async with open_node("start", specs, insecure=True) as node:
            result["start_s"] = time.perf_counter() - started
            gc.collect()
            result["kib_per_actor"] = (_rss_kib() - before) / count
            # Every actor started is hosted and running; beside them the node
            # hosts only its built-in actors (reserved names: "_node", ...).
            ours = {name: cell for name, cell in node.cells.items() if name in specs}
            assert len(ours) == count, f"{len(ours)} of {count} actors hosted"
            assert all(cell.state == "running" for cell in ours.values())
            builtins = sorted(set(node.cells) - set(specs))
            assert all(name.startswith("_") for name in builtins), builtins
            result["builtins"] = builtins
            stopping = time.perf_counter()
            node.stop(grace=0)
        result["stop_s"] = time.perf_counter() - stopping

    async def tasks() -> None:
        started = time.perf_counter()
        channels = []
        async with trio.open_nursery() as nursery:
            for _ in range(count):
                send, receive = trio.open_memory_channel[Any](100)
                channels.append(send)
                nursery.start_soon(receive.receive)
            await trio.testing.wait_all_tasks_blocked()
            result["start_s"] = time.perf_counter() - started
            gc.collect()
            result["kib_per_actor"] = (_rss_kib() - before) / count
            stopping = time.perf_counter()
            nursery.cancel_scope.cancel()
        result["stop_s"] = time.perf_counter() - stopping

    import trio.testing

    trio.run(actors if what == "actors" else tasks)
    return result


def measure(count: int, what: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", what, str(count)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        timeout=600,
        check=True,
    )
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", nargs=2, metavar=("WHAT", "COUNT"), help=argparse.SUPPRESS)
    args = _smoke.parse_args(parser, counts=[200])
    if args.child:
        print(json.dumps(_child(int(args.child[1]), args.child[0])))
        return
    rows = [measure(count, what) for count in args.counts for what in ("actors", "tasks")]
    if args.json:
        print(json.dumps(rows))
        return
    print(
        f"{'what':8} {'count':>9} {'start s':>9} {'µs/actor':>9} {'KiB/actor':>10} "
        f"{'stop s':>8} {'µs/actor':>9}"
    )
    for row in rows:
        per = row["start_s"] / row["count"] * 1e6
        stop_per = row["stop_s"] / row["count"] * 1e6
        print(
            f"{row['what']:8} {row['count']:>9,} {row['start_s']:>9.2f} {per:>9.1f} "
            f"{row['kib_per_actor']:>10.2f} {row['stop_s']:>8.2f} {stop_per:>9.1f}"
        )
    _smoke.print_json(args, rows)


if __name__ == "__main__":
    main()
