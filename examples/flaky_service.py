"""A task that calls a flaky HTTP service: retries, a circuit breaker, a dead
letter and its re-drive (the worked example of docs/fault-tolerance.md).

Run it with ``python -m examples.flaky_service``. It starts a price service on
127.0.0.1 (stdlib ``http.server``) that answers 503 until it is fixed, and the
cluster that examples/flaky_service.toml describes, then walks through:

1. the task's first call fails: it is retried (the caller sees ``RETRY``);
2. its third failure trips the ``prices`` breaker: the pool's work waits in
   the router's backlog, and ``actorctl cluster status`` shows it open;
3. after the reset period one probe runs (the last retry): it fails, the
   budget is spent, and the task is a dead letter (``actorctl deadletters list``);
4. the service is fixed, ``actorctl deadletters retry ID`` sends the letter
   again, and the task succeeds, once.

The intervals are short (a few seconds at most) so that it runs in seconds.
"""

from __future__ import annotations

import os
import sys
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import trio

from actorctl import App

app = App("flaky")
# The downstream resource: 3 failures within a minute open it for 3 s.
app.breaker("prices", failures=3, reset=3.0)

WAIT = 30.0
ROOT = str(Path(__file__).resolve().parent.parent)


@app.task(
    bind=True,
    breaker="prices",
    retry_policy={"max_retries": 3, "interval_start": 0.1, "interval_step": 0.1, "interval_max": 1},
)
def fetch_price(ctx: object, port: int, sku: str) -> float:
    """The price of ``sku``, from the price service: an HTTPError (a 503) is retried."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/prices/{sku}",
        headers={"X-Task-Id": ctx.id, "X-Attempt": str(ctx.retries)},  # type: ignore[attr-defined]
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return float(response.read())


class PriceService(ThreadingHTTPServer):
    """Answers 503 until ``fixed``, then the price. Records every call: (task id,
    attempt, status), so that the example counts the task's runs."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Prices)
        self.fixed = False
        self.calls: list[tuple[str, str, int]] = []
        self.changed = threading.Condition()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def answer(self, task_id: str, attempt: str) -> int:
        with self.changed:
            status = 200 if self.fixed else 503
            self.calls.append((task_id, attempt, status))
            self.changed.notify_all()
            return status

    def wait_for(self, predicate: object, timeout: float = WAIT) -> None:
        """Wait until ``predicate(calls)`` holds (``WAIT`` s at most)."""
        with self.changed:
            if not self.changed.wait_for(lambda: predicate(self.calls), timeout):  # type: ignore[operator]
                raise TimeoutError(f"the price service: not within {timeout:g} s")


class _Prices(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        assert isinstance(self.server, PriceService)
        status = self.server.answer(
            self.headers.get("X-Task-Id", ""), self.headers.get("X-Attempt", "")
        )
        body = b"12.5" if status == 200 else b"the price service is down"
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # the example prints what matters


@contextmanager
def price_service() -> Iterator[PriceService]:
    server = PriceService()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


async def actorctl(*args: str) -> str:
    """Run ``actorctl ARGS`` as a user does, from another process; its output."""
    paths = [os.path.join(ROOT, "src"), ROOT, os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    with trio.fail_after(WAIT):
        done = await trio.run_process(
            [sys.executable, "-m", "actorctl", *args], capture_stdout=True,
            capture_stderr=True, env=env, check=False,
        )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"actorctl {' '.join(args)}: {done.stderr.decode().strip()}")
    return done.stdout.decode()


async def until_line(words: tuple[str, ...], *args: str) -> str:
    """Run ``actorctl ARGS`` until a line of its output holds every one of
    ``words`` (what it shows may lag what happened by a moment: a dead letter
    goes through its node's backlog). Attempts are 0.2 s apart, not back to
    back: each one starts a process and asks every node of the cluster."""
    with trio.fail_after(WAIT):
        while True:
            for line in (await actorctl(*args)).splitlines():
                if all(word in line for word in words):
                    return line.strip(" │├└─")
            await trio.sleep(0.2)


async def walk_through(cluster: Path, service: PriceService) -> str:
    """The stages, each printed; the task's id."""
    async with app.aconnect(cluster):
        result = await fetch_price.adelay(service.port, "sku-42")
        task_id = result.id
        print(f"1. sent fetch_price(port, 'sku-42'): task {task_id}")

        await result.await_state("RETRY", timeout=WAIT)
        print(
            f"2. the caller sees {result.state}: attempt {result.retries} failed: {result.result}"
        )

        def failures(n: int) -> object:
            return lambda calls: sum(1 for c in calls if c[0] == task_id) >= n

        await trio.to_thread.run_sync(service.wait_for, failures(3))
        line = await until_line(("prices  breaker  open  ",), "cluster", "status", str(cluster))
        print(f"3. 3 failures: the breaker opened; the pool's work waits. cluster status: {line}")

        await result.aget(timeout=WAIT, propagate=False)
        print(f"4. out of retries: {result.state}: {result.result}")

    row = await until_line(("out-of-retries",), "deadletters", "list", str(cluster))
    letter_id = row.split()[0]
    print(f"5. a dead letter: {row}")

    service.fixed = True
    redriven = (await actorctl("deadletters", "retry", str(cluster), letter_id)).strip()
    print(f"6. the service is fixed; deadletters retry: {redriven}")
    await trio.to_thread.run_sync(
        service.wait_for, lambda calls: any(c[0] == task_id and c[2] == 200 for c in calls)
    )
    print("7. the re-driven task ran and got its price")
    return task_id


def main() -> None:
    from examples._cluster import running_cluster

    with price_service() as service:
        with running_cluster(Path(__file__).with_suffix(".toml"), echo=False) as cluster:
            print(f"cluster 'flaky' ready; the price service answers 503 on port {service.port}")
            task_id = trio.run(walk_through, cluster, service)
        print("cluster stopped")
        # Counted after the cluster stopped: nothing can run any more.
        runs = [status for t, _, status in service.calls if t == task_id]
        lost = 0 if runs[-1:] == [200] else 1
        print(
            f"runs of task {task_id}: {len(runs)} ({runs.count(503)} answered 503, "
            f"{runs.count(200)} answered 200 after the re-drive); lost {lost}"
        )


if __name__ == "__main__":
    main()
