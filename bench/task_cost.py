"""The per-task cost ledger: where one task's time goes, in µs per task.

    python bench/task_cost.py [--tasks N] [--window 100] [--interval 0.001] [--calls [--sync]]
                              [--detail N] [--smoke]

Runs the cluster of ``bench/_tasks.py`` (``bench/tasks.toml``: one worker node with the
pool "celery", concurrency 1, no threads) as a user gets it from ``cluster up``: durable
store, TLS and signed messages (sessions), signed replies, per-identity dedup and the
replay journal, traces and metrics on. From this process (a trio caller on
``app.aconnect``), it runs ``add(1, 2)`` pipelined with ``--window`` calls in flight, and
samples both event-loop threads, the worker node's and this caller's, while ``--tasks``
calls run (after a warm-up).

How: a wall-clock sampler (``bench/_stages.py``: SIGALRM every ``--interval`` s, the
handler walks the interrupted Python stack) puts each sample in one stage by the
functions on the stack, in a fixed priority order. A row is its share of the samples
times the thread's wall time over the run, divided by the tasks: the worker's rows add
up to its loop thread's wall time per task, 1 / throughput when that thread is the
bottleneck. It is a statistical measure (the sample count is printed: a row of k
samples is known to about sqrt(k)) and the sampler itself costs a few percent (each
sample is a signal, a stack walk and a wake-up of trio's loop). The rows:

* read: the worker's read loop (socket read, proton transport, decoding the message,
  the mailbox put) less what is counted below;
* auth: authenticating a request (``_authenticate``: signature / session HMAC check);
* dedup: the replay cache, the replay journal's rows and the per-actor seen window;
* run: the task itself and its time-limit wrapper (``TaskWorker._run_all``);
* store: keeping the result (store puts, the commit's hand-off to its thread and the
  wait for it, on the loop thread);
* reply: building, encoding and signing the result document and queueing it;
* trace: eliot actions and log lines (including the task's action and its uuid4);
* metrics: counters, latency observations, prometheus;
* write: the writer's ``_send_pending`` and a loop turn's-end ``_flush``
  (``cluster/link/_output.py``): proton encoding the frames, and the socket send;
* settle: the request's disposition;
* machinery: the rest of the actor and task code (gate, holdings, mailbox, cells);
* scheduler: trio's own code (task switches, the run loop);
* idle: the loop waiting in epoll for I/O.

Beside them: the worker's other threads (CPU µs per task: the store's commits and the
``to_thread`` hand-offs), its store commits per task (``Store.commits``), and its
socket writes and bytes per task (``Engine.writes`` / ``Engine.sent_bytes`` summed over
the node's connections). The caller's rows are the same stages seen from this process:
``send`` is ``aapply_async`` (building, encoding and signing the request), ``read`` its
reading of the replies. The cluster has no router or scheduler between caller and
worker (the pool is reached directly), so that hop is 0 here.

``--calls`` counts instead of sampling: cProfile in both event-loop threads, printing
the function calls per task and the functions that make most of them. Those counts do
not move with the machine's load, so a change can be judged by them on a busy machine
(the µs column is cProfile's own time, inflated by the profiler, for ranking only).

``--calls --sync`` counts the caller's calls on the sync API instead (``bench/_sync_calls.py``):
``with app.connect(path):``, as ``bench/_tasks.py`` measures it, in the user's main thread
and in the client's trio thread, pipelined, fire-and-forget and sequential (``--detail N``:
the top N functions of each).

``--detail N`` adds, per stage, the N functions the worker was in when sampled (the
stack's leaf). ``--smoke``: a few hundred tasks, for CI (no figure is judged). Prints the
table on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples._cluster import running_cluster

from bench import _smoke
from bench._stages import ENV, STAGES, CallCounter, Sampler
from bench._sync_calls import PHASES, measure_sync, sync_calls_table
from bench._task_app import add, app

CLUSTER = Path(__file__).resolve().parent / "tasks.toml"
TIMEOUT_S = 120.0
#: The issue's order: the caller's send, the worker's read, ..., the socket writes.
ROWS = (
    "send",
    "read",
    "auth",
    "dedup",
    "run",
    "store",
    "reply",
    "trace",
    "metrics",
    "write",
    "settle",
    "machinery",
    "scheduler",
    "other",
    "idle",
)
WHAT = dict(STAGES)


def _log(msg: str) -> None:
    print(f"[bench/task_cost] {msg}", file=sys.stderr, flush=True)


async def _pipelined(count: int, window: int) -> None:
    pending: deque[Any] = deque()
    sent = 0
    while sent < min(window, count):
        pending.append(await add.adelay(1, 2))
        sent += 1
    while pending:
        value = await pending.popleft().aget(timeout=TIMEOUT_S)
        if value != 3:
            raise RuntimeError(f"add(1, 2) returned {value!r}")
        if sent < count:
            pending.append(await add.adelay(1, 2))
            sent += 1


async def _wait_for(path: Path, what: str) -> None:
    """Wait for a file the worker node writes (another process: no event to wait on)."""
    with trio.fail_after(30):
        while not await trio.Path(path).exists():  # noqa: ASYNC110
            await trio.sleep(0.01)
    _log(what)


async def _measure(
    cluster: Path, probe: Path, tasks: int, window: int, interval: float, calls: bool = False
) -> dict[str, Any]:
    async with app.aconnect(cluster):
        value = await (await add.adelay(0, 0)).aget(timeout=TIMEOUT_S)
        if value != 0:
            raise RuntimeError(f"add(0, 0) returned {value!r}")
        await _pipelined(min(tasks, 500), window)  # warm-up
        await _wait_for(probe / "worker.pid", "worker probe installed")
        pid = int((probe / "worker.pid").read_text())
        os.kill(pid, signal.SIGUSR1)
        await _wait_for(probe / "started", "worker sampling")
        caller: Sampler | CallCounter = CallCounter() if calls else Sampler(interval)
        caller.start()
        t0 = time.perf_counter()
        try:
            await _pipelined(tasks, window)
        finally:
            elapsed = time.perf_counter() - t0
            caller.stop()
            os.kill(pid, signal.SIGUSR2)
        name = "calls.json" if calls else "ledger.json"
        await _wait_for(probe / name, "worker ledger written")
        worker = json.loads((probe / name).read_text())
    return {"tasks": tasks, "elapsed_s": elapsed, "worker": worker, "caller": caller.report()}


def _rows(side: dict[str, Any], tasks: int) -> list[tuple[str, float, int]]:
    counts: dict[str, int] = side["counts"]
    total = sum(counts.values()) or 1
    per_task = side["wall_s"] * 1e6 / tasks
    return [(row, per_task * counts.get(row, 0) / total, counts.get(row, 0)) for row in ROWS]


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parent,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def table(result: dict[str, Any], window: int, detail: int = 0) -> str:
    tasks = result["tasks"]
    worker, caller = result["worker"], result["caller"]
    lines = [
        f"actorctl per-task cost ledger (commit {_commit()}): add(1, 2) pipelined, "
        f"{window} in flight, {tasks} tasks, {tasks / result['elapsed_s']:,.0f} tasks/s "
        "with the samplers on",
        "",
        "worker node, event-loop thread (wall µs per task; rows add up to its wall time)",
        f"  {'stage':<10} {'µs/task':>9} {'share':>6} {'samples':>8}  what",
    ]
    rows = _rows(worker, tasks)
    total = sum(us for _, us, _ in rows) or 1.0
    for row, us, samples in rows:
        if row == "send" and not samples:
            continue  # a worker sends no task here
        lines.append(f"  {row:<10} {us:>9.1f} {us / total:>6.1%} {samples:>8}  {WHAT[row]}")
    busy = total - next(us for row, us, _ in rows if row == "idle")
    lines += [
        f"  {'total':<10} {total:>9.1f}        {sum(worker['counts'].values()):>8}  "
        f"(busy, less idle: {busy:.1f})",
        "  router or scheduler hop: 0 (none in this cluster: the pool is reached directly)",
        "",
        "worker node, per task:",
        f"  loop thread CPU            {worker['loop_cpu_s'] * 1e6 / tasks:>9.1f} µs",
        f"  other threads' CPU         "
        f"{(worker['process_cpu_s'] - worker['loop_cpu_s']) * 1e6 / tasks:>9.1f} µs "
        "(store commits, to_thread hand-offs)",
        f"  store commits              {worker['commits'] / tasks:>9.3f}",
        f"  socket writes              {worker['writes'] / tasks:>9.3f} "
        f"({worker['engines']} connections)",
        f"  bytes written              {worker['sent_bytes'] / tasks:>9.1f}",
        *_collections(worker, tasks),
        "",
        "caller (this process), event-loop thread (wall µs per task)",
        f"  {'stage':<10} {'µs/task':>9} {'share':>6} {'samples':>8}",
    ]
    rows = _rows(caller, tasks)
    total = sum(us for _, us, _ in rows) or 1.0
    for row, us, samples in rows:
        if samples:
            lines.append(f"  {row:<10} {us:>9.1f} {us / total:>6.1%} {samples:>8}")
    lines.append(f"  loop thread CPU {caller['loop_cpu_s'] * 1e6 / tasks:.1f} µs per task")
    if detail:
        lines += ["", "worker node: the functions that ran, by stage (µs per task)"]
        per_sample = worker["wall_s"] * 1e6 / tasks / (sum(worker["counts"].values()) or 1)
        for row in ROWS:
            top = [(where, n) for stage, where, n in worker["leaves"] if stage == row][:detail]
            if top:
                shown = ", ".join(f"{where} {n * per_sample:.1f}" for where, n in top)
                lines.append(f"  {row:<10} {shown}")
    return "\n".join(lines)


def _collections(side: dict[str, Any], tasks: int) -> list[str]:
    """The garbage collector's runs and time per task, by generation (any thread)."""
    gc = side.get("gc")
    if gc is None:
        return []
    runs = " / ".join(f"{n / tasks:.4f}" for n in gc["runs"])
    spent = " / ".join(f"{s * 1e6 / tasks:.1f}" for s in gc["seconds"])
    freed = " / ".join(f"{n / tasks:.2f}" for n in gc.get("collected", ()))
    return [
        f"  gc runs (gen 0/1/2)        {runs}",
        f"  gc µs (gen 0/1/2)          {spent}",
        f"  gc cycles freed (objects)  {freed}",
    ]


