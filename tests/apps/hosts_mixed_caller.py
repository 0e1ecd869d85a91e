"""Callers on one host of tests/hosts/test_hosts_quorum.py (the task app of
tests/apps/hosts_app.py), in two modes.

``python -m tests.apps.hosts_mixed_caller mixed FILE IDS N SECONDS DELAY``:
connects to the cluster of FILE, sends one ``work`` task (its id the first in
IDS) and prints ``probed`` once it is confirmed, then waits for a line on its
stdin (the test's go) and sends, each confirmed before the next (``delay``
returns once the services node holds it): N ``work`` tasks of
SECONDS each, 10 ``work`` tasks with a countdown of DELAY seconds, a chord
of 3 ``work`` tasks of 2 s whose body is ``gather``, and 6 ``paced`` tasks
(1 a second: the router holds back all but the first). Every task id (the
chord's body's, not its header's: the body runs only once they all have) is
written to IDS beside FILE, then it prints ``sent COUNT``, waits for every
result (each within 120 s) and prints ``results OK FAILED``, then each
failure as ``failed ID ERROR``.

``python -m tests.apps.hosts_mixed_caller steady FILE IDS PACE``: sends
``work`` tasks of 0.2 s, one every PACE seconds, until a line comes on its
stdin (or 5,000 were sent: bounded), appending each id to IDS once it is
confirmed; prints ``sending`` after the first; a send that fails is counted
and named (``unconfirmed ID ERROR``), not sent again. Once told to stop it
prints ``sent CONFIRMED UNCONFIRMED``, waits for each confirmed task's result
(each within 120 s) and prints ``results OK FAILED``.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from actorctl import AsyncResult, chord
from tests.apps.hosts_app import app, gather, paced, work

#: Seconds a result may take to come back, once the caller waits for it.
RESULT_TIMEOUT = 120.0
#: The most tasks the steady caller sends (its loop is bounded).
MOST = 5000
HEADS = 3


def results(expected: list[tuple[AsyncResult, object]]) -> None:
    """Wait for each result, then print how many came back as expected."""
    failed = []
    for result, value in expected:
        try:
            if (got := result.get(timeout=RESULT_TIMEOUT)) != value:
                failed.append((result.id, f"{got!r}, not {value!r}"))
        except Exception as exc:  # every failure is counted and named, none raised
            failed.append((result.id, f"{type(exc).__name__}: {exc}"))
    print("results", len(expected) - len(failed), len(failed), flush=True)
    for task_id, error in failed:
        print("failed", task_id, error, flush=True)


def mixed(path: str, ids: str, count: int, seconds: float, delay: float) -> None:
    with app.connect(path):
        sent: list[tuple[AsyncResult, object]] = [(work.delay(-1, 0.0), -1)]
        print("probed", flush=True)
        sys.stdin.readline()
        sent += [(work.delay(i, seconds), i) for i in range(count)]
        sent += [(work.apply_async((i, 0.1), countdown=delay), i) for i in range(10)]
        header = [work.s(i, 2.0) for i in range(HEADS)]
        sent.append((chord(header)(gather.s()), sum(range(HEADS))))
        sent += [(paced.delay(), 1) for _ in range(6)]
        (Path(path).parent / ids).write_text("".join(f"{r.id}\n" for r, _ in sent))
        print("sent", len(sent), flush=True)
        results(sent)


def steady(path: str, ids: str, pace: float) -> None:
    stop = threading.Event()

    def listen() -> None:
        sys.stdin.readline()
        stop.set()

    threading.Thread(target=listen, daemon=True).start()
    confirmed: list[tuple[AsyncResult, object]] = []
    unconfirmed = 0
    with app.connect(path), (Path(path).parent / ids).open("a") as written:
        for i in range(MOST):
            if stop.is_set():
                break
            try:
                confirmed.append((work.delay(i, 0.2), i))
            except Exception as exc:  # counted and named: the caller was told
                unconfirmed += 1
                print("unconfirmed", i, f"{type(exc).__name__}: {exc}", flush=True)
                continue
            written.write(f"{confirmed[-1][0].id}\n")
            written.flush()
            if i == 0:
                print("sending", flush=True)
            stop.wait(pace)  # the caller's pace (a stop cuts it short)
        print("sent", len(confirmed), unconfirmed, flush=True)
        results(confirmed)


if __name__ == "__main__":
    mode, path, ids, *rest = sys.argv[1:]
    if mode == "mixed":
        mixed(path, ids, int(rest[0]), float(rest[1]), float(rest[2]))
    else:
        steady(path, ids, float(rest[0]))
