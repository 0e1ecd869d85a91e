"""bench/hosts.py's caller, run on host a:
``python bench/_hosts_caller.py MODE FILE ETCD N WINDOW``.

Connects to the cluster of FILE, warms up, then times N ``add`` tasks with
WINDOW in flight (bench/_celery.py's ``measure_pipelined``: each send
returns once the task is confirmed, every result is checked), and prints one
JSON object: ``tasks_per_s`` and ``etcd_requests``, the requests etcd's
members (ETCD: their URLs, comma-separated) served during the timed phase by
gRPC method (their ``grpc_server_started_total`` counters, read before and
after). MODE says how each task is sent (issue 34 weighs these):

``router``
    ``add.delay``: to the pool's router on the services node, which confirms
    it once its store holds it (and, with a second services node, once that
    node's copy does too): what every other mode is compared with.
``end_to_end``
    the sender keeps each task until a worker settles it: sent durable,
    straight to the pool's workers (as etcd's directory lists them, in
    turn), through this caller's own backlog in its own store (a SQLite
    file, ``data/cli/store.sqlite`` beside FILE): the send returns once that
    store committed the row, and the row goes once the worker settled the
    task after running it. No router, no services node on the path.
``end_to_end_router``
    as ``end_to_end``, but each task goes to the router ``forward`` on the
    services node (tests/support/hosts_cluster.py's FORWARD), which forwards
    it to a worker (the least loaded) without taking it over: it settles it
    once the worker did, so the caller's backlog keeps it until then.
``etcd``
    as ``router``, each task first written to etcd (one put of the task's
    size, awaited before the task is sent: what a confirmation that waits
    for etcd pays). Then, apart, N puts of that size with WINDOW in flight
    and N deletes of them (a held task's row written, then settled):
    ``etcd_puts_per_s`` and ``etcd_deletes_per_s``, and ``value_bytes``.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.apps.hosts_app import add, app

from actorctl.actors import Address
from actorctl.cluster import load_cluster
from actorctl.etcd import EtcdClient
from actorctl.etcd._etcd_directory import open_directory
from actorctl.mailbox import KIND_COMMAND, Envelope, encode
from actorctl.store._store import Store
from actorctl.tasks import cluster_app
from actorctl.tasks.client._client import Directory, TaskClient, send_task
from actorctl.tasks.protocol._protocol import H_POOL, H_TASK_ID, new_task_id
from actorctl.tasks.worker._control import new_result
from bench._celery import measure_pipelined

_STARTED = re.compile(r'^grpc_server_started_total\{grpc_method="(\w+)"[^}]*\} (\S+)$', re.M)
POOL = "celery"  # add's
FORWARD = "forward"  # the router that forwards without taking over (end_to_end_router)
ETCD_PREFIX = "/bench/hosts/tasks/"  # where the etcd mode writes (etcd is the bench's own)


def etcd_requests(urls: Sequence[str]) -> Counter[str]:
    """Requests etcd's members have started, by gRPC method, since they started."""
    found: Counter[str] = Counter()
    for url in urls:
        with urllib.request.urlopen(f"{url}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        for method, value in _STARTED.findall(text):
            found[method] += int(float(value))
    return found


class EndToEnd:
    """``add`` sent end to end (modes ``end_to_end``, ``end_to_end_router``):
    ``delay`` sends it durable to the next of ``workers`` (the pool's, or the
    router ``forward``) and returns once this caller's store holds it; the
    backlog keeps it until the receiver settles it, once a worker ran it."""

    def __init__(self, client: TaskClient, workers: Sequence[Address]) -> None:
        # One client per worker, sharing the caller's node and results: each
        # resolves the pool to its one worker, as a pool with no router does.
        self._clients = itertools.cycle(
            [
                TaskClient(
                    client.outbox,
                    Directory({POOL: str(worker)}),
                    results=client.results,
                    token=client.token,
                )
                for worker in workers
            ]
        )

    def delay(self, x: int, y: int) -> Any:
        client = next(self._clients)
        task_id = new_task_id()
        result = new_result(client, task_id, add.name, tracked=True)
        target = client.directory.resolve(POOL)
        send = functools.partial(
            send_task,
            client,
            task=add.name,
            pool=POOL,
            args=[x, y],
            kwargs={},
            task_id=task_id,
            reply_to=client.outbox.reply_address(target),
            durable=True,
        )
        client.wait_in_client_thread(send)
        return result


class EtcdFirst:
    """``add`` through the pool's router, each first put in etcd (mode
    ``etcd``): ``delay`` returns once etcd and then the router confirmed."""

    def __init__(self, client: TaskClient, etcd: EtcdClient, value: bytes) -> None:
        self._client = client
        self._etcd = etcd
        self._value = value
        self._keys = (f"{ETCD_PREFIX}{i}" for i in itertools.count())

    def delay(self, x: int, y: int) -> Any:
        self._client.wait_in_client_thread(self._etcd.put, next(self._keys), self._value)
        return add.delay(x, y)


async def _pool_workers(etcd: EtcdClient, cluster: str) -> tuple[Address, ...]:
    """The pool's workers, as etcd's directory lists them (what its router follows)."""
    async with open_directory(etcd, cluster) as directory:
        return directory.pool_workers(POOL)


async def _task_row(client: TaskClient) -> bytes:
    """The bytes a router's backlog keeps for one ``add`` task (its target,
    then the message): the size a task held in etcd would be written at."""
    target = client.directory.resolve(POOL)
    task_id = new_task_id()
    envelope = Envelope(
        message_id=client.outbox.new_message_id(),
        to=str(target),
        subject=add.name,
        body=[[1, 2], {}],
        kind=KIND_COMMAND,
        reply_to=client.outbox.reply_address(target),
        correlation_id=task_id,
        creation_time=client.outbox.now(),
        headers={H_TASK_ID: task_id, H_POOL: POOL},
    )
    return str(target).encode() + b"\n" + bytes(encode(envelope))


async def _writes(count: int, window: int, write: Callable[[int], Awaitable[object]]) -> float:
    """Writes/s: ``write(i)`` for each i of ``count``, ``window`` at a time."""
    limiter = trio.CapacityLimiter(window)

    async def one(i: int) -> None:
        async with limiter:
            await write(i)

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for i in range(count):
            nursery.start_soon(one, i)
    return count / (time.perf_counter() - started)


def _etcd_alone(
    client: TaskClient, etcd: EtcdClient, value: bytes, count: int, window: int
) -> dict[str, float]:
    """Puts/s and deletes/s of ``count`` keys of ``value``, ``window`` in flight."""

    async def put(i: int) -> object:
        return await etcd.put(f"{ETCD_PREFIX}alone/{i}", value)

    async def delete(i: int) -> object:
        return await etcd.delete(f"{ETCD_PREFIX}alone/{i}")

    puts = client.wait_in_client_thread(_writes, count, window, put)
    deletes = client.wait_in_client_thread(_writes, count, window, delete)
    return {"etcd_puts_per_s": round(puts, 1), "etcd_deletes_per_s": round(deletes, 1)}


def main(mode: str, path: str, etcd_urls: str, count: int, window: int) -> None:
    urls = etcd_urls.split(",")
    config = load_cluster(path, cluster_app())
    assert config.etcd is not None, f"{path} has no [etcd]"
    options: dict[str, Any] = {}
    if mode.startswith("end_to_end"):  # the sender's backlog keeps each task: on disk
        (Path(path).parent / "data" / "cli").mkdir(parents=True, exist_ok=True)
        options["store"] = Store(Path(path).parent / "data" / "cli" / "store.sqlite", name="cli")
    extra: dict[str, Any] = {}
    value = b""
    with app.connect(path, **options) as client:
        etcd = config.etcd.client()
        sender: Any = add
        if mode == "end_to_end":
            workers = client.wait_in_client_thread(_pool_workers, etcd, config.name)
            assert workers, "etcd's directory lists no worker of the pool"
            sender = EndToEnd(client, workers)
            extra["workers"] = len(workers)
        elif mode == "end_to_end_router":
            services = config.url(config.node("services"))
            sender = EndToEnd(client, [Address.parse(f"{services}/{FORWARD}")])
        elif mode == "etcd":
            value = client.wait_in_client_thread(_task_row, client)
            sender = EtcdFirst(client, etcd, value)
            extra["value_bytes"] = len(value)
        measure_pipelined(sender, min(count, 500), window)  # warm-up: connections, code paths
        before = etcd_requests(urls)
        per_s = measure_pipelined(sender, count, window)
        after = etcd_requests(urls)
        if mode == "etcd":
            extra.update(_etcd_alone(client, etcd, value, count, window))
    during = {m: after[m] - before[m] for m in after if after[m] != before[m]}
    result = {"tasks_per_s": round(per_s, 1), "etcd_requests": during, **extra}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
