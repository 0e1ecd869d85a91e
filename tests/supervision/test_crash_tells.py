"""No plain tell is lost to a crash or a restart (docs/guarantees.md,
docs/supervision.md): 300 tells to an actor that crashes at #150, by each path
that ends an incarnation, on two real nodes over mutual TLS with signed
messages. Every execution is recorded: 0 lost; how many ran twice is reported
(at-least-once allows it).
"""

from __future__ import annotations

import pytest
import trio

from actorctl import Actor, ActorSpec, Envelope, Outcome, Strategy, SupervisorSpec, handler
from tests.support.harness import Logs, Secrets, node_pair
from tests.support.runs import Runs as CountedRuns

TELLS = 300
CRASH_AT = 150


class Runs(CountedRuns):
    """Every execution of every message, an event once each ran, and the one crash."""

    def __init__(self) -> None:
        super().__init__(TELLS)
        self.crashed = False

    def crash_now(self, n: int) -> bool:
        """Whether message ``n`` is the one that crashes the actor (once)."""
        if n == CRASH_AT and not self.crashed:
            self.crashed = True
            return True
        return False


class Victim(Actor):
    """Records each message, and crashes at #150 the way ``how`` says."""

    def __init__(self, runs: Runs, how: str) -> None:
        self.runs = runs
        self.how = how

    @handler
    async def work(self, n: int) -> None:
        self.runs.record(n)
        await trio.lowlevel.checkpoint()  # long enough for messages to queue
        if not self.runs.crash_now(n):
            return
        if self.how == "task":
            self.start_soon(self._broken_task)
            await trio.sleep_forever()  # the crash cancels this turn
        elif self.how == "sibling":
            sibling = str(self.address).rsplit("/", 1)[0] + "/trigger"
            await self.ref(sibling).tell("explode")
            await trio.sleep_forever()  # its supervisor stops this one (rest_for_one)

    async def _broken_task(self) -> None:
        raise RuntimeError("a task of the victim failed")

    async def handle_unmatched(self, envelope: Envelope) -> None:
        # "crash": message #150 comes as "crash", which fails outside any handler
        [n], _ = envelope.call()
        self.runs.record(n)
        if self.runs.crash_now(n):
            raise RuntimeError("the victim crashed in its own turn")


class Trigger(Actor):
    """Crashes (outside any handler) on any message it has no handler for."""

    def unhandled(self, envelope: Envelope) -> Outcome | None:
        raise RuntimeError("the trigger exploded")


def _tree(runs: Runs, path: str) -> SupervisorSpec:
    if path == "sibling":
        return SupervisorSpec(
            "tree",
            [
                ActorSpec(Trigger, name="trigger"),
                ActorSpec(Victim, kwargs={"runs": runs, "how": path}, name="victim"),
            ],
            strategy=Strategy.REST_FOR_ONE,
            backoff=0.01,
        )
    victim = ActorSpec(Victim, kwargs={"runs": runs, "how": path}, name="victim")
    return SupervisorSpec("tree", [victim], backoff=0.01)


@pytest.mark.parametrize(
    "path",
    [
        "task",
        "turn",
        "sibling",
    ],
)
async def test_no_plain_tell_is_lost_when_its_actor_crashes(
    path: str, secrets: Secrets, logs: Logs
) -> None:
    # Given an actor on a node, and 300 plain tells from another node
    runs = Runs()
    async with node_pair([_tree(runs, path)], secrets=secrets) as (server, client):
        ref = client.ref(server.address_of("victim"))
        with trio.move_on_after(20):
            # When it crashes at #150 (by the path under test) while the rest queue
            for n in range(TELLS):
                subject = "crash" if path == "turn" and n == CRASH_AT else "work"
                await ref.tell(subject, n)
            await runs.all_ran.wait()
        lost = runs.lost()
        crashed = logs.of_type("actorctl:actor:crashed")
        restarts = logs.of_type("actorctl:supervisor:restart")
    # Then every tell ran at least once; those that ran twice are reported
    report = f"{path}: lost {len(lost)}, ran twice {runs.twice()}, crash log {crashed}"
    print(report)
    assert runs.crashed
    assert restarts, f"nothing was restarted: {report}"
    assert lost == [], f"{lost[:3]}...{lost[-3:]}: {report}"
