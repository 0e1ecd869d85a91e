"""actorctl's task figures, measured exactly as ``bench/_celery.py`` measures Celery's.

    python bench/_tasks.py [--asks N] [--pipelined N] [--tells N] [--window 100] [--smoke]

Runs the cluster in ``bench/tasks.toml`` (one worker process hosting the pool "celery" of
``bench/_task_app.py``: concurrency 1, no threads, like Celery's one ``--pool=solo`` worker)
with ``actorctl cluster up`` on free ports, and measures from this process with the app's sync
API, as a Celery user would write it (``with app.connect(path):``), with the very functions of
``bench/_celery.py``:

* task_get_p50_us: sequential ``add.delay(1, 2).get()``, median round trip in us (after the
  same warm-up);
* task_pipelined_per_s: the same with ``--window`` calls in flight, calls/s;
* task_fire_forget_per_s: N ``add.apply_async((1, 2), ignore_result=True)``, then one
  ``add.delay(1, 2).get()``: the worker runs tasks in order, so that result arriving means all
  were processed: N / seconds from the first send to that result.

Then, on a separate connection from trio code (``async with app.aconnect(path):`` in
``trio.run``):

* task_ff_async_per_s: the same fire-and-forget run with ``await add.aapply_async(...)`` and
  ``await (await add.adelay(1, 2)).aget()``. Before it, one ``add.delay(0, 0)`` round trip
  checks the new connection (the counterpart of the sync connection's warm-up), untimed;
* task_pipelined_async_per_s: ``--window`` trio tasks each awaiting
  ``await (await add.adelay(1, 2)).aget()`` in turn, calls/s: the same shape as
  bench/_actorctl.py's pipelined ``ask``, so bench/run.py can set the task machinery against
  the message it rides on without the sync API's thread crossings in between.

Prints one JSON object on stdout; progress goes to stderr. ``--smoke`` (bench/_smoke.py): the
same with tiny counts, in a few seconds.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples._cluster import running_cluster

from bench._celery import (
    PHASE_TIMEOUT_S,
    measure_fire_forget,
    measure_get,
    measure_pipelined,
    parse_counts,
)
from bench._task_app import add, app

CLUSTER = Path(__file__).resolve().parent / "tasks.toml"
READY_TIMEOUT_S = 60.0
ASYNC_FINAL_TIMEOUT_S = 30.0


def _log(msg: str) -> None:
    print(f"[bench/_tasks] {msg}", file=sys.stderr, flush=True)


def _expect(value: object, wanted: int, what: str) -> None:
    if value != wanted:
        raise RuntimeError(f"{what} returned {value!r}, not {wanted}")


async def _fire_forget_async(count: int) -> float:
    """Messages/s from trio code: ``count`` results-ignored sends, until a final result."""
    with trio.fail_after(PHASE_TIMEOUT_S):
        t0 = time.perf_counter()
        for _ in range(count):
            await add.aapply_async((1, 2), ignore_result=True)
        final = await add.adelay(1, 2)
        _expect(await final.aget(timeout=ASYNC_FINAL_TIMEOUT_S), 3, "add(1, 2)")
        return count / (time.perf_counter() - t0)


async def _pipelined_async(count: int, window: int) -> float:
    """Calls/s from trio code: ``window`` tasks each awaiting one call's result in turn."""

    async def caller(n: int) -> None:
        for _ in range(n):
            result = await add.adelay(1, 2)
            _expect(await result.aget(timeout=ASYNC_FINAL_TIMEOUT_S), 3, "add(1, 2)")

    each = max(1, count // window)
    with trio.fail_after(PHASE_TIMEOUT_S):
        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(window):
                nursery.start_soon(caller, each)
        return each * window / (time.perf_counter() - t0)


async def _measure_async(path: Path, tells: int, pipelined: int, window: int) -> dict[str, float]:
    """The figures from trio code, on a connection of their own."""
    async with app.aconnect(path):
        ready = await add.adelay(0, 0)
        _expect(await ready.aget(timeout=READY_TIMEOUT_S), 0, "add(0, 0)")
        return {
            "task_ff_async_per_s": round(await _fire_forget_async(tells), 1),
            "task_pipelined_async_per_s": round(await _pipelined_async(pipelined, window), 1),
        }


def measure(
    asks: int = 500, pipelined: int = 3000, tells: int = 5000, window: int = 100
) -> dict[str, float]:
    t_setup = time.monotonic()
    with running_cluster(CLUSTER, echo=False) as path:
        with app.connect(path):
            _expect(add.delay(0, 0).get(timeout=READY_TIMEOUT_S), 0, "add(0, 0)")
            _log(f"setup took {time.monotonic() - t_setup:.1f} s; measuring")
            result = {
                "task_get_p50_us": round(measure_get(add, asks), 1),
                "task_pipelined_per_s": round(measure_pipelined(add, pipelined, window), 1),
                "task_fire_forget_per_s": round(measure_fire_forget(add, tells), 1),
            }
        _log("sync API done; fire-and-forget and pipelined from trio code on a new connection")
        result.update(trio.run(_measure_async, path, tells, pipelined, window))
    return result


def main() -> int:
    args = parse_counts(__doc__.splitlines()[0])
    print(json.dumps(measure(args.asks, args.pipelined, args.tells, args.window)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
