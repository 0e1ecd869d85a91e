"""No link starves, whatever becomes of its messages (docs/protocol.md §4.1, issue 32).

Every way a message can end on an inbox link (refused before the mailbox,
refused by its handler, accepted, expired) leaves the link's credit where §4.1
says: a link whose sender waits is granted credit again, and no other link can
sit on credit it does not use while it waits, past what §4.1 allows.

The scenario the issue names runs against a real node on 127.0.0.1 with raw
AMQP clients over mutual TLS (tests/support/rawpeer.py), which never answer a drain.
The property test drives a real node (its actor, mailbox, credit keeper and
inbound connections) from raw clients over socket pairs, on trio's mock clock
jumping on its own whenever every task waits: a socket pair delivers what is
written before the write returns, so "every task waits" means both sides
have done all they will, and each look at the links is exact.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

import attrs
import pytest
import trio
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from proton import Link
from trio.testing import MockClock, wait_all_tasks_blocked

from actorctl import Actor, Envelope, Node, handler, open_node
from actorctl.cluster.link._engine import Engine
from actorctl.cluster.link._inbound import InboundHandler
from actorctl.cluster.link._raw import lib
from actorctl.mailbox import encode, sign_ed25519
from tests.apps.actors import SMALL_CAPACITY as CAPACITY
from tests.apps.actors import Small
from tests.support.harness import Logs, Secrets
from tests.support.rawpeer import RawPeer, raw_peer, raw_peer_over

DEADLINE = 0.5


@pytest.fixture
def secrets(tmp_path: Path) -> Secrets:
    return Secrets.make(tmp_path, "server", "a", "b")


def _message(i: int, *, subject: str = "ping", expiry: float | None = None) -> Envelope:
    return Envelope(
        message_id=f"a-{i}",
        to="small",
        subject=subject,
        body=[[f"a{i}"], {}],
        creation_time=time.time(),
        expiry_time=expiry,
    )


def _wire(secrets: Secrets, node_id: str, how: str, i: int) -> bytes:
    """What client A sends: a message the node takes, or one it refuses (``how``)."""
    sign = functools.partial(sign_ed25519, secrets.keys["a"].identity)
    signed = functools.partial(encode, signer=sign, actor="small", node=node_id)
    if how == "unsigned":  # refused before the mailbox: not authenticated
        return encode(_message(i), actor="small", node=node_id)
    if how == "undecodable":  # refused before the mailbox: not an AMQP message
        return b"\x00not an amqp message"
    if how == "unknown handler":  # refused by the actor
        return signed(_message(i, subject="nothing"))
    if how == "expired":  # refused by the actor: its expiry passed before it ran
        return signed(_message(i, expiry=time.time() - 60))
    return signed(_message(i))


#: How the one message of the starved link ends.
ENDINGS = {
    "unsigned": "rejected",
    "undecodable": "rejected",
    "unknown handler": "rejected",
    "expired": "rejected",
    "accepted": "accepted",
}


@pytest.mark.parametrize("how", sorted(ENDINGS))
async def test_a_link_whose_one_credit_is_used_gets_credit_again_however_its_message_ends(
    secrets: Secrets, logs: Logs, how: str
) -> None:
    async with (
        open_node("server", [Small()], credit_deadline=DEADLINE, **secrets.options("server")) as (
            server
        ),
        raw_peer(server.port, secrets.tls["a"], container="a") as a,
    ):
        # Given client A's link L1, alone on the actor: the whole window
        l1 = a.sender("small")
        await a.wait(lambda: l1.credit == CAPACITY)
        # ... whose idle credit is taken back when B attaches (A ignores the drain)
        async with raw_peer(server.port, secrets.tls["b"], container="b") as b:
            l2 = b.sender("small")
            with trio.fail_after(4 * DEADLINE):
                await logs.wait_for("actorctl:credit:reclaimed", 1)
            await b.wait(lambda: l2.credit > 0)
            assert a.links[l1.name].drain_seen
        # ... and, B gone, A attaches a second link L3 (L1, alone again, is
        # drained again, ignores it again, and is left its one idle credit)
        l3 = a.sender("small")
        with trio.fail_after(4 * DEADLINE):
            await logs.wait_for("actorctl:credit:reclaimed", 2)
        await a.wait(lambda: l1.credit == 1 and l3.credit == CAPACITY - 1)
        # When L1 sends its one message
        a.send(l1, b"first", _wire(secrets, server.node_id, how, 1))
        await a.wait(lambda: b"first" in a.outcomes)
        assert a.outcomes[b"first"].state == ENDINGS[how], a.outcomes[b"first"]
        # Then L1 is granted credit again, within the credit deadline, though
        # L3 sits on its credit (before the fix, a message refused before the
        # mailbox left L1 at 0 for good)
        await a.wait(lambda: l1.credit > 0, timeout=2 * DEADLINE)
        # and a message A fixed is taken on it
        a.send(l1, b"fixed", _wire(secrets, server.node_id, "accepted", 2))
        await a.wait(lambda: b"fixed" in a.outcomes)
        assert a.outcomes[b"fixed"].state == "accepted", a.outcomes[b"fixed"]
        stats = server.statistics()["small"]
        assert stats.links == 2
        assert stats.depth == 0


async def test_a_link_that_spends_all_its_credit_on_refused_messages_gets_it_back(
    secrets: Secrets,
) -> None:
    async with (
        open_node("server", [Small()], credit_deadline=DEADLINE, **secrets.options("server")) as (
            server
        ),
        raw_peer(server.port, secrets.tls["a"], container="a") as a,
    ):
        # Given the one link to an actor, holding its whole window
        link = a.sender("small")
        await a.wait(lambda: link.credit == CAPACITY)
        # When it spends all of it on messages the node refuses before the mailbox
        for i in range(CAPACITY):
            a.send(link, b"%d" % i, _wire(secrets, server.node_id, "unsigned", i))
        await a.wait(lambda: len(a.outcomes) == CAPACITY)
        assert {o.state for o in a.outcomes.values()} == {"rejected"}
        # Then its credit comes back (before the fix: 0 for good, no slot ever used)
        await a.wait(lambda: link.credit == CAPACITY, timeout=2 * DEADLINE)


# -- the property: random attaches, detaches, drains, refusals and acceptances -----------

PROPERTY_CAPACITY = 4
PROPERTY_DEADLINE = 1.0
PROPERTY_MAX_SIZE = 512  # bytes: a larger message is refused before the mailbox
SAMPLE = PROPERTY_DEADLINE / 8  # how often the test looks while time passes
#: How long a sender may wait at 0 while another link holds the same credit
#: unused (counted from the later of the two): §4.1 drains a link that used
#: none of its credit between two looks (the node looks twice per deadline: up
#: to one deadline), and takes it back half a deadline later; the test looks
#: every SAMPLE.
BOUND = 1.5 * PROPERTY_DEADLINE + SAMPLE
#: Random sequences tried (derandomized: the same ones each run).
EXAMPLES = 300


class Held(Actor):
    mailbox_capacity = PROPERTY_CAPACITY

    @handler
    async def ok(self) -> None:
        return None

    @handler
    async def hold(self, seconds: float) -> None:
        await trio.sleep(seconds)


#: How a message a sender wants to send ends: accepted at once, accepted after
#: holding its slot a while, refused before the mailbox (undecodable, too
#: large), refused by the actor (no such handler, expired).
PROPERTY_ENDINGS = ("ok", "held", "undecodable", "too large", "unknown handler", "expired")
#: What a step does ("attach", "detach", "want", "answer" a drain, "wait"), to
#: which client or link (or how many deadlines to wait), and what a "want"
#: wants to send.
Step = tuple[str, int | float, tuple[str, ...]]


def _property_wire(ending: str, i: int) -> bytes:
    if ending == "undecodable":
        return b"\x00not an amqp message"
    if ending == "too large":
        return b"\x00" * (2 * PROPERTY_MAX_SIZE)
    subject = {"held": "hold", "unknown handler": "nothing"}.get(ending, "ok")
    body: list[object] = [[PROPERTY_DEADLINE * 0.75], {}] if ending == "held" else [[], {}]
    return encode(
        Envelope(
            message_id=f"m-{i}",
            to="held",
            subject=subject,
            body=body,
            creation_time=time.time(),
            expiry_time=1.0 if ending == "expired" else None,
        )
    )


def _connect(node: Node, nursery: trio.Nursery) -> trio.SocketStream:
    """A connection into ``node``, served as the node serves the ones it
    accepts (``NodeListener._on_incoming``), over a socket pair: bytes written on one
    end are readable on the other before the write returns, so the test knows
    when both sides have done all they will (``wait_all_tasks_blocked``)."""
    ours, theirs = trio.socket.socketpair()
    inbound = InboundHandler(
        node.name,
        node.node_id,
        node.cells,
        node.listener.new_verifier(),
        node.outbox.routes,
        keeper=node.listener.credit,
        limits=node.limits,
    )
    engine = Engine(
        trio.SocketStream(theirs),
        inbound,
        server=True,
        container_id=node.node_id,
        peer="socketpair",
        idle_timeout=node.supervision.idle_timeout,
    )
    nursery.start_soon(engine.run)
    return trio.SocketStream(ours)


@attrs.define
class _Sender:
    """One sender link of a client, and what its sender has to send."""

    peer: RawPeer
    link: Link
    wants: list[str] = attrs.Factory(list)
    waits: float | None = None  # since when its sender has waited at 0
    holds: float | None = None  # since when it has held `held` credit, unused
    held: int = 0
    beside: float | None = None  # since when it has waited while another link held credit


@attrs.define
class _World:
    """The clients of one actor, their links, and the check made at each look."""

    node: Node
    peers: list[RawPeer]
    senders: list[_Sender] = attrs.Factory(list)
    sent: int = 0
    tags: dict[bytes, _Sender] = attrs.Factory(dict)
    longest: float = 0.0  # the longest a sender waited at 0 beside idle credit

    async def step(self, step: Step) -> None:
        what, which, endings = step
        if what == "wait":
            await self.wait(float(which) * PROPERTY_DEADLINE)
            return
        if what == "attach":
            peer = self.peers[int(which) % len(self.peers)]
            self.senders.append(_Sender(peer, peer.sender("held")))
        elif self.senders:
            sender = self.senders[int(which) % len(self.senders)]
            if what == "detach":
                sender.link.close()
                self.senders.remove(sender)
            elif what == "want":
                sender.wants.extend(endings)
            elif lib.pn_link_get_drain(sender.link._impl):  # "answer": the drain
                sender.link.drained()
            _wake(sender.peer)
        await self.look()

    async def wait(self, seconds: float) -> None:
        """Let ``seconds`` pass, looking every SAMPLE."""
        end = trio.current_time() + seconds
        while trio.current_time() < end:
            await trio.sleep(min(SAMPLE, end - trio.current_time()))
            await self.look()

    async def look(self) -> None:
        """Once both sides have done all they will: each sender sends what it
        can, then no sender may have waited at 0 for longer than BOUND while
        another link held credit it did not use."""
        while True:
            await wait_all_tasks_blocked()
            if not self._send():
                break
        now = trio.current_time()
        for sender in self.senders:
            credit = sender.link.credit
            waiting = bool(sender.wants) and credit <= 0
            sender.waits = (sender.waits if sender.waits is not None else now) if waiting else None
            if credit <= 0:
                sender.holds = None
            elif sender.holds is None or credit != sender.held:
                sender.holds, sender.held = now, credit
        for waiter in self.senders:
            if waiter.waits is None:
                waiter.beside = None
                continue
            holders = [o for o in self.senders if o.holds is not None]
            if not holders:
                waiter.beside = None
                continue
            waiter.beside = now if waiter.beside is None else waiter.beside
            self.longest = max(self.longest, now - waiter.beside)
            for holder in holders:
                assert holder.holds is not None
                since = max(waiter.waits, holder.holds)
                assert now - since <= BOUND, self._describe(waiter, holder, since, now)

    def _send(self) -> bool:
        sent = False
        for sender in self.senders:
            while sender.wants and sender.link.credit > 0:
                tag = b"%d" % self.sent
                sender.peer.send(sender.link, tag, _property_wire(sender.wants.pop(0), self.sent))
                self.tags[tag] = sender
                self.sent += 1
                sender.waits = sender.beside = None  # it sent: a new wait, if any
                sent = True
        return sent

    def _describe(self, waiter: _Sender, holder: _Sender, since: float, now: float) -> str:
        links = [f"{s.link.name}: credit {s.link.credit}, wants {s.wants}" for s in self.senders]
        stats = self.node.statistics()["held"]
        return (
            f"at {now:.3f} s, {waiter.link.name} has waited at 0 and {holder.link.name} "
            f"held {holder.held} credit unused since {since:.3f} s: {'; '.join(links)}; "
            f"mailbox depth {stats.depth}, credit {stats.credit} of {stats.capacity}"
        )

    async def finish(self) -> None:
        """In the end every sender has sent all it had, and has every outcome
        (a link may wait its turn: credit goes round links that hold it idle)."""
        wants = sum(len(s.wants) for s in self.senders)
        turns = len(self.senders) + len(self.tags) + wants
        with trio.fail_after(2 * PROPERTY_DEADLINE * turns + 10 * PROPERTY_DEADLINE):
            while any(s.wants for s in self.senders) or self._unanswered():
                await self.wait(SAMPLE)

    def _unanswered(self) -> list[bytes]:
        return [
            tag
            for tag, sender in self.tags.items()
            if sender in self.senders and tag not in sender.peer.outcomes
        ]


def _events(world: _World) -> None:
    """What the example made happen (``--hypothesis-show-statistics``)."""
    drained = any(state.drain_seen for peer in world.peers for state in peer.links.values())
    event("a sender was drained" if drained else "no drain")
    outcomes = {o.state for peer in world.peers for o in peer.outcomes.values()}
    event(f"outcomes: {', '.join(sorted(outcomes)) or 'none'}")
    longest = world.longest / PROPERTY_DEADLINE
    event(f"longest a sender waited while another link held credit: {longest:.1f} deadlines")


def _wake(peer: RawPeer) -> None:
    assert peer.engine is not None
    peer.engine.wake()


async def _drive(clients: list[int], steps: list[Step]) -> None:
    async with (
        open_node(
            "server",
            [Held()],
            host=None,
            insecure=True,
            credit_deadline=PROPERTY_DEADLINE,
            max_message_size=PROPERTY_MAX_SIZE,
        ) as node,
        trio.open_nursery() as nursery,
    ):
        async with (
            raw_peer_over(_connect(node, nursery), container="c0") as c0,
            raw_peer_over(_connect(node, nursery), container="c1") as c1,
        ):
            world = _World(node, [c0, c1])
            for client in clients:
                await world.step(("attach", client, ()))
            for step in steps:
                await world.step(step)
            await world.wait(BOUND + SAMPLE)
            await world.finish()
            _events(world)
        nursery.cancel_scope.cancel()


_LINK = st.integers(0, 7)
_WANT = st.tuples(
    st.just("want"),
    _LINK,
    st.lists(st.sampled_from(PROPERTY_ENDINGS), min_size=1, max_size=6).map(tuple),
)
_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("attach"), st.integers(0, 1), st.just(())),
        st.tuples(st.just("detach"), _LINK, st.just(())),
        _WANT,
        _WANT,  # twice as often as the others: most steps have something sent
        st.tuples(st.just("answer"), _LINK, st.just(())),
        st.tuples(st.just("wait"), st.sampled_from([0.25, 0.5, 1.0, 2.0]), st.just(())),
    ),
    min_size=1,
    max_size=30,
)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(clients=st.lists(st.integers(0, 1), min_size=1, max_size=5), steps=_STEPS)
def test_no_link_waits_at_zero_beside_idle_credit_past_the_deadline(
    clients: list[int], steps: list[Step]
) -> None:
    # Given an actor fed by the links two clients attach and detach at random,
    # whose senders never answer a drain unless a step says so, and whose
    # messages end every way a message can (accepted, held a while, refused
    # before the mailbox, refused by the actor): each step, on autojump time
    trio.run(_drive, clients, steps, clock=MockClock(autojump_threshold=0))
    # Then (checked at each look, in _World.look and _World.finish) no sender
    # waited at 0 past BOUND beside idle credit, and every message was sent
    # and answered
