"""Every bench in bench/ still runs (issue 30: benchmarks that cannot rot).

Each runnable script of bench/ runs here in its smoke mode (``--smoke``,
bench/_smoke.py: tiny counts, a few seconds) as a subprocess, and must exit 0
and print every figure it should: its output is read (the JSON object on its
last line, and the labels of its table), never timed; no figure is judged.

Two skips only, each naming what is missing: bench/run.py's Celery side
(bench/_celery.py installs Celery and redis-server for a full run, a smoke run
installs nothing and says what it skipped; actorctl's side runs regardless),
and bench/hosts.py where network namespaces (root, iproute2) or etcd are not
to be had (it exits 77 saying which).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
TIMEOUT = 180.0  # seconds one smoke run may take on a loaded 2-core machine
UNAVAILABLE = 77  # bench/_smoke.py: a system component the bench needs is missing

MESSAGE_FIGURES = ("tell_per_s", "ask_p50_us", "ask_p99_us", "ask_pipelined_per_s")
TASK_FIGURES = ("task_get_p50_us", "task_pipelined_per_s", "task_fire_forget_per_s")

#: Runnable scripts of bench/ that run only as a part of another, which runs them
#: in its smoke mode: no test of their own.
RUN_BY = {
    "_tasks.py": "run.py",
    "_celery.py": "run.py",
    "_hosts_caller.py": "hosts.py",
}


def smoke(script: str, *options: str) -> subprocess.CompletedProcess[str]:
    """``python bench/SCRIPT [OPTIONS] --smoke``, on this checkout's code."""
    path = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p))
    return subprocess.run(
        [sys.executable, str(BENCH / script), *options, "--smoke"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def output(script: str, proc: subprocess.CompletedProcess[str] | None = None) -> tuple[str, Any]:
    """A smoke run's output and the JSON it ends with, once it exited 0."""
    proc = proc or smoke(script)
    said = f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"bench/{script} --smoke exited {proc.returncode}\n{said}"
    text = proc.stdout.strip()
    lines = text.splitlines()
    assert lines, f"bench/{script} --smoke printed nothing\n{said}"
    try:  # the object on the last line; or, pretty-printed, all there is
        return text, json.loads(lines[-1])
    except json.JSONDecodeError:
        return text, json.loads(text)


def figure(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def test_every_runnable_bench_has_a_smoke_test() -> None:
    """A new bench is not left out: each script with a main has its test here
    (a ``test_<name>`` function), or is run in smoke mode by one that has."""
    tested = {name.removeprefix("test_") for name in globals() if name.startswith("test_")}
    for path in sorted(BENCH.glob("*.py")):
        if 'if __name__ == "__main__":' not in path.read_text():
            continue
        script = RUN_BY.get(path.name, path.name)
        name = script.removesuffix(".py").lstrip("_")
        assert name in tested, f"bench/{path.name} has no smoke test (test_{name})"
        assert "--smoke" in (BENCH / script).read_text(), f"bench/{script} has no --smoke"


def test_run() -> None:
    text, result = output("run.py")
    for label in ("raw proton", "plain TCP", "tasks: actorctl vs Celery 5 + Redis"):
        assert label in text
    for key in MESSAGE_FIGURES:
        assert all(figure(result[key][side]) for side in ("actorctl", "raw", "ratio")), key
    for key in ("session_vs_plain", "ed25519_vs_plain", "tls_vs_plain", "signed_tls_vs_plain"):
        assert all(figure(result[key][side]) for side in ("actorctl", "reference", "ratio")), key
    for key in TASK_FIGURES:  # actorctl's side always runs
        assert figure(result[key]["actorctl"]), key
    assert figure(result["task_vs_own_ask"])
    assert "per-task ledger (bench/task_cost.py" in text
    ledger = result["ledger"]
    for key in ("loop_cpu_us", "other_threads_cpu_us", "writes_per_task", "bytes_per_task"):
        assert figure(ledger[key]), key
    assert ledger["top_stages_us"], "the costliest stages"
    if "celery_skipped" in result:  # only in a smoke run, saying what is missing
        assert re.search(r"celery|redis", result["celery_skipped"])
        assert "the Celery side was skipped: " + result["celery_skipped"] in text
        assert all(result[key]["celery"] is None for key in TASK_FIGURES)
    else:
        assert result["celery_version"].startswith("5.")
        assert all(figure(result[key]["celery"]) for key in TASK_FIGURES)


def test_raw() -> None:
    _, result = output("_raw.py")
    assert all(figure(result[key]) for key in MESSAGE_FIGURES), result


def test_actorctl() -> None:
    _, result = output("_actorctl.py")
    assert all(figure(result[key]) for key in MESSAGE_FIGURES), result


def test_durable() -> None:
    text, result = output("durable.py")
    assert "chains of 5 steps" in text
    for key in ("pipelined_per_s", "chains_per_s"):
        for mode in ("durable", "memory", "ratio"):
            assert figure(result[f"{key}_{mode}"]), f"{key}_{mode}"


def test_start() -> None:
    text, rows = output("start.py")
    assert "KiB/actor" in text
    assert "stop s" in text
    assert sorted(row["what"] for row in rows) == ["actors", "tasks"]
    for row in rows:
        assert row["count"] > 0
        assert figure(row["start_s"])
        assert figure(row["kib_per_actor"])
        assert figure(row["stop_s"])
    [actors] = [row for row in rows if row["what"] == "actors"]
    assert "_node" in actors["builtins"]  # the node's agent, beside the actors started


def test_hosts() -> None:
    proc = smoke("hosts.py")
    if proc.returncode == UNAVAILABLE:
        pytest.skip(f"bench/hosts.py cannot run here: {proc.stderr.strip().splitlines()[-1]}")
    text, result = output("hosts.py", proc)
    for ratio in ("cross-host", "replication", "end_to_end", "end_to_end_router", "etcd"):
        assert f"{ratio} ratio" in text
    assert "etcd alone: puts of" in text
    for mode in ("veth", "loopback", "replicated", "end_to_end", "end_to_end_router", "etcd"):
        assert figure(result[f"{mode}_tasks_per_s"]), mode
        assert isinstance(result[f"{mode}_etcd_requests"], dict)
        assert result[f"{mode}_rounds"], mode
        assert all(figure(each) for each in result[f"{mode}_rounds"]), mode
    for ratio in ("cross_host", "replication", "end_to_end", "end_to_end_router", "etcd"):
        assert figure(result[f"{ratio}_ratio"]), ratio
    assert figure(result["etcd_puts_per_s"])
    assert figure(result["etcd_deletes_per_s"])
    assert result["etcd_value_bytes"] > 0
    # The etcd mode wrote each task to etcd; the others asked etcd nothing per task.
    assert result["etcd_etcd_requests"].get("Put", 0) >= result["tasks"]
    for mode in ("end_to_end", "end_to_end_router"):
        assert result[f"{mode}_etcd_requests"].get("Put", 0) < result["tasks"], mode


def test_limits() -> None:
    text, result = output("limits.py")
    assert "rate limits far above the rate" in text
    assert all(figure(result[key]) for key in ("unlimited_per_s", "limited_per_s", "ratio"))


def test_metrics() -> None:
    text, result = output("metrics.py")
    assert "/metrics scraped" in text
    for key in ("tell_per_s", "ask_pipelined_per_s"):
        assert all(figure(result[key][side]) for side in ("off", "on", "ratio")), key
    assert figure(result["scrapes_per_round"])


def test_boxed() -> None:
    text, result = output("boxed.py")
    assert "Python, in-process" in text
    assert figure(result["in_process_calls_per_s"])
    boxed = result["boxed_calls_per_s"]
    assert figure(boxed["Python (reference worker)"])  # needs nothing but this Python
    assert all(figure(value) for value in boxed.values())
    # C and Node.js are measured, or named as missing with the reason.
    assert set(boxed) | set(result["missing"]) == {"C", "Node.js", "Python (reference worker)"}


def test_cli_start() -> None:
    text, result = output("cli_start.py")
    commands = result["commands"]
    labels = ["python -c pass", "import actorctl", "actorctl --help", "actorctl call --help"]
    assert list(commands) == labels
    for label, row in commands.items():
        assert label in text
        for key in ("wall_s", "cpu_s", "peak_rss_mib"):
            assert all(figure(row[key][q]) for q in ("min", "median", "max")), (label, key)


def test_task_cost() -> None:
    text, result = output("task_cost.py")
    for label in ("per-task cost ledger", "worker node, event-loop thread", "socket writes"):
        assert label in text
    assert result["tasks"] > 0
    assert set(result["worker"]["counts"]) <= {*STAGES_LEDGER}
    assert sum(result["worker"]["counts"].values()) > 0


def test_task_cost_counts_the_sync_apis_calls_in_both_threads() -> None:
    text, result = output("task_cost.py", smoke("task_cost.py", "--calls", "--sync"))
    assert result == {"pipelined": 300, "fire_forget": 300, "sequential": 75}
    for phase in ("pipelined", "fire_forget", "sequential"):
        for thread in ("main", "trio"):
            found = re.search(rf"{phase}, {thread} thread: ([\d,.]+) calls per task", text)
            assert found, (phase, thread)
            assert float(found[1].replace(",", "")) > 0


#: The stages bench/task_cost.py attributes the worker's samples to.
STAGES_LEDGER = (
    *("send", "read", "auth", "dedup", "run", "store", "reply", "trace", "metrics"),
    *("write", "settle", "machinery", "scheduler", "other", "idle"),
)


def test_receive_cost() -> None:
    text, result = output("receive_cost.py")
    assert "a task request (worker)" in text
    assert "its reply (caller)" in text
    for kind in ("request", "reply"):
        for key in ("cpu_us", "python_calls", "builtin_calls"):
            assert figure(result[kind][key]), (kind, key)
        assert result[kind]["python_calls"] > 0, kind
