"""Reference figures for Celery with Redis as broker and result backend.

    python bench/_celery.py [--asks N] [--pipelined N] [--tells N] [--window 100] [--smoke]

Installs what is missing (``celery[redis]`` from PyPI into this interpreter, ``redis-server``
from Debian's packages), starts its own ``redis-server`` on a free loopback port and one Celery
worker (``--pool=solo``, the app in ``bench/_celery_tasks.py``) as subprocesses, and measures
from this process, with the same app:

* task_get_p50_us: sequential ``add.delay(1, 2).get()``, median round trip in us;
* task_pipelined_per_s: the same with ``--window`` calls in flight (when the oldest result
  arrives, another call is sent), calls/s from the first send to the last result;
* task_fire_forget_per_s: N ``add.apply_async((1, 2), ignore_result=True)`` sent as fast as
  possible, then one ``add.delay(1, 2).get()``; the solo worker runs tasks in order, so that
  result arriving means all were processed: N / seconds from the first send to that result.

Prints one JSON object on stdout; progress goes to stderr. The worker and Redis are stopped at
the end by the PIDs of the processes this script started (SIGTERM, then SIGKILL after 10 s).

``--smoke`` (bench/_smoke.py): tiny counts; and where Celery, redis-py or redis-server is
missing, nothing is installed: it prints ``{"skipped": "<what is missing>"}`` and exits 0.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import IO, Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _smoke

ROOT = Path(__file__).resolve().parent.parent

CELERY_REQUIREMENT = "celery[redis]>=5.3,<6"
INSTALL_TIMEOUT_S = 900.0
REDIS_PING_ATTEMPTS = 200
REDIS_PING_INTERVAL_S = 0.025
WORKER_READY_TIMEOUT_S = 60.0
GET_TIMEOUT_S = 10.0
PHASE_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 10.0
WARMUP = 50


class SetupError(Exception):
    """Something this benchmark needs could not be installed or started."""


def _log(msg: str) -> None:
    print(f"[bench/_celery] {msg}", file=sys.stderr, flush=True)


def _run(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Runs an install command with a time bound; its output goes to our stderr."""
    _log("running: " + " ".join(cmd))
    try:
        return subprocess.run(
            cmd,
            stdout=sys.stderr,
            stderr=sys.stderr,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
            timeout=INSTALL_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise SetupError(f"{cmd[0]} did not finish within {INSTALL_TIMEOUT_S:.0f} s") from exc


def _importable() -> bool:
    try:
        importlib.import_module("celery")
        importlib.import_module("redis")
    except ImportError:
        return False
    return True


def ensure_celery() -> None:
    """Makes ``celery`` and ``redis`` (redis-py) importable, installing them from PyPI if not."""
    if _importable():
        return
    _log(f"installing {CELERY_REQUIREMENT} into {sys.executable}")
    proc = _run([sys.executable, "-m", "pip", "install", "-q", CELERY_REQUIREMENT])
    if proc.returncode != 0:
        raise SetupError(f"pip install {CELERY_REQUIREMENT!r} failed (exit {proc.returncode})")
    importlib.invalidate_caches()
    if not _importable():
        raise SetupError("celery or redis is still not importable after pip install")


def missing() -> str | None:
    """What the Celery side needs and this machine lacks (a smoke run installs
    nothing), or None when it has it all."""
    absent = [name for name in ("celery", "redis") if importlib.util.find_spec(name) is None]
    lacks = []
    if absent:
        lacks.append(f"{' and '.join(absent)} not importable (pip install {CELERY_REQUIREMENT!r})")
    if shutil.which("redis-server") is None:
        lacks.append("redis-server not installed (apt-get install redis-server)")
    return "; ".join(lacks) or None


def ensure_redis_server() -> str:
    """Returns the path of ``redis-server``, installing Debian's package if it is missing."""
    path = shutil.which("redis-server")
    if path:
        return path
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "redis-server"]
    _log("redis-server not found: installing it with apt-get")
    if _run(install, env).returncode != 0:
        _log("apt-get install failed: running apt-get update, then trying again")
        if _run(["apt-get", "update", "-q"], env).returncode != 0:
            raise SetupError("apt-get update failed")
        if _run(install, env).returncode != 0:
            raise SetupError("apt-get install redis-server failed")
    path = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None
    )
    if not path:
        raise SetupError("redis-server is still not on PATH after apt-get install")
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(log: IO[bytes], limit: int = 4000) -> str:
    log.flush()
    log.seek(0)
    return log.read().decode(errors="replace")[-limit:]


