"""Benchmark: what metrics cost the message path, on against off, same run.

    python bench/metrics.py            # a table of figures and the ratios
    python bench/metrics.py --json     # one JSON object
    python bench/metrics.py --smoke    # does it still run? (tests/project/test_bench_smoke.py)

Each round runs the bench node (bench/_actors.py, a subprocess, mutual TLS and
session-signed messages) twice, in turn: without metrics, and serving
``/metrics`` while this process scrapes it every 0.5 s (far more often than
Prometheus would). It measures one-way tell throughput and pipelined asks (100
in flight). Each figure is the median of ``--rounds``.

Target (issue 17): metrics on at least 0.95x off. The counters are always
kept (plain ``+= 1`` per message); what "on" adds is the endpoint and the
scrapes, read from those counters.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actorctl.cluster._http import http_get
from bench import _actorctl, _smoke

KEYS = {
    "tell_per_s": "one-way tell, messages/s",
    "ask_pipelined_per_s": "ask, 100 in flight, calls/s",
}


async def _one(metrics: bool, tells: int, asks: int) -> dict[str, float]:
    port = _actorctl._free_port() if metrics else None
    scrapes = 0
    with tempfile.TemporaryDirectory() as directory:
        async with (
            _actorctl._bench_node("session", Path(directory), metrics=port) as ref,
            trio.open_nursery() as nursery,
        ):
            if port is not None:

                async def scrape() -> None:
                    nonlocal scrapes
                    while True:
                        status, _ = await http_get("127.0.0.1", port, "/metrics", timeout=5.0)
                        assert status == 200
                        scrapes += 1
                        await trio.sleep(0.5)

                nursery.start_soon(scrape)
            with trio.fail_after(300):
                await _actorctl._tell(ref, min(tells, 2000))  # warm up
                tell = await _actorctl._tell(ref, tells)
                piped = await _actorctl._pipelined(ref, asks)
            nursery.cancel_scope.cancel()
    return {"tell_per_s": tell, "ask_pipelined_per_s": piped, "scrapes": scrapes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tells", type=int, default=20000)
    parser.add_argument("--asks", type=int, default=10000)
    args = _smoke.parse_args(parser, rounds=1, tells=200, asks=200)
    runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    for i in range(args.rounds):
        for mode in ("off", "on"):
            runs[mode].append(trio.run(_one, mode == "on", args.tells, args.asks))
        print(f"round {i + 1}/{args.rounds} done", file=sys.stderr)
    result: dict[str, Any] = {}
    for key in KEYS:
        off = statistics.median(r[key] for r in runs["off"])
        on = statistics.median(r[key] for r in runs["on"])
        result[key] = {"off": off, "on": on, "ratio": on / off}
    result["scrapes_per_round"] = statistics.median(r["scrapes"] for r in runs["on"])
    if args.json:
        print(json.dumps(result))
        return
    print(f"{'figure':<32}{'off':>12}{'on':>12}{'ratio':>8}   (target >= 0.95)")
    for key, label in KEYS.items():
        r = result[key]
        print(f"{label:<32}{r['off']:>12,.1f}{r['on']:>12,.1f}{r['ratio']:>7.2f}x")
    print(f"(/metrics scraped {result['scrapes_per_round']:g} times per 'on' round)")
    _smoke.print_json(args, result)


if __name__ == "__main__":
    main()
