"""Benchmark: how long a command takes to start, timed as a whole process.

    python bench/cli_start.py              # a table: min, median and max of each
    python bench/cli_start.py --runs 20 --json
    python bench/cli_start.py --smoke      # does it still run? (tests/project/test_bench_smoke.py)

Each command below runs ``--runs`` times after ``--warmup`` runs that are not
counted, interleaved (one run of each in turn, so that a machine's drift falls
on all of them alike), as a child process timed from its start until it is
reaped: wall seconds, CPU seconds (user + system, the kernel's accounting of
that one process) and its peak RSS. Every run must exit 0.

* ``python -c pass``: the interpreter's own start, the floor under the others;
* ``python -c "import actorctl"``;
* ``actorctl --help`` and ``actorctl call --help``: the console script next to
  this interpreter (``python -m actorctl`` where there is none).

They run this checkout's code (its src/ first on PYTHONPATH), compiled first,
as an installed package is: what is measured is the import, not the compiler.
Target (issue 30): ``actorctl --help`` and ``actorctl call`` start in under
0.3 s.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _smoke

ROOT = Path(__file__).resolve().parent.parent

TARGET_S = 0.3
TIMEOUT_S = 60.0


def _actorctl() -> list[str]:
    script = Path(sys.executable).parent / "actorctl"
    return [str(script)] if script.exists() else [sys.executable, "-m", "actorctl"]


def commands() -> dict[str, list[str]]:
    """What is timed, by label."""
    actorctl = _actorctl()
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "import actorctl": [sys.executable, "-c", "import actorctl"],
        "actorctl --help": [*actorctl, "--help"],
        "actorctl call --help": [*actorctl, "call", "--help"],
    }


def run_once(argv: list[str], env: dict[str, str]) -> dict[str, float]:
    """One run of ``argv``: wall and CPU seconds, peak RSS in MiB."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    bound = threading.Timer(TIMEOUT_S, proc.kill)  # our own child, by its PID
    bound.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)  # this one process's own rusage
    finally:
        bound.cancel()
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv} exited with status {proc.returncode}")
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mib": usage.ru_maxrss / 1024,
    }


def measure(runs: int, warmup: int) -> dict[str, Any]:
    compileall.compile_dir(ROOT / "src", quiet=1)
    path = [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p))
    timed = commands()
    samples: dict[str, list[dict[str, float]]] = {label: [] for label in timed}
    for round_ in range(warmup + runs):
        for label, argv in timed.items():
            sample = run_once(argv, env)
            if round_ >= warmup:
                samples[label].append(sample)
    figures: dict[str, Any] = {}
    for label, argv in timed.items():
        figures[label] = {"argv": argv}
        for key in ("wall_s", "cpu_s", "peak_rss_mib"):
            values = [sample[key] for sample in samples[label]]
            figures[label][key] = {
                "min": round(min(values), 4),
                "median": round(statistics.median(values), 4),
                "max": round(max(values), 4),
            }
    return {"runs": runs, "warmup": warmup, "target_s": TARGET_S, "commands": figures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="counted runs of each command")
    parser.add_argument("--warmup", type=int, default=1, help="runs of each not counted, first")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = _smoke.parse_args(parser, runs=1, warmup=0)
    if args.runs < 1 or args.warmup < 0:
        parser.error("--runs must be at least 1, --warmup at least 0")
    result = measure(args.runs, args.warmup)
    if args.json:
        print(json.dumps(result))
        return
    print(f"counted runs of each: {args.runs}, after {args.warmup} not counted; min, median, max")
    print(f"{'command':22} {'wall s':>22} {'cpu s':>22} {'peak MiB':>9}")
    for label, row in result["commands"].items():
        wall, cpu = row["wall_s"], row["cpu_s"]
        print(
            f"{label:22} {wall['min']:>6.3f} {wall['median']:>7.3f} {wall['max']:>7.3f} "
            f"{cpu['min']:>6.3f} {cpu['median']:>7.3f} {cpu['max']:>7.3f} "
            f"{row['peak_rss_mib']['median']:>9.1f}"
        )
    print(f"(target: actorctl --help and actorctl call start in under {TARGET_S} s)")
    _smoke.print_json(args, result)


if __name__ == "__main__":
    main()