def start_redis(redis_server: str, log: IO[bytes]) -> tuple[subprocess.Popen[bytes], str, str]:
    """Starts redis-server on a free loopback port; returns (process, URL, server version)."""
    import redis

    port = _free_port()
    cmd = [
        redis_server,
        "--bind", "127.0.0.1",
        "--port", str(port),
        "--save", "",
        "--appendonly", "no",
        "--daemonize", "no",
    ]  # fmt: skip
    _log(f"starting redis-server on 127.0.0.1:{port}")
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1, socket_timeout=1)
    try:
        for _ in range(REDIS_PING_ATTEMPTS):
            if proc.poll() is not None:
                raise SetupError(
                    f"redis-server exited with {proc.returncode} before answering PING:\n"
                    + _tail(log)
                )
            try:
                if client.ping():
                    version = str(client.info("server")["redis_version"])
                    return proc, f"redis://127.0.0.1:{port}/0", version
            except redis.exceptions.ConnectionError:
                pass
            time.sleep(REDIS_PING_INTERVAL_S)
        raise SetupError(
            f"redis-server did not answer PING after {REDIS_PING_ATTEMPTS} attempts:\n" + _tail(log)
        )
    except BaseException:
        stop(proc, "redis-server")
        raise
    finally:
        client.close()


def start_worker(redis_url: str, log: IO[bytes]) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable, "-m", "celery", "-A", "bench._celery_tasks", "worker",
        "--pool=solo", "--concurrency=1", "--loglevel=WARNING",
        "--without-gossip", "--without-mingle", "--without-heartbeat",
    ]  # fmt: skip
    env = dict(os.environ, BENCH_REDIS_URL=redis_url)
    _log("starting the celery worker")
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
    )


def wait_worker_ready(add: Any, worker: subprocess.Popen[bytes], log: IO[bytes]) -> None:
    """Waits until the worker has run one task, or fails after WORKER_READY_TIMEOUT_S."""
    from celery.exceptions import TimeoutError as CeleryTimeout

    deadline = time.monotonic() + WORKER_READY_TIMEOUT_S
    result = add.delay(0, 0)
    while True:
        if worker.poll() is not None:
            raise SetupError(f"the celery worker exited with {worker.returncode}:\n" + _tail(log))
        try:
            if result.get(timeout=1.0) != 0:
                raise SetupError("the worker's first result was wrong")
            return
        except CeleryTimeout:
            if time.monotonic() > deadline:
                raise SetupError(
                    f"the celery worker was not ready within {WORKER_READY_TIMEOUT_S:.0f} s:\n"
                    + _tail(log)
                ) from None


