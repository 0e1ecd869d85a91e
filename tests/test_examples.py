"""Every example runs, for real, as the README says to run it."""

from __future__ import annotations

import sys
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent


async def test_the_two_node_example_runs_and_reports_its_work() -> None:
    with trio.fail_after(60):
        result = await trio.run_process(
            [sys.executable, "-m", "examples.two_nodes"],
            cwd=ROOT,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    assert "worker node ready at amqps://127.0.0.1:" in out  # TLS by default
    assert "78498 primes below 1,000,000" in out
    assert "'Ode': 11 words" in out
    assert "missing @ doc.text" in out
    assert "worker node stopped (exit code 0)" in out


async def test_the_cluster_example_survives_a_killed_node_and_reports_its_work() -> None:
    with trio.fail_after(120):
        result = await trio.run_process(
            [sys.executable, "-m", "examples.cluster_demo"],
            cwd=ROOT,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    assert "cluster 'demo' ready" in out
    assert "all 200 documents counted through the router despite the kill" in out
    assert "(restart 1)" in out
    assert "41538 primes below 500,000" in out
    assert "cluster stopped (exit code 0)" in out
