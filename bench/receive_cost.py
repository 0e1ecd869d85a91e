"""Benchmark: what reading a session-signed task request and its reply costs.

    python bench/receive_cost.py            # a table: CPU and calls per message
    python bench/receive_cost.py --json     # one JSON object
    python bench/receive_cost.py --smoke    # does it still run? (tests/project/test_bench_smoke.py)

No network, no cluster: the receive side alone, in this process. A worker's
read of a task request (``authenticate``, then ``from_sections``, as
``cluster/link/_inbound.py`` does) and a caller's read of the task's reply
(``ReplyCheck.check``), each signed within a session in the layout actorctl
writes, with the headers a task carries (a ``task_id`` that repeats the
correlation-id, its pool; a reply's state and retries), every message with
its own ids. Each is measured as process CPU per message (``--messages``
distinct messages, read once each) and as cProfile calls per message (on
another ``--messages``: Python functions and built-ins apart). The figures
compare two checkouts run alike on one machine (issue 30); they are not a
throughput.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actorctl import Envelope
from actorctl.cluster.link._reply_auth import ReplyCheck, encode_reply
from actorctl.mailbox import (
    KIND_DOCUMENT,
    IdentityKey,
    Keyring,
    SessionOffer,
    SessionSigner,
    SessionTable,
    Verifier,
    authenticate,
    encode,
    from_sections,
)
from bench import _smoke

NODE = "worker-0123456789ab"
ACTOR = "tasks-default"
REPLY_ADDRESS = "$reply/caller-0123456789ab"


def _requests(count: int, now: float) -> tuple[Callable[[bytes], object], list[bytes]]:
    """A worker's read of a request, and ``count`` task requests for it."""
    caller = IdentityKey.generate("caller")
    offer = SessionOffer.new(caller, now=now, lifetime=3600)
    signer = SessionSigner(offer.session())
    verifier = Verifier(Keyring(IdentityKey.generate("worker"), [caller.public]),
                        SessionTable(), node=NODE)  # fmt: skip
    verifier.sessions.add(offer.session(), now)

    def read(data: bytes) -> object:
        sections, verified = authenticate(verifier, ACTOR, data, NODE)
        return from_sections(sections, verified.key_id, None)

    messages = []
    for n in range(count):
        task_id = str(uuid.uuid4())
        request = Envelope(
            message_id=f"caller-0123456789ab-{n}", to=f"/{ACTOR}", subject="bench.add",
            body=[[1, 2], {}], reply_to=REPLY_ADDRESS, correlation_id=task_id,
            creation_time=now + n * 1e-4, headers={"task_id": task_id, "pool": "default"},
        )  # fmt: skip
        messages.append(encode(request, signer=signer, actor=ACTOR, node=NODE))
    return read, messages


def _replies(count: int, now: float) -> tuple[Callable[[bytes], object], list[bytes]]:
    """A caller's check of a reply, and ``count`` task replies for it."""
    worker = IdentityKey.generate("worker")
    offer = SessionOffer.new(worker, now=now, lifetime=3600)
    signer = SessionSigner(offer.session())
    check = ReplyCheck(Keyring(IdentityKey.generate("caller"), [worker.public]),
                       REPLY_ADDRESS, "worker", time.time)  # fmt: skip
    check.connected(None)
    check.offered(offer)

    def read(data: bytes) -> object:
        reply = check.check(data)
        if reply is None:
            raise SystemExit("bench/receive_cost.py: a reply was refused (see the log)")
        return reply

    messages = []
    for n in range(count):
        task_id = str(uuid.uuid4())
        reply = Envelope(
            message_id=f"worker-0123456789ab-{n}", to=REPLY_ADDRESS, subject="bench.add",
            body=3, kind=KIND_DOCUMENT, correlation_id=task_id, creation_time=now + n * 1e-4,
            headers={"state": "SUCCESS", "task_id": task_id, "retries": 0},
        )  # fmt: skip
        messages.append(encode_reply(reply, signer))
    return read, messages


def _measure(read: Callable[[bytes], object], messages: list[bytes]) -> dict[str, float]:
    """CPU per message (µs) over the first half, calls per message over the
    second (Python functions, and built-ins)."""
    half = len(messages) // 2
    start = time.process_time()
    for data in messages[:half]:
        read(data)
    cpu = (time.process_time() - start) / half * 1e6
    profile = cProfile.Profile()
    profile.enable()
    for data in messages[half:]:
        read(data)
    profile.disable()
    stats: dict[Any, Any] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    counted = len(messages) - half
    python = sum(v[1] for k, v in stats.items() if k[0] != "~") / counted
    builtin = sum(v[1] for k, v in stats.items() if k[0] == "~") / counted
    return {"cpu_us": cpu, "python_calls": python, "builtin_calls": builtin}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--messages", type=int, default=20000, help="of each kind, per half")
    args = _smoke.parse_args(parser, messages=20)
    now = time.time()
    result: dict[str, Any] = {}
    for kind, (read, messages) in (
        ("request", _requests(2 * args.messages, now)),
        ("reply", _replies(2 * args.messages, now)),
    ):
        for _ in range(min(10, args.messages)):  # warm: the reader's caches as a node has them
            read(messages.pop())
        result[kind] = _measure(read, messages)
    if args.json:
        print(json.dumps(result))
    else:
        print("receive side, per message   CPU µs   Python calls   built-in calls")
        for kind, label in (
            ("request", "a task request (worker)"),
            ("reply", "its reply (caller)"),
        ):
            got = result[kind]
            print(f"  {label:25s} {got['cpu_us']:7.2f}   {got['python_calls']:12.2f}"
                  f"   {got['builtin_calls']:14.2f}")  # fmt: skip
    _smoke.print_json(args, result)


if __name__ == "__main__":
    main()
