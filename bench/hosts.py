"""Benchmark: tasks across hosts (network namespaces joined by veth) against the
same cluster on loopback, measured in the same run (issue 18).

    sudo python bench/hosts.py            # a table, then one JSON object
    sudo python bench/hosts.py --json     # one JSON object
    sudo python bench/hosts.py --smoke    # does it still run? (tests/project/test_bench_smoke.py)

The cluster is tests/support/hosts_cluster.py's: etcd and the services node (the pool's
router) on host a, a worker node of the ``celery`` pool on each of b and c,
mutual TLS and signed messages, each host under ``actorctl host up``. A caller
on host a (bench/_hosts_caller.py) times ``--tasks`` ``add`` tasks with
``--window`` in flight, every result checked. Each mode is one way of keeping
what a sender was told is accepted (issue 34 weighs them: docs/deploy.md,
"Replication"):

``veth``
    hosts a, b and c are three namespaces; the router confirms a task once
    the services node's store holds it (on host a alone).
``loopback``
    the same three nodes all in namespace a, on 127.0.0.1.
``replicated``
    as ``veth``, with a second services node on host b: the holder of the
    services role, on a, confirms each task only once services-b has
    committed it to its copy of a's store.
``end_to_end``
    as ``veth``, but the caller keeps each task until a worker settles it:
    it sends it durable straight to the pool's workers (as etcd's directory
    lists them, in turn), its own backlog (its own SQLite store) keeping the
    row until the worker settled the task after running it; no router, no
    services node on the path. What it leaves out: a delayed task, a chord's
    barrier, a task held back by a rate limit and a periodic firing have no
    sender that waits for them, and a router's choice of the least loaded
    worker is gone (the caller takes them in turn).
``end_to_end_router``
    as ``end_to_end``, but through a router on the services node that
    forwards each task to the least loaded worker without taking it over
    (it settles it once the worker did: the caller's backlog keeps it until
    then), as issue 34 words the option; its choice of worker is back, and
    the hop through host a.
``etcd``
    as ``veth`` on an etcd of three members (one a host, as docs/deploy.md
    says to run it), each task first put in etcd (one write of a router's
    backlog row for it, awaited before the task is sent: a confirmation that
    waits for etcd); and, apart, ``--tasks`` such puts, then deletes, with
    ``--window`` in flight: what etcd alone takes (``etcd_puts_per_s``,
    ``etcd_deletes_per_s``).

Each figure is the median of ``--rounds`` rounds (the JSON object has each
round's too, ``MODE_rounds``), the modes interleaved in
each (a new cluster each); ``cross_host_ratio`` is veth / loopback, and
``replication_ratio``, ``end_to_end_ratio``, ``end_to_end_router_ratio``
and ``etcd_ratio`` are those modes over veth (with ``--window`` tasks in
flight, a task's time from send to result is about the window over the
rate: a ratio's inverse is what that way of keeping tasks adds to it).

Routing a task to a logical name (the pool) costs no etcd round trip per
message: each node keeps the directory in memory, read once and then watched
(``etcd/_etcd_directory.py``: ``EtcdDirectory.pool_workers`` answers from
the cached view; ``cluster/membership/_member.py``'s ``PoolRouting`` retargets the pool's
router only when the directory changes). The caller shows it: it reads etcd's
request counters before and after the timed phase, and what etcd served meanwhile
(``etcd_requests``) is the nodes' lease renewals, a few per second whatever the
number of tasks, and no reads.

Needs root (CAP_SYS_ADMIN) and iproute2 to make namespaces, and etcd: exits
with a message saying which is missing, with status 77 (bench/_smoke.py's
UNAVAILABLE; the smoke test skips, quoting it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.hosts_cluster import READY, ROOT, Hosts
from tests.support.netns import NetnsUnavailable, Network

from bench import _smoke

MODES = ("veth", "loopback", "replicated", "end_to_end", "end_to_end_router", "etcd")
#: The modes compared with veth, and the name of each one's ratio (``NAME_ratio``).
RATIOS = {
    "replicated": "replication",
    "end_to_end": "end_to_end",
    "end_to_end_router": "end_to_end_router",
    "etcd": "etcd",
}
#: How the caller sends in each mode (bench/_hosts_caller.py).
CALLER = {mode: mode for mode in ("end_to_end", "end_to_end_router", "etcd")}


def measure(network: Network, mode: str, tasks: int, window: int) -> dict[str, Any]:
    """One round: a new cluster in ``mode``, the caller's JSON object."""
    with tempfile.TemporaryDirectory(prefix=f"bench-hosts-{mode}-") as directory:
        replicated = mode == "replicated"
        hosts = Hosts(
            network,
            Path(directory),
            loopback=mode == "loopback",
            services_b=replicated,
            etcd_quorum=mode == "etcd",
            forwarding_router=mode == "end_to_end_router",
        )
        try:
            # Replicated: host a first, so that its services node holds the role.
            hosts.start(order=("a",) if replicated else ())
            argv = [sys.executable, "bench/_hosts_caller.py", CALLER.get(mode, "router")]
            caller = network.run(
                "a",
                [*argv, str(hosts.path), ",".join(hosts.etcd_urls), str(tasks), str(window)],
                stdout=subprocess.PIPE,
                env=hosts.env,
                cwd=ROOT,
            )
            out, _ = caller.communicate(timeout=READY + tasks / 5)
            if caller.returncode != 0:
                raise SystemExit(
                    f"bench/_hosts_caller.py failed ({mode}): exit {caller.returncode}"
                )
            result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
            return result
        finally:
            hosts.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print only one JSON object")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--window", type=int, default=100)
    args = _smoke.parse_args(parser, rounds=1, tasks=50, window=10)
    network = Network(("a", "b", "c"))
    try:
        try:
            network.make()
        except NetnsUnavailable as exc:
            print(f"network namespaces cannot be made here (run as root?): {exc}", file=sys.stderr)
            raise SystemExit(_smoke.UNAVAILABLE) from None
        rounds: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
        for i in range(args.rounds):
            for mode in MODES:
                rounds[mode].append(measure(network, mode, args.tasks, args.window))
            print(f"round {i + 1}/{args.rounds} done", file=sys.stderr)
    except pytest.skip.Exception as exc:  # tests/support/etcd_server.py: etcd is not installed
        print(exc, file=sys.stderr)
        raise SystemExit(_smoke.UNAVAILABLE) from None
    finally:
        network.close()
    result: dict[str, Any] = {"tasks": args.tasks, "window": args.window}
    for mode in MODES:
        result[f"{mode}_tasks_per_s"] = round(
            statistics.median(r["tasks_per_s"] for r in rounds[mode]), 1
        )
        result[f"{mode}_etcd_requests"] = rounds[mode][-1]["etcd_requests"]
        result[f"{mode}_rounds"] = [r["tasks_per_s"] for r in rounds[mode]]
    result["cross_host_ratio"] = round(
        result["veth_tasks_per_s"] / result["loopback_tasks_per_s"], 3
    )
    for mode, ratio in RATIOS.items():
        result[f"{ratio}_ratio"] = round(
            result[f"{mode}_tasks_per_s"] / result["veth_tasks_per_s"], 3
        )
    for key in ("etcd_puts_per_s", "etcd_deletes_per_s"):
        result[key] = round(statistics.median(r[key] for r in rounds["etcd"]), 1)
    result["etcd_value_bytes"] = rounds["etcd"][-1]["value_bytes"]
    if not args.json:
        print_table(result, args.window)
    print(json.dumps(result))


def print_table(result: dict[str, Any], window: int) -> None:
    """The figures of ``result``, one mode a line, then the ratios."""
    label = f"add tasks, {window} in flight"
    print(f"{label:50} {'tasks/s':>10} {'etcd requests, timed phase':>28}")
    for mode in MODES:
        requests = ", ".join(f"{m} {n}" for m, n in sorted(result[f"{mode}_etcd_requests"].items()))
        print(f"{mode:50} {result[f'{mode}_tasks_per_s']:>10,.1f} {requests or 'none':>28}")
    size = result["etcd_value_bytes"]
    for key, what in (("etcd_puts_per_s", "puts"), ("etcd_deletes_per_s", "deletes")):
        print(f"{f'etcd alone: {what} of {size} bytes':50} {result[key]:>10,.1f}")
    print(f"{'cross-host ratio (veth/loopback)':50} {result['cross_host_ratio']:>9.2f}x")
    for mode, ratio in RATIOS.items():
        print(f"{f'{ratio} ratio ({mode}/veth)':50} {result[f'{ratio}_ratio']:>9.2f}x")


if __name__ == "__main__":
    main()