def calls_table(result: dict[str, Any], window: int, top: int) -> str:
    """Function calls per task in each event-loop thread, and the functions behind them."""
    tasks = result["tasks"]
    lines = [
        f"actorctl function calls per task (commit {_commit()}): add(1, 2) pipelined, "
        f"{window} in flight, {tasks} tasks, counted by cProfile in each event-loop thread",
    ]
    for side in ("worker", "caller"):
        functions: dict[str, list[float]] = result[side]["functions"]
        total = sum(row[1] for row in functions.values())
        lines += ["", f"{side}: {total / tasks:,.1f} calls per task"]
        lines.append(f"  {'calls/task':>10} {'own µs':>8} {'with callees':>12}  function")
        ranked = sorted(functions.items(), key=lambda item: -item[1][1])[:top]
        for where, (_, ncalls, own, inclusive) in ranked:
            lines.append(
                f"  {ncalls / tasks:>10.2f} {own * 1e6 / tasks:>8.1f} "
                f"{inclusive * 1e6 / tasks:>12.1f}  {where}"
            )
        lines += _collections(result[side], tasks)
        steps: dict[str, int] = result[side].get("steps", {})
        if steps:  # trio's task steps: each one a task switch
            lines += ["", f"{side}: {sum(steps.values()) / tasks:,.2f} trio task steps per task"]
            for name, count in sorted(steps.items(), key=lambda item: -item[1])[:top]:
                if count / tasks >= 0.005:
                    lines.append(f"  {count / tasks:>10.3f}  {name}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=5000, help="tasks measured")
    parser.add_argument("--window", type=int, default=100, help="calls in flight")
    parser.add_argument("--interval", type=float, default=0.001, help="seconds per sample")
    parser.add_argument("--json", action="store_true", help="print the raw figures too")
    parser.add_argument(
        "--detail", type=int, default=0, metavar="N", help="the top N functions of each stage"
    )
    parser.add_argument(
        "--calls", action="store_true", help="count function calls (cProfile) instead of sampling"
    )
    parser.add_argument(
        "--sync",
        action="store_true",
        help="with --calls: the caller's calls on the sync API, in both of its threads",
    )
    args = _smoke.parse_args(parser, tasks=300)
    if min(args.tasks, args.window) < 1 or args.interval <= 0:
        parser.error("--tasks and --window must be at least 1, --interval above 0")
    if args.sync:
        if not args.calls:
            parser.error("--sync counts calls: give it with --calls")
        with running_cluster(CLUSTER, echo=False) as path:
            _log("cluster up; counting the sync API's calls")
            counted = measure_sync(path, args.tasks, args.window)
        print(sync_calls_table(counted, args.window, args.detail or 25, _commit()))
        _smoke.print_json(args, {phase: counted[phase]["tasks"] for phase in PHASES})
        return 0
    with tempfile.TemporaryDirectory() as probe:
        env = {ENV: probe, f"{ENV}_INTERVAL": str(args.interval)}
        if args.calls:
            env[f"{ENV}_CALLS"] = "1"
        with running_cluster(CLUSTER, echo=False, env=env) as path:
            _log("cluster up; measuring")
            result = trio.run(
                _measure, path, Path(probe), args.tasks, args.window, args.interval, args.calls
            )
    if args.calls:
        print(calls_table(result, args.window, args.detail or 40))
        if args.json:
            print(json.dumps(result))
        return 0
    print(table(result, args.window, args.detail))
    if args.json and not args.smoke:
        print(json.dumps(result))
    _smoke.print_json(args, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
