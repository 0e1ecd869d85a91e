"""Every example runs, for real, as the README says to run it."""

from __future__ import annotations

import sys
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[2]


async def _run_example(module: str, timeout: float) -> str:
    """Run ``python -m module`` from the repository root; its output, once it succeeded."""
    with trio.fail_after(timeout):
        result = await trio.run_process(
            [sys.executable, "-m", module],
            cwd=ROOT,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


async def test_the_two_node_example_runs_and_reports_its_work() -> None:
    out = await _run_example("examples.two_nodes", 60)
    assert "worker node ready at amqps://127.0.0.1:" in out  # TLS by default
    assert "78498 primes below 1,000,000" in out
    assert "'Ode': 11 words" in out
    assert "missing @ doc.text" in out
    assert "worker node stopped (exit code 0)" in out


async def test_the_cluster_example_survives_a_killed_node_and_reports_its_work() -> None:
    out = await _run_example("examples.cluster_demo", 120)
    assert "cluster 'demo' ready" in out
    assert "all 200 documents counted through the router despite the kill" in out
    assert "(restart 1)" in out
    assert "41538 primes below 500,000" in out
    assert "cluster stopped (exit code 0)" in out


async def test_celerys_first_example_runs_on_a_real_cluster() -> None:
    out = await _run_example("examples.tasks", 90)
    assert "cluster 'tasks' ready" in out
    assert "add.delay(1, 2).get() == 3  (SUCCESS, task " in out
    assert "their results sum to 9900" in out
    assert "cluster stopped" in out


async def test_the_user_registered_event_reaches_each_service_once() -> None:
    out = await _run_example("examples.user_registered", 90)
    assert "published 3 UserRegistered events" in out
    for email in ("ada", "grace", "alan"):
        assert f"emails: welcome email to {email}@example.com" in out
    for user in (1, 2, 3):
        assert f"crm: CRM contact for user {user}" in out
    assert "cluster stopped" in out


async def test_the_flaky_service_example_goes_from_retry_to_dead_letter_to_re_drive() -> None:
    out = await _run_example("examples.flaky_service", 120)
    assert "the caller sees RETRY: attempt 0 failed: HTTPError: HTTP Error 503" in out
    [status] = [line for line in out.splitlines() if line.startswith("3. ")]
    assert "prices  breaker  open  3 failures within 60 s" in status
    assert "out of retries: FAILURE: HTTPError" in out
    assert "(gave up after 3 retries)" in out
    [letter] = [line for line in out.splitlines() if line.startswith("5. ")]
    assert "  worker  " in letter
    assert " out-of-retries " in letter
    assert "(re-drive 1)" in out  # the same message id, with its redrive header
    assert "the re-driven task ran and got its price" in out
    assert "cluster stopped" in out
    # Counted after the cluster stopped: 4 runs (the first and its 3 retries),
    # then the re-driven one, once; nothing lost
    assert "5 (4 answered 503, 1 answered 200 after the re-drive); lost 0" in out
