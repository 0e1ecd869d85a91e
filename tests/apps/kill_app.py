"""The task app of the fault tests (tests/tasks/test_kill.py): tasks that count.

Every task appends one line (the label the test gave it) to a file of its
process in $ACTORCTL_KILL_RECORDS, then wakes a test that waits (a datagram to
the directory's socket, if one listens). A line is one ``write`` to a file
opened with O_APPEND: whole, in whatever order processes write them. A run
that is cut short by a kill before it wrote its line did not happen; one cut
short after it did is counted, and runs again later (a duplicate).

While a test holds an exclusive lock (flock) on the file ``hold`` there, every
task waits for it before it runs: the test holds the work back to have all of
it in flight when it kills a process, then lets it go. While it holds
``starts-NODE``, that node waits before it makes its actors when it starts:
the test keeps a node it killed down (the foreman restarts it at once).

Run as a script, it is a caller the tests kill: ``python -m tests.apps.kill_app
CLUSTER many COUNT SENDERS`` sends COUNT recording tasks (labels ``c0``...)
from SENDERS trio tasks at once and prints ``sent LABEL`` for each whose send
returned, ``progress N`` after each thousand and ``sent all`` at the end;
``python -m tests.apps.kill_app CLUSTER one LABEL`` sends one with plain code's
``delay`` and prints ``sent ID``. Either then waits for its stdin to close.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import trio

from actorctl import Actor, App
from actorctl.cluster import ClusterConfig, NodeConfig

#: The directory where each run of a task is recorded (set by the test's cluster).
RECORDS = "ACTORCTL_KILL_RECORDS"
#: The datagram socket in RECORDS that a waiting test binds, to be woken by each record.
WAKE = "wake.sock"
#: The file in RECORDS a test locks (exclusive) to hold the tasks back.
HOLD = "hold"


def starts(node: str) -> str:
    """The file in RECORDS a test locks (exclusive) to keep ``node`` from starting."""
    return f"starts-{node}"


class _App(App):
    """The app, whose nodes wait to start while a test holds their ``starts``."""

    def actors_for(self, cluster: ClusterConfig | None, node: NodeConfig) -> Mapping[str, Actor]:
        directory = os.environ.get(RECORDS)
        if directory:
            wait_while_held(directory, starts(node.name))  # not listening yet: it is down
        return super().actors_for(cluster, node)


app = _App("k", default_pool="work")
app.pool("work", concurrency=4)
# Small enough that a burst of tasks fills the workers' mailboxes and the router.
app.pool("tight", concurrency=2, mailbox_capacity=20)

_files: dict[str, int] = {}


def _record(label: str) -> str:
    """Wait while the test holds the work back, then append ``label`` to this
    process's record file and wake the test."""
    directory = os.environ.get(RECORDS)
    if not directory:
        return label
    wait_while_held(directory, HOLD)
    fd = _files.get(directory)
    if fd is None:
        path = Path(directory) / f"{os.getpid()}.log"
        fd = _files[directory] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, f"{label}\n".encode())
    wake_test(directory)
    return label


def wake_test(directory: str) -> None:
    """Wake the test that waits on the socket WAKE in ``directory`` (if any)."""
    # Non-blocking: a test that is not reading (its queue full, or none bound)
    # must never hold up a worker; a full queue already holds a wake-up for it.
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as wake, contextlib.suppress(OSError):
        wake.setblocking(False)
        wake.sendto(b"!", str(Path(directory) / WAKE))


def wait_while_held(directory: str, name: str) -> None:
    """Block while the test holds the file ``name`` (a task waits in its worker
    thread, a node before it starts)."""
    try:
        fd = os.open(Path(directory) / name, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # granted once the test's exclusive lock is gone
    finally:
        os.close(fd)


@app.task
def record(label: str) -> str:
    return _record(label)


@app.task(pool="tight")
def tight_record(label: str) -> str:
    return _record(label)


@app.task(pool="tight")
def tight_step(previous: Any, label: str) -> str:
    """A chain step or a callback: gets the previous result, records its own label."""
    return _record(label)


@app.task
def gather(values: list[str], label: str) -> list[str]:
    """A chord's body: gets the header's results, records its own label."""
    _record(label)
    return values


# -- the callers the tests kill --------------------------------------------------------


async def _send_many(cluster: str, count: int, senders: int) -> None:
    sent = 0

    async def sender(first: int) -> None:
        nonlocal sent
        for index in range(first, count, senders):
            label = f"c{index}"
            await record.aapply_async((label,))
            print(f"sent {label}", flush=True)
            sent += 1
            if sent % 1000 == 0:
                print(f"progress {sent}", flush=True)

    async with app.aconnect(cluster):
        async with trio.open_nursery() as nursery:
            for first in range(senders):
                nursery.start_soon(sender, first)
        print("sent all", flush=True)
        await trio.to_thread.run_sync(sys.stdin.read)


def _send_one(cluster: str, label: str) -> None:
    with app.connect(cluster):
        result = record.delay(label)
        print(f"sent {result.id}", flush=True)
        sys.stdin.read()


def main(argv: list[str]) -> None:
    cluster, what, *rest = argv
    if what == "many":
        trio.run(_send_many, cluster, int(rest[0]), int(rest[1]))
    else:
        _send_one(cluster, rest[0])


if __name__ == "__main__":
    main(sys.argv[1:])
