"""No plain tell is lost when a supervisor gives up (docs/guarantees.md, the
``tell`` row; docs/supervision.md): what the actor's mailbox held goes back to
its sender's node, which sends it again, within its resend window, until the
actor is started again. A tell to an actor that stays away ends in an error
line naming it, not silence. Two real nodes over mutual TLS, signed messages;
every execution is recorded: 0 lost, and how many ran twice is reported.
"""

from __future__ import annotations

import trio

from actorctl import Actor, ActorSpec, Restart, SupervisorSpec, handler
from tests.support.harness import Logs, Secrets, node_pair
from tests.support.runs import Runs as CountedRuns

TELLS = 300
CRASH_AT = 150


class Runs(CountedRuns):
    """Every execution of every message; the crashes still to make."""

    def __init__(self, crashes: int) -> None:
        super().__init__(TELLS)
        self.crashes = crashes

    def crash_now(self, n: int) -> bool:
        if n >= CRASH_AT and self.crashes:
            self.crashes -= 1
            return True
        return False


class Victim(Actor):
    """Records each message; from #150 on, crashes (through a task of its own)
    as many times as ``runs`` says, each time on the message in hand."""

    def __init__(self, runs: Runs) -> None:
        self.runs = runs

    @handler
    async def work(self, n: int) -> None:
        self.runs.record(n)
        await trio.lowlevel.checkpoint()  # long enough for messages to queue
        if self.runs.crash_now(n):
            self.start_soon(self._broken_task)
            await trio.sleep_forever()  # the crash cancels this turn

    async def _broken_task(self) -> None:
        raise RuntimeError("a task of the victim failed")


def _tree(runs: Runs, inner_restart: Restart) -> SupervisorSpec:
    """``outer`` → ``inner`` → ``victim``: ``inner`` allows one restart, so the
    victim's second crash makes it give up; ``outer`` then starts ``inner`` (and
    the victim) again, unless ``inner`` is temporary."""
    victim = ActorSpec(Victim, kwargs={"runs": runs}, name="victim")
    inner = SupervisorSpec(
        "inner", [victim], max_restarts=1, within=30.0, backoff=0.01, restart=inner_restart
    )
    return SupervisorSpec("outer", [inner], backoff=0.2)


async def test_no_plain_tell_is_lost_when_its_supervisor_gives_up(
    secrets: Secrets, logs: Logs
) -> None:
    # Given an actor on a node under a supervisor that allows one restart, and
    # 300 plain tells from another node
    runs = Runs(crashes=2)
    async with node_pair([_tree(runs, Restart.PERMANENT)], secrets=secrets) as (server, client):
        ref = client.ref(server.address_of("victim"))
        with trio.move_on_after(60):
            # When it crashes twice from #150 on: its supervisor gives up (what
            # its mailbox held is released), and the supervisor's parent
            # starts it again 0.2 s later
            for n in range(TELLS):
                await ref.tell("work", n)
            await runs.all_ran.wait()
        lost = runs.lost()
        gave_up = logs.of_type("actorctl:supervisor:gave-up")
        released = logs.of_type("actorctl:actor:released")
        given_back = logs.of_type("actorctl:send:given-back")
        undelivered = logs.of_type("actorctl:send:undelivered")
    # Then every tell ran at least once; those that ran twice are reported
    held = sum(len(line["released"]) for line in released)
    report = (
        f"lost {len(lost)}, ran twice {runs.twice()}, released by the mailbox {held}, "
        f"given back to the sender {len(given_back)}, undelivered {len(undelivered)}"
    )
    print(report)
    assert runs.crashes == 0, report
    assert [line["supervisor"] for line in gave_up] == ["inner"], report
    assert given_back, f"the supervisor gave nothing back: the test did not test: {report}"
    assert undelivered == [], report
    assert lost == [], f"{lost[:3]}...{lost[-3:]}: {report}"


async def test_a_tell_to_an_actor_gone_for_good_ends_in_an_error_naming_it(
    secrets: Secrets, logs: Logs
) -> None:
    # Given an actor whose supervisor gave up, and is not started again (it is
    # a temporary child of its own parent), and a sender that sends a given-back
    # tell again for 1 s
    runs = Runs(crashes=2)
    async with node_pair(
        [_tree(runs, Restart.TEMPORARY)],
        secrets=secrets,
        client_options={"resend_window": 1.0},
    ) as (server, client):
        ref = client.ref(server.address_of("victim"))
        with trio.fail_after(30):
            for n in range(CRASH_AT, CRASH_AT + 3):
                await ref.tell("work", n)
            await logs.wait_for("actorctl:supervisor:gave-up")
            # When a plain tell is sent to it
            await ref.tell("work", 999)
            # Then, once the window has passed, the sender's node gives up on it
            # with an error that names the actor, the message and why
            await logs.wait_for("actorctl:send:undelivered", 1)
        undelivered = logs.of_type("actorctl:send:undelivered")
    last = undelivered[-1]
    assert last["actor"].endswith("/victim"), last
    assert last["condition"] == "actorctl:actor-stopping", last
    assert "actor 'victim' is stopped" in last["description"], last
    assert "gave up" in last["description"], last
    assert last["tries"] > 1, last
    assert 999 not in runs.counts
