"""Benchmark: actorctl against plain python-qpid-proton, measured in the same run.

    python bench/run.py            # a table of figures and ratios
    python bench/run.py --json     # one JSON object
    python bench/run.py --smoke    # does it still run? (tests/project/test_bench_smoke.py)

Each figure is the median of ``--rounds`` interleaved rounds (actorctl, then the
raw reference, then again), because absolute figures drift a lot on a shared
machine (a quarter within minutes on a 2-core one): compare the ratios. Beside each
ratio, the range of the rounds' own ratios (each round's figure against the
reference measured next to it) says how far one round can be trusted. Two OS
processes each, all traffic on 127.0.0.1.

The second table is actorctl's one-way throughput with mutual TLS and signed
messages (sessions, or Ed25519 per message), against the same traffic unsigned
over plain TCP, measured in the same rounds.

The third table is the task API against Celery 5 with Redis as broker and result
backend, one solo worker each: ``--task-rounds`` rounds (default 3; 0 skips it)
of bench/_celery.py then bench/_tasks.py, each a subprocess printing one JSON
object (bench/_celery.py installs Celery and redis-server if they are missing).
Its targets (issue 30): actorctl at least 8x Celery's throughputs, at most 0.35x
its p50, and tasks pipelined at least 0.85x actorctl's own pipelined ``ask`` (the
task machinery costs less than 15% on top of a message). That ask is over plain TCP,
unsigned, from trio code, while the tasks are sent with the sync API over mutual TLS
with session HMACs: the ratio holds the sync API's thread crossings and the signing
too. So a second line sets like against like: tasks from trio code with 100 in
flight (bench/_tasks.py's ``task_pipelined_async_per_s``) against the pipelined ask
over mutual TLS with session HMACs, measured in the first table's rounds.

Last, the headline of bench/task_cost.py's per-task ledger, measured in the same
run (``--no-ledger`` skips it): what one task costs the worker's event loop and
its other threads, its socket writes, bytes and store commits, and the three
stages that cost most. The whole ledger: ``python bench/task_cost.py``.

``--smoke`` (bench/_smoke.py) runs all three tables once with tiny counts. It
installs nothing: where Celery, redis-py or redis-server is missing, the Celery
side is skipped, saying what is missing (the actorctl side still runs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _actorctl, _celery, _raw, _smoke

ROOT = Path(__file__).resolve().parent.parent

KEYS = {
    "tell_per_s": ("one-way tell, messages/s", "higher"),
    "ask_p50_us": ("sequential ask, p50 µs", "lower"),
    "ask_p99_us": ("sequential ask, p99 µs", "lower"),
    "ask_pipelined_per_s": ("ask, 100 in flight, calls/s", "higher"),
}


# One-way throughput with security against the same traffic unsigned on plain TCP.
SECURITY_MODES = ("plain", "tls", "session", "ed25519")
SECURITY = {
    "session_vs_plain": ("session", "mutual TLS + session HMACs"),
    "ed25519_vs_plain": ("ed25519", "mutual TLS + Ed25519 per message"),
    "tls_vs_plain": ("tls", "mutual TLS alone"),
}

# The task API against Celery 5 + Redis: (label, better, target ratio actorctl/celery).
TASK_KEYS = {
    "task_get_p50_us": ("delay().get(), p50 µs", "lower", "<= 0.35"),
    "task_pipelined_per_s": ("delay(), 100 in flight, calls/s", "higher", ">= 8"),
    "task_fire_forget_per_s": ("fire-and-forget, tasks/s", "higher", ">= 8"),
}
TASK_SCRIPTS = {"celery": "_celery.py", "actorctl": "_tasks.py"}
TASK_TIMEOUT_S = 1800.0  # bench/_celery.py may install Celery and redis-server first
#: Tasks pipelined against actorctl's own pipelined ask, in the same run.
TASK_VS_ASK_TARGET = 0.85


def run_task_script(script: str, *options: str) -> dict[str, Any]:
    """Run bench/SCRIPT in a subprocess (its progress on our stderr); its JSON object."""
    # This checkout first, then what was on the path (src/ of a worktree, say).
    path = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *options],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        timeout=TASK_TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"bench/{script} failed with exit status {proc.returncode}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def spread(ours: list[float], theirs: list[float]) -> list[float]:
    """The lowest and highest of the rounds' own ratios (round i against round i)."""
    ratios = [a / b for a, b in zip(ours, theirs, strict=True) if b]
    return [round(min(ratios), 3), round(max(ratios), 3)] if ratios else []


