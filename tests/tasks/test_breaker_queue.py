"""A task breaker and the tasks its worker already holds: a worker holds many
more messages than it runs, and those waiting for a run slot must not reach a
downstream the breaker has meanwhile given up on. With no router in front (no
services node), a task the open breaker refuses is kept, not lost.

In-process nodes, real sockets, signed messages; every call of the downstream
is recorded, and each test counts what was lost (0) and what ran twice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import eliot
import trio

from actorctl import open_node
from actorctl.cluster import hosted_actors, load_cluster
from actorctl.supervision import Breaker
from tests.apps import queued_breaker_app as qapp
from tests.support.harness import free_port

WAIT = 30.0
#: The worker of the running test's cluster.
_WORKERS: list[Any] = []


@asynccontextmanager
async def cluster(tmp_path: Path, *, services: bool) -> AsyncIterator[Breaker]:
    """One worker node (pool ``celery``, one run at a time), with or without a
    services node (the pool's router) in front; yields the worker's breaker."""
    names = ["w1", *(["services"] if services else [])]
    ports = {name: free_port() for name in names}
    path = tmp_path / "cluster.toml"
    text = '[cluster]\nname = "queued"\ndev = true\n'
    for name in names:
        text += (
            f'[[node]]\nname = "{name}"\nlisten = "127.0.0.1:{ports[name]}"\n'
            'actors = "tests.apps.queued_breaker_app:app"\n'
            + ("services = true\n" if name == "services" else 'pools = ["celery"]\n')
        )
    path.write_text(text)
    config = load_cluster(path)
    from actorctl.ops._foreman import ensure_dev_secrets

    ensure_dev_secrets(config)
    hosted = {n.name: hosted_actors(n.actors, node=n, cluster=config) for n in config.nodes}
    async with (
        open_node(
            "w1",
            hosted["w1"],
            port=ports["w1"],
            store=config.store(config.node("w1")),
            security=config.security("w1"),
        ),
        open_node(
            "services",
            hosted["services"],
            port=ports["services"],
            store=config.store(config.node("services")),
            security=config.security("services"),
        )
        if services
        else _nothing(),
        qapp.app.aconnect(path),
    ):
        worker = hosted["w1"]["celery"]
        _WORKERS[:] = [worker]
        yield worker.breakers["downstream"]  # type: ignore[attr-defined]


@asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield


def _watch(breaker: Breaker) -> tuple[trio.Event, trio.Event]:
    """Events set when ``breaker`` opens, and when it closes after that."""
    opened, closed = trio.Event(), trio.Event()

    def change(state: str) -> None:
        if state == "open":
            opened.set()
        elif state == "closed" and opened.is_set():
            closed.set()

    breaker.on_change = change
    return opened, closed


@contextmanager
def _logged(message_type: str, count: int) -> Iterator[trio.Event]:
    """Set once log lines of ``message_type`` named ``count`` message ids."""
    seen: set[str] = set()
    done = trio.Event()

    def watch(message: dict[str, Any]) -> None:
        if message.get("message_type") == message_type:
            seen.add(str(message.get("message_id")))
            if len(seen) >= count:
                done.set()

    eliot.add_destinations(watch)
    try:
        yield done
    finally:
        eliot.remove_destination(watch)


async def _send_all(keys: list[str]) -> list[object]:
    """Send a task per key, all at once, without waiting: their results."""
    return [await qapp.fetch.adelay(key) for key in keys]


async def _states(results: list[object]) -> list[str]:
    states = []
    for result in results:
        await result.aget(timeout=WAIT, propagate=False)  # type: ignore[attr-defined]
        states.append(result.state)  # type: ignore[attr-defined]
    return states


async def test_tasks_waiting_for_a_run_slot_do_not_reach_a_tripped_downstream(
    tmp_path: Path,
) -> None:
    # Given a pool's router and one worker that runs one task at a time, behind
    # a breaker that trips after 3 failures
    async with cluster(tmp_path, services=True) as breaker:
        worker = _WORKERS[0]
        qapp.CALLS.clear()
        qapp.DOWN[0] = False
        qapp.GATE[:] = [trio.Event()]
        opened, closed = _watch(breaker)
        keys = ["first", *(f"k{i}" for i in range(9))]
        with trio.fail_after(WAIT):
            # When nine tasks queue on the worker behind a first one that runs
            results = await _send_all(keys)
            await worker.gate.wait_waiting(9)
            # and the downstream goes down as they wait
            qapp.DOWN[0] = True
            with _logged("actorctl:router:rerouted", len(keys) - 3) as refused:
                qapp.GATE[0].set()
                await opened.wait()  # the third failure trips it
                # (without the check at the run slot, the queued ones would
                # all call the downstream instead of being refused)
                with trio.move_on_after(5):
                    await refused.wait()
            # Then the downstream saw exactly 3 calls, the ones that tripped it
            calls = sum(len(c) for c in qapp.CALLS.values())
            assert calls == 3, f"the downstream got {calls} calls while down, not 3"
            # And when it is back, the other tasks run after the reset
            qapp.DOWN[0] = False
            await closed.wait()
            states = await _states(results)
    qapp.GATE.clear()
    assert states.count("FAILURE") == 3
    assert states.count("SUCCESS") == 7
    lost = [k for k in keys if k not in qapp.CALLS]
    ran_twice = [k for k in keys if len(qapp.CALLS[k]) > 1]
    print(f"lost={len(lost)} ran_twice={len(ran_twice)}")
    assert lost == []
    assert ran_twice == []


async def test_with_no_router_an_open_breaker_keeps_the_task_and_runs_it_after_the_reset(
    tmp_path: Path,
) -> None:
    # Given a cluster with no services node (callers send to the worker
    # itself), and the worker's breaker tripped by 3 failures
    async with cluster(tmp_path, services=False) as breaker:
        qapp.CALLS.clear()
        qapp.DOWN[0] = True
        opened, closed = _watch(breaker)
        with trio.fail_after(WAIT):
            assert await _states(await _send_all(["a0", "a1", "a2"])) == ["FAILURE"] * 3
            await opened.wait()
            # When tasks are sent while it is open (a plain delay(): not durable,
            # not confirmed), then the worker keeps them instead of refusing them
            keys = [f"k{i}" for i in range(5)]
            with _logged("actorctl:task:kept", len(keys)) as all_kept:
                results = await _send_all(keys)
                await all_kept.wait()
            assert not any(key in qapp.CALLS for key in keys)
            # And when the downstream is back, they run after the reset
            qapp.DOWN[0] = False
            states = await _states(results)
            await closed.wait()
    assert states == ["SUCCESS"] * len(keys)
    lost = [k for k in keys if k not in qapp.CALLS]
    ran_twice = [k for k in keys if len(qapp.CALLS[k]) > 1]
    print(f"lost={len(lost)} ran_twice={len(ran_twice)}")
    assert lost == []
    assert ran_twice == []


async def test_programming_errors_poison_and_bad_arguments_do_not_trip_a_breaker(
    tmp_path: Path,
) -> None:
    # Given a task behind a breaker that trips after 3 failures
    async with cluster(tmp_path, services=False) as breaker:
        qapp.CALLS.clear()
        qapp.DOWN[0] = False
        with trio.fail_after(WAIT):
            # When its runs fail 4 times each with a programming error, with
            # poison and with arguments that do not fit
            sent = [await qapp.misuse.adelay(kind) for kind in ("typo", "poison") * 4]
            sent += [await qapp.fetch.adelay() for _ in range(4)]  # a missing argument
            states = await _states(sent)
            # Then all of them failed, and the breaker is still closed
            assert states == ["FAILURE"] * 12
            assert breaker.closed
            assert breaker.statistics()["trips"] == 0
            # While 3 failures of the downstream (which a retry could cure) trip it
            qapp.DOWN[0] = True
            opened, _ = _watch(breaker)
            assert await _states(await _send_all(["d0", "d1", "d2"])) == ["FAILURE"] * 3
            await opened.wait()
    assert len(qapp.CALLS["misuse-typo"]) == len(qapp.CALLS["misuse-poison"]) == 4
