"""Replies are authenticated and bound to the ask (docs/protocol.md §8.1).

Three real nodes on 127.0.0.1, with mutual TLS and signed messages: ``a`` asks
the ``gate`` actor on ``c``, which holds its answer until the test opens the
gate; ``b`` is another trusted member of the cluster, which ``a`` is connected to
as well (so ``b`` holds a route to ``a``'s reply address). Whatever anyone but
``c`` sends back to ``a`` with ``a``'s correlation id, over ``b``'s connection or
injected raw on ``c``'s, is rejected and logged, never handed to the waiting
ask; the ask then gets ``c``'s real reply. Who may take a reply address is
tests/cluster/link/test_reply_ownership.py's concern.
"""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import attrs
import eliot
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actorctl import Actor, Envelope, Node, handler, open_node
from actorctl.cluster.link._reply_auth import ReplySigning
from actorctl.mailbox import (
    KIND_DOCUMENT,
    IdentityKey,
    SessionSigner,
    encode,
    sign_ed25519,
)
from actorctl.mailbox._signing import HMAC_SHA256, SIG, SIG_ALG, SIG_KEY, Session
from tests.support.harness import Logs, Secrets

TIMEOUT = 10


class Gate(Actor):
    """Answers ``answer`` only once the test opens the gate."""

    def __init__(self) -> None:
        self.asked = trio.Event()
        self.open = trio.Event()

    @handler
    async def answer(self, text: str) -> str:
        self.asked.set()
        await self.open.wait()
        return f"{text} from c"


class Echo(Actor):
    @handler
    async def echo(self, value: object) -> object:
        return value


class Unhanded:
    """What node ``a`` did with the replies it did not hand to a caller (an eliot
    destination): rejected, late or undecodable. Wakes who waits on each one."""

    TYPES = frozenset(
        {"actorctl:reply:rejected", "actorctl:reply:late", "actorctl:reply:undecodable"}
    )

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self._changed = trio.Event()

    def __call__(self, message: dict[str, Any]) -> None:
        if message.get("message_type") in self.TYPES:
            self.lines.append(message)
            self.poke()

    def poke(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, count: int, *, unless: Callable[[], bool]) -> None:
        """Until ``count`` lines are in, or ``unless()`` (the ask got a reply)."""
        with trio.fail_after(TIMEOUT):
            while len(self.lines) < count and not unless():
                await self._changed.wait()

    def reasons(self) -> list[str]:
        return [str(line.get("reason", line["message_type"])) for line in self.lines]


@pytest.fixture
def unhanded() -> Iterator[Unhanded]:
    watch = Unhanded()
    eliot.add_destinations(watch)
    try:
        yield watch
    finally:
        eliot.remove_destination(watch)


@attrs.define
class Three:
    a: Node
    b: Node
    c: Node
    gate: Gate
    secrets: Secrets

    @property
    def reply_address(self) -> str:
        """``a``'s reply address, which ``b`` and ``c`` each hold a route to."""
        return self.a.outbox.reply_address(self.c.address_of("echo"))

    def route(self, node: Node) -> tuple[Any, Any, ReplySigning | None]:
        """``node``'s reply route to ``a``: (engine, link, how it signs)."""
        return node.outbox.routes._routes[self.reply_address]

    def inject(self, node: Node, data: bytes) -> None:
        """Put raw bytes on ``node``'s reply link to ``a``, as a reply (pre-settled)."""
        engine, link, _ = self.route(node)
        engine.send_settled(link._impl, os.urandom(8).hex().encode(), data)

    def c_session(self) -> SessionSigner:
        """How ``c`` signs its replies to ``a``: within the session ``a`` opened."""
        signing = self.route(self.c)[2]
        assert signing is not None
        signer = signing.signer()
        assert isinstance(signer, SessionSigner), "a opened no session with c"
        return signer

    def document(self, correlation_id: str, **changes: Any) -> Envelope:
        """A reply document to ``a``, answering ``gate`` as ``c`` would."""
        envelope = Envelope(
            message_id=f"forged-{os.urandom(4).hex()}",
            to=self.reply_address,
            subject="answer",
            body="FORGED",
            kind=KIND_DOCUMENT,
            correlation_id=correlation_id,
            creation_time=self.b.now(),
            headers={"status": "ok", "replier": "gate"},
        )
        return attrs.evolve(envelope, **changes)


@asynccontextmanager
async def three_nodes(tmp_path: Path, **a_options: Any) -> AsyncIterator[Three]:
    secrets = Secrets.make(tmp_path, "a", "b", "c")
    gate = Gate()
    async with (
        open_node("c", [gate, Echo()], **secrets.options("c")) as c,
        open_node("b", [Echo()], **secrets.options("b")) as b,
        open_node("a", host=None, **{**secrets.options("a"), **a_options}) as a,
    ):
        with trio.fail_after(TIMEOUT):
            # a connects to both: each now holds a reply link to a's address.
            assert await a.ref(b.address_of("echo")).ask("echo", "b") == "b"
            assert await a.ref(c.address_of("echo")).ask("echo", "c") == "c"
        try:
            yield Three(a, b, c, gate, secrets)
        finally:
            gate.open.set()