def spread_text(row: dict[str, Any]) -> str:
    """`` (0.91-1.12)``: a row's range of round ratios, or nothing for a single round."""
    low_high = row.get("range") or []
    return f" ({low_high[0]:.2f}-{low_high[1]:.2f})" if low_high[:1] != low_high[1:] else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tells", type=int, default=20000)
    parser.add_argument("--asks", type=int, default=2000)
    parser.add_argument("--pipelined", type=int, default=20000)
    parser.add_argument(
        "--task-rounds", type=int, default=3, help="task API vs Celery rounds (0: skip)"
    )
    parser.add_argument(
        "--no-ledger", dest="ledger", action="store_false", help="skip the per-task ledger"
    )
    args = _smoke.parse_args(parser, rounds=1, tells=200, asks=50, pipelined=200, task_rounds=1)
    counts = (args.tells, args.asks, args.pipelined)
    ours, raw = [], []
    security: dict[str, list[float]] = {mode: [] for mode in SECURITY_MODES}
    session_asks: list[float] = []
    for i in range(args.rounds):
        ours.append(_actorctl.measure(*counts))
        raw.append(_raw.measure(*counts))
        for mode in SECURITY_MODES:
            security[mode].append(_actorctl.measure_tell(mode, args.tells))
        session_asks.append(_actorctl.measure_pipelined("session", args.pipelined))
        if not args.json:
            print(f"round {i + 1}/{args.rounds} done", file=sys.stderr)
    result: dict[str, Any] = {}
    for key in KEYS:
        a = statistics.median(r[key] for r in ours)
        b = statistics.median(r[key] for r in raw)
        result[key] = {
            "actorctl": round(a, 1),
            "raw": round(b, 1),
            "ratio": round(a / b, 3),
            "range": spread([r[key] for r in ours], [r[key] for r in raw]),
        }
    plain = statistics.median(security["plain"])
    for key, (mode, _) in SECURITY.items():
        a = statistics.median(security[mode])
        result[key] = {
            "actorctl": round(a, 1),
            "reference": round(plain, 1),
            "ratio": round(a / plain, 3),
            "range": spread(security[mode], security["plain"]),
        }
    result["signed_tls_vs_plain"] = result["session_vs_plain"]
    tasks: dict[str, list[dict[str, Any]]] = {name: [] for name in TASK_SCRIPTS}
    # A smoke run installs nothing: without Celery it runs the actorctl side alone.
    skipped = _celery.missing() if args.smoke and args.task_rounds > 0 else None
    if skipped:
        print(f"smoke run: the Celery side is skipped: {skipped}", file=sys.stderr)
    options = ("--smoke",) if args.smoke else ()
    for i in range(args.task_rounds):
        for name, script in TASK_SCRIPTS.items():
            if not (skipped and name == "celery"):
                tasks[name].append(run_task_script(script, *options))
        if not args.json:
            print(f"task round {i + 1}/{args.task_rounds} done", file=sys.stderr)
    if args.task_rounds > 0:
        for key in TASK_KEYS:
            a = statistics.median(r[key] for r in tasks["actorctl"])
            if skipped:
                result[key] = {"actorctl": round(a, 1), "celery": None, "ratio": None}
                continue
            b = statistics.median(r[key] for r in tasks["celery"])
            result[key] = {
                "actorctl": round(a, 1),
                "celery": round(b, 1),
                "ratio": round(a / b, 3),
                "range": spread(
                    [r[key] for r in tasks["actorctl"]], [r[key] for r in tasks["celery"]]
                ),
            }
        if skipped:
            result["celery_skipped"] = skipped
        else:
            result["celery_version"] = tasks["celery"][-1]["celery_version"]
        own = result["task_pipelined_per_s"]["actorctl"] / result["ask_pipelined_per_s"]["actorctl"]
        result["task_vs_own_ask"] = round(own, 3)
        session_ask = statistics.median(session_asks)
        trio_tasks = statistics.median(r["task_pipelined_async_per_s"] for r in tasks["actorctl"])
        result["session_ask_pipelined_per_s"] = round(session_ask, 1)
        result["task_async_vs_session_ask"] = round(trio_tasks / session_ask, 3)
    if args.ledger:
        result["ledger"] = ledger_headline(run_task_script("task_cost.py", "--json", *options))
    if args.json:
        print(json.dumps(result))
        return
    print(f"{'figure':34} {'actorctl':>12} {'raw proton':>12} {'ratio':>8}")
    for key, (label, better) in KEYS.items():
        row = result[key]
        print(f"{label:34} {row['actorctl']:>12,.1f} {row['raw']:>12,.1f} {row['ratio']:>7.2f}x"
              f"{spread_text(row)}  ({better} is better)")  # fmt: skip
    print(f"\n{'one-way tell, messages/s':34} {'secured':>12} {'plain TCP':>12} {'ratio':>8}")
    for key, (_, label) in SECURITY.items():
        row = result[key]
        print(
            f"{label:34} {row['actorctl']:>12,.1f} {row['reference']:>12,.1f} {row['ratio']:>7.2f}x"
            f"{spread_text(row)}"
        )
    if args.task_rounds > 0:
        print("\ntasks: actorctl vs Celery 5 + Redis (solo worker each)")
        print(f"{'figure':34} {'actorctl':>12} {'celery':>12} {'ratio':>8}")
        for key, (label, better, target) in TASK_KEYS.items():
            row = result[key]
            if skipped:
                print(f"{label:34} {row['actorctl']:>12,.1f} {'skipped':>12} {'-':>8}")
                continue
            print(f"{label:34} {row['actorctl']:>12,.1f} {row['celery']:>12,.1f} "
                  f"{row['ratio']:>7.2f}x{spread_text(row)}  ({better} is better; "
                  f"target {target})")  # fmt: skip
        if skipped:
            print(f"(smoke run: the Celery side was skipped: {skipped})")
        print(
            f"{'tasks pipelined / own pipelined ask':34} {result['task_vs_own_ask']:>33.2f}x"
            f"  (target >= {TASK_VS_ASK_TARGET})"
        )
        print(
            f"{'  like for like: from trio code, both':34} {'':>12} {'':>12} "
            f"{result['task_async_vs_session_ask']:>7.2f}x  (tasks "
            f"{trio_tasks:,.0f}/s, ask {session_ask:,.0f}/s; both TLS + session HMACs)"
        )
    if args.ledger:
        print(ledger_table(result["ledger"]))
    _smoke.print_json(args, result)


