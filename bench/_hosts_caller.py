"""bench/hosts.py's caller, run on host a: ``python bench/_hosts_caller.py FILE ETCD N WINDOW``.

Connects to the cluster of FILE, warms up, then times N ``add`` tasks with
WINDOW in flight (bench/_celery.py's ``measure_pipelined``: every result
checked), and prints one JSON object: ``tasks_per_s`` and ``etcd_requests``,
the requests etcd (at ETCD) served during the timed phase by gRPC method
(its ``grpc_server_started_total`` counters, read before and after).
"""

from __future__ import annotations

import json
import re
import sys
import urllib.request
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.apps.hosts_app import add, app

from bench._celery import measure_pipelined

_STARTED = re.compile(r'^grpc_server_started_total\{grpc_method="(\w+)"[^}]*\} (\S+)$', re.M)


def etcd_requests(url: str) -> Counter[str]:
    """Requests etcd has started, by gRPC method, since it started."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    found: Counter[str] = Counter()
    for method, value in _STARTED.findall(text):
        found[method] += int(float(value))
    return found


def main(path: str, etcd: str, count: int, window: int) -> None:
    with app.connect(path):
        measure_pipelined(add, min(count, 500), window)  # warm-up: connections, code paths
        before = etcd_requests(etcd)
        per_s = measure_pipelined(add, count, window)
        after = etcd_requests(etcd)
    during = {m: after[m] - before[m] for m in after if after[m] != before[m]}
    print(json.dumps({"tasks_per_s": round(per_s, 1), "etcd_requests": during}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
