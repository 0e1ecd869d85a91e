"""Benchmark: actorctl against plain python-qpid-proton, measured in the same run.

    python bench/run.py            # a table of figures and ratios
    python bench/run.py --json     # one JSON object

Each figure is the median of ``--rounds`` interleaved rounds (actorctl, then the
raw reference, then again), because absolute figures drift a lot on a shared
machine: compare the ratios. Two OS processes each, all traffic on 127.0.0.1.

The second table is actorctl's one-way throughput with mutual TLS and signed
messages (sessions, or Ed25519 per message), against the same traffic unsigned
over plain TCP, measured in the same rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _actorctl, _raw

KEYS = {
    "tell_per_s": ("one-way tell, messages/s", "higher"),
    "ask_p50_us": ("sequential ask, p50 µs", "lower"),
    "ask_p99_us": ("sequential ask, p99 µs", "lower"),
    "ask_pipelined_per_s": ("ask, 100 in flight, calls/s", "higher"),
}


# One-way throughput with security against the same traffic unsigned on plain TCP.
SECURITY_MODES = ("plain", "tls", "session", "ed25519")
SECURITY = {
    "session_vs_plain": ("session", "mutual TLS + session HMACs"),
    "ed25519_vs_plain": ("ed25519", "mutual TLS + Ed25519 per message"),
    "tls_vs_plain": ("tls", "mutual TLS alone"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tells", type=int, default=20000)
    parser.add_argument("--asks", type=int, default=2000)
    parser.add_argument("--pipelined", type=int, default=20000)
    args = parser.parse_args()
    counts = (args.tells, args.asks, args.pipelined)
    ours, raw = [], []
    security: dict[str, list[float]] = {mode: [] for mode in SECURITY_MODES}
    for i in range(args.rounds):
        ours.append(_actorctl.measure(*counts))
        raw.append(_raw.measure(*counts))
        for mode in SECURITY_MODES:
            security[mode].append(_actorctl.measure_tell(mode, args.tells))
        if not args.json:
            print(f"round {i + 1}/{args.rounds} done", file=sys.stderr)
    result: dict[str, dict[str, float]] = {}
    for key in KEYS:
        a = statistics.median(r[key] for r in ours)
        b = statistics.median(r[key] for r in raw)
        result[key] = {"actorctl": round(a, 1), "raw": round(b, 1), "ratio": round(a / b, 3)}
    plain = statistics.median(security["plain"])
    for key, (mode, _) in SECURITY.items():
        a = statistics.median(security[mode])
        result[key] = {
            "actorctl": round(a, 1),
            "reference": round(plain, 1),
            "ratio": round(a / plain, 3),
        }
    result["signed_tls_vs_plain"] = result["session_vs_plain"]
    if args.json:
        print(json.dumps(result))
        return
    print(f"{'figure':34} {'actorctl':>12} {'raw proton':>12} {'ratio':>8}")
    for key, (label, better) in KEYS.items():
        row = result[key]
        print(f"{label:34} {row['actorctl']:>12,.1f} {row['raw']:>12,.1f} {row['ratio']:>7.2f}x"
              f"  ({better} is better)")  # fmt: skip
    print(f"\n{'one-way tell, messages/s':34} {'secured':>12} {'plain TCP':>12} {'ratio':>8}")
    for key, (_, label) in SECURITY.items():
        row = result[key]
        print(
            f"{label:34} {row['actorctl']:>12,.1f} {row['reference']:>12,.1f} {row['ratio']:>7.2f}x"
        )


if __name__ == "__main__":
    main()