def ledger_headline(ledger: dict[str, Any]) -> dict[str, Any]:
    """What bench/task_cost.py's ledger says of one task, in a few figures."""
    tasks, worker = ledger["tasks"], ledger["worker"]
    counts: dict[str, int] = worker["counts"]
    samples = sum(counts.values()) or 1
    wall_us = worker["wall_s"] * 1e6 / tasks
    busy = sorted(
        ((stage, wall_us * n / samples) for stage, n in counts.items() if stage != "idle"),
        key=lambda item: -item[1],
    )
    return {
        "tasks": tasks,
        "loop_cpu_us": round(worker["loop_cpu_s"] * 1e6 / tasks, 1),
        "other_threads_cpu_us": round(
            (worker["process_cpu_s"] - worker["loop_cpu_s"]) * 1e6 / tasks, 1
        ),
        "writes_per_task": round(worker["writes"] / tasks, 3),
        "bytes_per_task": round(worker["sent_bytes"] / tasks, 1),
        "commits_per_task": round(worker["commits"] / tasks, 3),
        "top_stages_us": [[stage, round(us, 1)] for stage, us in busy[:3]],
    }


def ledger_table(head: dict[str, Any]) -> str:
    """The ledger's headline, as lines under the three tables."""
    top = ", ".join(f"{stage} {us:.0f}" for stage, us in head["top_stages_us"])
    return "\n".join(
        [
            "",
            f"per-task ledger (bench/task_cost.py, {head['tasks']:,} tasks pipelined), worker:",
            f"  event-loop CPU {head['loop_cpu_us']:,.1f} µs, other threads "
            f"{head['other_threads_cpu_us']:,.1f} µs",
            f"  socket writes {head['writes_per_task']:.3f}, bytes {head['bytes_per_task']:,.1f}, "
            f"store commits {head['commits_per_task']:.3f}",
            f"  costliest stages, wall µs: {top}",
        ]
    )


if __name__ == "__main__":
    main()