@dataclass
class PendingAsk:
    """``a``'s ask to ``c``'s gate, run in a task: its correlation id is known."""

    three: Three
    correlation_id: str = ""
    reply: Envelope | None = None
    done: bool = False

    async def run(self, watch: Unhanded) -> None:
        a = self.three.a
        address = self.three.c.address_of("gate")
        now = a.now()
        self.correlation_id = message_id = a.new_message_id()
        envelope = Envelope(
            message_id=message_id,
            to=str(address),
            subject="answer",
            body=[["real"], {}],
            reply_to=a.outbox.reply_address(address),
            correlation_id=message_id,
            creation_time=now,
            expiry_time=now + 30,
        )
        self.reply = await a.outbox.request(address, envelope, 30)
        self.done = True
        watch.poke()

    def is_done(self) -> bool:
        return self.done


@asynccontextmanager
async def pending_ask(three: Three, watch: Unhanded) -> AsyncIterator[PendingAsk]:
    """An ask from ``a`` that ``c`` has received and holds; on leaving the block
    the gate opens and the ask must end with ``c``'s real reply."""
    ask = PendingAsk(three)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask.run, watch)
        with trio.fail_after(TIMEOUT):
            await three.gate.asked.wait()
        yield ask
        assert not ask.done, f"the ask took a reply before c answered: {ask.reply}"
        three.gate.open.set()
    assert ask.reply is not None
    assert ask.reply.body == "real from c"


# --- A trusted node forges a reply ------------------------------------------------------


async def test_a_trusted_node_forging_a_reply_to_anothers_ask_is_rejected(
    tmp_path: Path, unhanded: Unhanded
) -> None:
    async with three_nodes(tmp_path) as three, pending_ask(three, unhanded) as ask:
        # When b answers a's ask to c on its own route to a: signed within the
        # session a opened with b (a valid MAC) ...
        forged = three.document(ask.correlation_id, body="FORGED by node b")
        assert three.b.outbox.reply(forged)
        # ... and signed ed25519 with b's own (trusted) key
        b_key = three.secrets.keys["b"].identity
        forged = three.document(ask.correlation_id, body="FORGED by node b, ed25519")
        three.inject(
            three.b,
            encode(forged, signer=functools.partial(sign_ed25519, b_key), actor=forged.to),
        )
        await unhanded.wait_for(2, unless=ask.is_done)
        # Then neither reaches the ask (checked on leaving the block, with c's real reply)
    assert unhanded.reasons() == ["wrong peer", "wrong peer"]
    for line in unhanded.lines:
        assert line["correlation_id"] == ask.correlation_id
        assert line["peer"] == f"127.0.0.1:{three.b.port}"
        assert line["expected"] == f"127.0.0.1:{three.c.port}"


async def test_replies_that_are_unsigned_or_badly_signed_on_the_right_connection_are_rejected(
    tmp_path: Path, unhanded: Unhanded
) -> None:
    async with three_nodes(tmp_path) as three, pending_ask(three, unhanded) as ask:
        cid, to = ask.correlation_id, three.reply_address
        real_session = three.c_session().session
        wrong_key = Session(real_session.id, os.urandom(32), "x", real_session.expires)
        other_session = Session(os.urandom(16).hex(), os.urandom(32), "x", real_session.expires)
        b_key = three.secrets.keys["b"].identity
        stranger = IdentityKey.generate("c")  # named like c, but nobody trusts it
        forged = three.document(cid)
        # When, on c's own connection to a, replies arrive that c did not sign
        cases: list[tuple[str, bytes]] = [
            ("unsigned", encode(forged)),
            ("bad signature", encode(forged, signer=SessionSigner(wrong_key), actor=to)),
            ("unknown key", encode(forged, signer=SessionSigner(other_session), actor=to)),
            ("wrong peer", encode(forged, signer=_ed25519(b_key), actor=to)),
            ("unknown key", encode(forged, signer=_ed25519(stranger), actor=to)),
            # c's real session, but signed for another reply address (moved)
            ("bad signature", encode(forged, signer=three.c_session(), actor="$reply/other")),
            # c's real session, another actor of c answering with the same id
            (
                "wrong peer",
                encode(
                    attrs.evolve(forged, headers={"status": "ok", "replier": "echo"}),
                    signer=three.c_session(),
                    actor=to,
                ),
            ),
        ]
        for _, data in cases:
            three.inject(three.c, data)
        await unhanded.wait_for(len(cases), unless=ask.is_done)
    # Then each is rejected for its reason, and the ask got c's real reply
    assert unhanded.reasons() == [reason for reason, _ in cases]
    assert all(line["correlation_id"] == cid for line in unhanded.lines)


def _ed25519(key: IdentityKey) -> Callable[[bytes], Mapping[str, object]]:
    return functools.partial(sign_ed25519, key)


