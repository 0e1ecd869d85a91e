"""A caller on one host of tests/hosts/test_hosts.py.

``python -m tests.apps.hosts_caller FILE N TIMEOUT [SECONDS [IDS]]``:

Connects to the cluster of FILE (``app.connect``), sends N ``work`` tasks
(each taking SECONDS, 0.1 by default), prints ``sent IDS_FILE`` once the pool
accepted them all (their ids written to IDS_FILE beside FILE: IDS, ``sent.txt``
by default), then waits for every result (each within TIMEOUT seconds) and
prints ``results OK FAILED`` and, for each failure, ``failed ID ERROR``.
It prints ``logged JSON`` for each log message of SHOWN it writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import eliot

from tests.apps.hosts_app import app, work

#: What the caller logs that the tests read (printed as ``logged JSON``).
SHOWN = frozenset({"actorctl:client:not-registered", "actorctl:client:resent"})


def show(message: dict[str, Any]) -> None:
    if message.get("message_type") in SHOWN:
        print("logged", json.dumps(message), flush=True)


def main(path: str, count: int, timeout: float, seconds: float = 0.1, ids: str = "") -> None:
    eliot.add_destinations(show)
    with app.connect(path):
        results = [work.delay(i, seconds) for i in range(count)]
        written = Path(path).parent / (ids or "sent.txt")
        written.write_text("".join(f"{r.id}\n" for r in results))
        print("sent", written, flush=True)
        failed = []
        for i, result in enumerate(results):
            try:
                if result.get(timeout=timeout) != i:
                    failed.append((result.id, "a wrong result"))
            except Exception as exc:  # every failure is counted and named, none raised
                failed.append((result.id, f"{type(exc).__name__}: {exc}"))
    print("results", count - len(failed), len(failed), flush=True)
    for task_id, error in failed:
        print("failed", task_id, error, flush=True)


if __name__ == "__main__":
    seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 0.1
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), seconds, *sys.argv[5:6])
