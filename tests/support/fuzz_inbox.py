"""Fuzzing the inbound path: random and mutated AMQP byte streams against a node.

``tests/cluster/link/test_fuzz.py`` runs a short, bounded pass in CI. For a longer run:

    python -m tests.support.fuzz_inbox --seconds 600

Each case opens a TCP connection to a real node, writes bytes (a valid client
conversation with some bytes flipped, cut or repeated, or plain noise), reads
until the node closes or a short timeout passes, and closes. After every case
the node must still answer a well-formed call.
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

import trio
from proton import Collector, Connection, Endpoint, Message, Transport

from actorctl import Actor, handler
from tests.support.harness import node_pair


class Target(Actor):
    """What the fuzzer aims at; counts what it runs."""

    def __init__(self) -> None:
        self.ran: list[object] = []
        self.got = trio.Event()

    @handler
    async def record(self, value: object) -> None:
        self.ran.append(value)
        self.got.set()

    @handler
    async def ping(self) -> str:
        return "pong"


def client_bytes(
    body: bytes, *, subject: str = "record", target: str = "target"
) -> tuple[bytes, bytes]:
    """The bytes a proton client writes to open a link, then to send one message.

    Made without I/O: the client engine talks to an in-memory proton server
    engine that grants credit, and what the client wrote is recorded.
    """
    client = Connection()
    client.container = "fuzzer"
    client_transport = Transport(Transport.CLIENT)
    client_transport.sasl().allowed_mechs("ANONYMOUS")
    client_transport.bind(client)
    server = Connection()
    events = Collector()
    server.collect(events)
    server_transport = Transport(Transport.SERVER)
    server_transport.sasl().allowed_mechs("ANONYMOUS")
    server_transport.bind(server)
    recorded = bytearray()

    def pump() -> None:
        moved = True
        while moved:
            moved = False
            for source, sink, record in (
                (client_transport, server_transport, True),
                (server_transport, client_transport, False),
            ):
                size = source.pending()
                if size > 0:
                    data = source.peek(size)
                    source.pop(size)
                    if record:
                        recorded.extend(data)
                    sink.push(data)
                    moved = True
            while (event := events.peek()) is not None:
                for endpoint in (event.connection, event.session, event.link):
                    if endpoint is not None and endpoint.state & Endpoint.LOCAL_UNINIT:
                        endpoint.open()
                        if event.link is endpoint and endpoint.is_receiver:
                            endpoint.flow(10)
                events.pop()
                moved = True

    client.open()
    session = client.session()
    session.open()
    sender = session.sender("fuzz")
    sender.target.address = target
    sender.open()
    pump()
    opening = bytes(recorded)
    recorded.clear()
    message = Message(id="fuzz-1", subject=subject, body=body, inferred=True)
    message.content_type = "application/json"
    sender.delivery(b"1")
    sender.send(message.encode())
    sender.advance()
    pump()
    return opening, bytes(recorded)


def mutate(data: bytes, rng: random.Random) -> bytes:
    data = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        choice = rng.random()
        if not data:
            break
        i = rng.randrange(len(data))
        if choice < 0.5:
            data[i] = rng.randrange(256)
        elif choice < 0.7:
            del data[i : i + rng.randint(1, 16)]
        elif choice < 0.85:
            data[i:i] = data[i : i + rng.randint(1, 16)]
        else:
            data = data[:i]
    return bytes(data)


def case(rng: random.Random) -> tuple[bytes, bytes]:
    """One fuzz input: an opening, and what follows once the node has answered it."""
    kind = rng.random()
    if kind < 0.15:
        return rng.randbytes(rng.randint(0, 512)), b""
    bodies = [b"[[1], {}]", b"[[], {}]", b"{", b"\xff\xfe", b'[[{"a": 1}], {}]', rng.randbytes(20)]
    opening, transfer = client_bytes(
        rng.choice(bodies), subject=rng.choice(["record", "ping", "nope", ""])
    )
    if kind < 0.4:
        return mutate(opening, rng), transfer
    if kind < 0.95:
        return opening, mutate(transfer, rng)
    return opening, transfer


_FLOW = b"\x00\x53\x13"  # the flow performative: the node has granted credit


async def hit(port: int, data: tuple[bytes, bytes]) -> None:
    """Send the opening; once the node has granted credit (or hung up, or gone
    quiet) send the rest; read until the node hangs up or goes quiet; close."""
    opening, rest = data
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    try:
        received = b""
        with trio.move_on_after(0.5):
            await stream.send_all(opening)
            while _FLOW not in received and (chunk := await stream.receive_some(65536)):
                received += chunk
        if rest:
            await stream.send_all(rest)
        with trio.move_on_after(0.2):
            while await stream.receive_some(65536):
                pass
    except (trio.BrokenResourceError, OSError):
        pass
    finally:
        await trio.aclose_forcefully(stream)


async def run(
    seconds: float,
    cases: int,
    seed: int,
    node_options: dict[str, Any],
    checker_options: dict[str, Any] | None = None,
) -> Target:
    """Fuzz a fresh node for at most ``seconds`` or ``cases`` cases.

    ``node_options`` go to the fuzzed node, and to the node that checks it still
    answers unless ``checker_options`` are given. Both are plain TCP (insecure,
    unless the options say otherwise), so the fuzzer's bytes reach the inbox.
    """
    rng = random.Random(seed)
    target = Target()
    async with node_pair(
        [target],
        names=("fuzzed", "checker"),
        client_options=checker_options or node_options,
        **node_options,
    ) as (node, checker):
        ping = checker.ref(node.address_of("target")).with_options(timeout=5)
        deadline = time.monotonic() + seconds
        done = 0
        while done < cases and time.monotonic() < deadline:
            await hit(node.port, case(rng))
            done += 1
            if done % 25 == 0:
                assert await ping.ask("ping") == "pong", (
                    f"node stopped answering after {done} cases"
                )
        assert await ping.ask("ping") == "pong"
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    print(f"fuzzing for {args.seconds:g} s, seed {args.seed}")
    target = trio.run(run, args.seconds, 10**9, args.seed, {"insecure": True})
    print(f"node survived; handler ran {len(target.ran)} times on fuzzed input")


if __name__ == "__main__":
    main()