async def test_replies_are_signed_within_the_callers_session_or_else_ed25519(
    tmp_path: Path, logs: Logs
) -> None:
    # With sessions (the default), c signs a's replies with a's session key
    async with three_nodes(tmp_path) as three:
        assert isinstance(three.c_session(), SessionSigner)
    # Without, c signs them ed25519 with its own key, and a checks them against
    # the key named like c's certificate
    async with three_nodes(tmp_path / "ed25519", sessions=False) as three:
        signing = three.route(three.c)[2]
        assert signing is not None
        signer = signing.signer()
        assert isinstance(signer, functools.partial)
        with trio.fail_after(TIMEOUT):
            assert await three.a.ref(three.c.address_of("echo")).ask("echo", [1]) == [1]
    assert not logs.of_type("actorctl:reply:rejected")


# --- Property: nothing a wrong party builds reaches the caller ---------------------------


@dataclass(frozen=True)
class Forgery:
    """One reply document a wrong party builds, and the connection it arrives on."""

    via: str  # "b": b's own connection with a; "c": injected on c's connection
    correlation_id: str | None
    body: Any
    replier: str | None
    signature: str  # how it is signed (see _sign)
    key_id: str
    sig: bytes
    flip: int | None  # a byte of the encoded message to change, if any


_SIGNATURES = ("none", "random", "b-session", "b-ed25519", "stranger", "real-session-id")


def forgeries(real_cid: str) -> st.SearchStrategy[Forgery]:
    return st.builds(
        Forgery,
        via=st.sampled_from(["b", "c"]),
        correlation_id=st.one_of(st.just(real_cid), st.none(), st.text(max_size=20)),
        body=st.one_of(st.none(), st.integers(), st.text(max_size=20)),
        replier=st.one_of(st.just("gate"), st.none(), st.text(max_size=10)),
        signature=st.sampled_from(_SIGNATURES),
        key_id=st.one_of(st.text(max_size=20), st.sampled_from(["a", "b", "c"])),
        sig=st.binary(max_size=80),
        flip=st.one_of(st.none(), st.integers(min_value=0, max_value=10_000)),
    )


def _sign(three: Three, forgery: Forgery) -> Callable[[bytes], Mapping[str, object]] | None:
    """The signatures a wrong party can make: none, made up, b's own (b's session
    with a, b's key), an untrusted key's, or a made-up key under a's real session id."""
    kind = forgery.signature
    key_ids = {name: k.identity.key_id for name, k in three.secrets.keys.items()}
    if kind == "none":
        return None
    if kind == "random":
        key = key_ids.get(forgery.key_id, forgery.key_id)
        alg = "ed25519" if len(forgery.sig) % 2 else HMAC_SHA256
        return lambda _: {SIG_ALG: alg, SIG_KEY: key, SIG: forgery.sig}
    if kind == "b-session":
        signing = three.route(three.b)[2]
        assert signing is not None
        return signing.signer()
    if kind == "b-ed25519":
        return _ed25519(three.secrets.keys["b"].identity)
    if kind == "stranger":
        return _ed25519(IdentityKey.generate("c"))
    real = three.c_session().session
    return SessionSigner(Session(real.id, os.urandom(32), real.issuer_key_id, real.expires))


def _forged_bytes(three: Three, forgery: Forgery) -> bytes:
    envelope = three.document(
        forgery.correlation_id or "",
        body=forgery.body,
        headers={"status": "ok", "replier": forgery.replier},
    )
    envelope = attrs.evolve(envelope, correlation_id=forgery.correlation_id or None)
    data = bytearray(encode(envelope, signer=_sign(three, forgery), actor=envelope.to))
    if forgery.flip is not None:
        data[forgery.flip % len(data)] ^= 0x01 + forgery.flip % 255
    return bytes(data)


async def test_no_reply_a_wrong_party_builds_is_handed_to_the_waiting_caller(
    tmp_path: Path, unhanded: Unhanded
) -> None:
    async with three_nodes(tmp_path) as three, pending_ask(three, unhanded) as ask:
        token = trio.lowlevel.current_trio_token()
        sent = 0
        leaked: list[Forgery] = []  # the first that reached the ask (then every example fails)

        async def forge(forgery: Forgery) -> None:
            nonlocal sent
            if not leaked:
                three.inject(
                    three.b if forgery.via == "b" else three.c, _forged_bytes(three, forgery)
                )
                sent += 1
                # Each one is rejected, late or undecodable: never taken by the ask
                await unhanded.wait_for(sent, unless=ask.is_done)
                if ask.done:
                    leaked.append(forgery)
            assert not leaked, f"{leaked[0]} was handed to the caller"

        @settings(
            max_examples=150,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
        @given(forgery=forgeries(ask.correlation_id))
        def prove(forgery: Forgery) -> None:
            trio.from_thread.run(forge, forgery, trio_token=token)

        await trio.to_thread.run_sync(prove)
        assert sent >= 100