def stop(proc: subprocess.Popen[bytes], name: str) -> None:
    """Stops a process this script started: SIGTERM, then SIGKILL after STOP_TIMEOUT_S."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _log(f"{name} (pid {proc.pid}) ignored SIGTERM for {STOP_TIMEOUT_S:.0f} s: SIGKILL")
        proc.kill()
        proc.wait(timeout=STOP_TIMEOUT_S)


def _check(value: Any) -> None:
    if value != 3:
        raise RuntimeError(f"add(1, 2) returned {value!r}")


def _deadline_check(deadline: float, phase: str) -> None:
    if time.monotonic() > deadline:
        raise RuntimeError(f"{phase} did not finish within {PHASE_TIMEOUT_S:.0f} s")


def measure_get(add: Any, count: int) -> float:
    """Median round trip of sequential ``add.delay(1, 2).get()``, in microseconds."""
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    for _ in range(WARMUP):
        _check(add.delay(1, 2).get(timeout=GET_TIMEOUT_S))
    samples: list[float] = []
    for _ in range(count):
        t0 = time.perf_counter_ns()
        value = add.delay(1, 2).get(timeout=GET_TIMEOUT_S)
        samples.append((time.perf_counter_ns() - t0) / 1000)
        _check(value)
        _deadline_check(deadline, "sequential get")
    return statistics.median(samples)


def measure_pipelined(add: Any, count: int, window: int) -> float:
    """Calls/s with ``window`` calls in flight, from the first send to the last result."""
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    pending: deque[Any] = deque()
    t0 = time.perf_counter()
    sent = 0
    while sent < min(window, count):
        pending.append(add.delay(1, 2))
        sent += 1
    while pending:
        _check(pending.popleft().get(timeout=GET_TIMEOUT_S))
        if sent < count:
            pending.append(add.delay(1, 2))
            sent += 1
        _deadline_check(deadline, "pipelined")
    return count / (time.perf_counter() - t0)


def measure_fire_forget(add: Any, count: int) -> float:
    """Messages/s: ``count`` results-ignored sends, until a final call's result arrives."""
    t0 = time.perf_counter()
    for _ in range(count):
        add.apply_async((1, 2), ignore_result=True)
    _check(add.delay(1, 2).get(timeout=PHASE_TIMEOUT_S))
    return count / (time.perf_counter() - t0)


def measure(asks: int = 500, pipelined: int = 3000, tells: int = 5000, window: int = 100) -> dict:
    t_setup = time.monotonic()
    ensure_celery()
    redis_server = ensure_redis_server()
    import celery

    with tempfile.TemporaryFile() as redis_log, tempfile.TemporaryFile() as worker_log:
        redis_proc, url, redis_version = start_redis(redis_server, redis_log)
        worker: subprocess.Popen[bytes] | None = None
        try:
            # The app reads its URL when first imported, so set it before.
            os.environ["BENCH_REDIS_URL"] = url
            sys.path.insert(0, str(ROOT))
            from bench._celery_tasks import add, app

            worker = start_worker(url, worker_log)
            wait_worker_ready(add, worker, worker_log)
            _log(f"setup took {time.monotonic() - t_setup:.1f} s; measuring")
            result = {
                "task_get_p50_us": round(measure_get(add, asks), 1),
                "task_pipelined_per_s": round(measure_pipelined(add, pipelined, window), 1),
                "task_fire_forget_per_s": round(measure_fire_forget(add, tells), 1),
                "celery_version": celery.__version__,
                "redis_version": redis_version,
            }
            app.close()
            return result
        finally:
            if worker is not None:
                stop(worker, "celery worker")
            stop(redis_proc, "redis-server")


def parse_counts(description: str) -> argparse.Namespace:
    """The counts both task benchmarks take, with the same defaults."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--asks", type=int, default=500, help="sequential get calls")
    parser.add_argument("--pipelined", type=int, default=3000, help="pipelined calls")
    parser.add_argument("--tells", type=int, default=5000, help="fire-and-forget sends")
    parser.add_argument("--window", type=int, default=100, help="pipelined calls in flight")
    args = _smoke.parse_args(parser, asks=20, pipelined=100, tells=100, window=20)
    if min(args.asks, args.pipelined, args.tells, args.window) < 1:
        parser.error("counts and --window must be at least 1")
    return args


def main() -> int:
    args = parse_counts(__doc__.splitlines()[0])
    if args.smoke and (lacks := missing()):
        _log(f"smoke run: the Celery side is skipped: {lacks}")
        print(json.dumps({"skipped": lacks}))
        return 0
    try:
        result = measure(args.asks, args.pipelined, args.tells, args.window)
    except SetupError as exc:
        _log(f"setup failed: {exc}")
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
