"""The benches' smoke mode: ``--smoke`` runs a bench with tiny counts.

A smoke run takes a few seconds and proves only that the bench still runs
end to end and prints every figure it should (tests/project/test_bench_smoke.py runs
each bench so, on CI): its figures mean nothing and nothing checks them. It
prints what the bench prints, then the bench's JSON object alone on the last
line, so that both the table and the object are exercised and the object can
be read.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

HELP = (
    "a smoke run: tiny counts, a few seconds, figures that mean nothing; "
    "prints the bench's output, then its JSON object on the last line"
)

#: The exit status of a bench that cannot run here because a system component
#: it needs is missing (its message, on stderr, names it). Automake's "skipped".
UNAVAILABLE = 77


def parse_args(parser: argparse.ArgumentParser, **tiny: Any) -> argparse.Namespace:
    """Adds ``--smoke`` to ``parser`` and parses the command line; with
    ``--smoke``, each option named in ``tiny`` takes the value given there."""
    parser.add_argument("--smoke", action="store_true", help=HELP)
    args = parser.parse_args()
    if args.smoke:
        for name, value in tiny.items():
            if not hasattr(args, name):
                raise AttributeError(f"the bench has no option {name!r}")
            setattr(args, name, value)
    return args


def print_json(args: argparse.Namespace, result: Any) -> None:
    """In a smoke run, the JSON object on the last line (after the table)."""
    if args.smoke:
        print(json.dumps(result), flush=True)
