"""``bench/task_cost.py --calls --sync``: the caller's function calls per task on the sync API.

A Celery user's caller (``with app.connect(path):``, as ``bench/_tasks.py`` measures it) has
two busy threads: the user's own, which runs ``delay()`` and ``get()``, and the client's
trio thread, which sends, reads the results and hands them over. Both share one GIL, so
the calls of each count. This counts them with cProfile in each thread (one profiler
enabled in the main thread, one in the client's trio thread through its trio token) over
the shapes of ``bench/_celery.py``:

* pipelined: ``--window`` calls in flight, ``get()`` of the oldest then one ``delay()``;
* fire_forget: ``apply_async((1, 2), ignore_result=True)``, then one ``delay().get()``;
* sequential: ``delay(1, 2).get()`` one after another (a quarter as many).

The loops here are the benchmark's less its clock readings, so that only actorctl's calls
are counted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from bench._stages import CallCounter
from bench._task_app import add, app

__all__ = ["PHASES", "measure_sync", "sync_calls_table"]

TIMEOUT_S = 120.0
PHASES = ("pipelined", "fire_forget", "sequential")


def _check(value: object) -> None:
    if value != 3:
        raise RuntimeError(f"add(1, 2) returned {value!r}")


def _pipelined(count: int, window: int) -> None:
    pending: deque[Any] = deque(add.delay(1, 2) for _ in range(min(window, count)))
    sent = len(pending)
    while pending:
        _check(pending.popleft().get(timeout=TIMEOUT_S))
        if sent < count:
            pending.append(add.delay(1, 2))
            sent += 1


def _fire_forget(count: int, _window: int) -> None:
    for _ in range(count):
        add.apply_async((1, 2), ignore_result=True)
    _check(add.delay(1, 2).get(timeout=TIMEOUT_S))


def _sequential(count: int, _window: int) -> None:
    for _ in range(count):
        _check(add.delay(1, 2).get(timeout=TIMEOUT_S))


_RUNS: dict[str, Callable[[int, int], None]] = {
    "pipelined": _pipelined,
    "fire_forget": _fire_forget,
    "sequential": _sequential,
}


def measure_sync(cluster: Path, tasks: int, window: int) -> dict[str, Any]:
    """Each phase's tasks and the functions each thread called (``CallCounter.report``)."""
    result: dict[str, Any] = {}
    with app.connect(cluster) as client:
        if add.delay(0, 0).get(timeout=TIMEOUT_S) != 0:
            raise RuntimeError("add(0, 0) did not return 0")
        _pipelined(min(tasks, 500), window)  # warm-up
        _fire_forget(min(tasks, 500), window)
        for phase in PHASES:
            count = max(1, tasks // 4) if phase == "sequential" else tasks
            main, loop = CallCounter(), CallCounter()
            trio.from_thread.run_sync(loop.start, trio_token=client.token)
            main.start()
            try:
                _RUNS[phase](count, window)
            finally:
                main.stop()
                trio.from_thread.run_sync(loop.stop, trio_token=client.token)
            result[phase] = {"tasks": count, "main": main.report(), "trio": loop.report()}
    return result


def sync_calls_table(result: dict[str, Any], window: int, top: int, commit: str) -> str:
    """Calls per task in each of the caller's threads, per phase, and the functions behind them."""
    lines = [
        f"actorctl caller's function calls per task on the sync API (commit {commit}): "
        f"add(1, 2), pipelined with {window} in flight, fire-and-forget, sequential; "
        "counted by cProfile in the main thread and in the client's trio thread"
    ]
    for phase in PHASES:
        tasks = result[phase]["tasks"]
        for thread in ("main", "trio"):
            functions: dict[str, list[float]] = result[phase][thread]["functions"]
            total = sum(row[1] for row in functions.values())
            lines += ["", f"{phase}, {thread} thread: {total / tasks:,.1f} calls per task"]
            lines.append(f"  {'calls/task':>10} {'own µs':>8} {'with callees':>12}  function")
            ranked = sorted(functions.items(), key=lambda item: -item[1][1])[:top]
            for where, (_, ncalls, own, inclusive) in ranked:
                lines.append(
                    f"  {ncalls / tasks:>10.2f} {own * 1e6 / tasks:>8.1f} "
                    f"{inclusive * 1e6 / tasks:>12.1f}  {where}"
                )
    return "\n".join(lines)
