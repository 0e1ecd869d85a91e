"""Actors the tests host on real nodes."""

from __future__ import annotations

from dataclasses import dataclass

import attrs
import trio

from actorctl import Actor, Behaviour, Envelope, Outcome, handler


@dataclass
class User:
    name: str
    email: str


@attrs.frozen
class Point:
    x: int
    y: int


class Calculator(Actor):
    """Async and sync handlers, typed payloads, failures."""

    def __init__(self) -> None:
        self.told: list[object] = []
        self.told_event = trio.Event()
        self.threads: set[str] = set()

    @handler
    async def add(self, a: int, b: int) -> int:
        return a + b

    @handler
    def multiply(self, a: int, b: int) -> int:
        import threading

        self.threads.add(threading.current_thread().name)
        return a * b

    @handler
    async def remember(self, value: object) -> None:
        self.told.append(value)
        self.told_event.set()

    @handler
    async def greet(self, user: User) -> str:
        return f"hello {user.name} <{user.email}>"

    @handler
    async def norm(self, p: Point) -> Point:
        return Point(abs(p.x), abs(p.y))

    @handler
    async def fail(self, text: str) -> None:
        raise ValueError(text)

    @handler
    async def hang(self) -> None:
        await trio.sleep_forever()

    @handler
    async def open_circuit(self) -> None:
        self.become(OpenCircuit())

    @handler
    async def shout(self, text: str) -> str:
        return text.upper()


class OpenCircuit(Behaviour):
    """The open state of a breaker: every message is answered `modified`."""

    def unhandled(self, envelope: Envelope) -> Outcome | None:
        return Outcome.modified(
            "actorctl:circuit-open", f"{envelope.subject} refused: circuit open"
        )


class Whisper(Behaviour):
    def __init__(self, actor: Actor) -> None:
        self.actor = actor

    @handler
    async def shout(self, text: str) -> str:
        return text.lower()

    @handler
    async def back(self) -> None:
        self.actor.unbecome()


class Moody(Actor):
    @handler
    async def shout(self, text: str) -> str:
        return text.upper()

    @handler
    async def calm_down(self) -> None:
        self.become(Whisper(self))


class Odd(Actor):
    @handler
    async def nan(self) -> float:
        return float("nan")


class Tally(Actor):
    """Counts the bumps it was sent; ``explode`` crashes it (outside any handler)."""

    def __init__(self) -> None:
        self.count = 0

    @handler
    async def bump(self) -> int:
        self.count += 1
        return self.count

    def unhandled(self, envelope: Envelope) -> Outcome | None:
        if envelope.subject == "explode":
            raise RuntimeError("tally exploded")
        return None


class _FactoryOfAnOlderFormat:
    """An actors factory that does not say which keys of its node's table it reads."""

    def actors_for(self, cluster: object, node: object) -> dict[str, Actor]:
        return {"calculator": Calculator()}


factory_without_settings_keys = _FactoryOfAnOlderFormat()


class NeverReady(Actor):
    """An actor whose start never ends (its node never reports ready)."""

    async def on_start(self) -> None:
        await trio.sleep_forever()


class BrokenStart(Actor):
    """An actor that cannot start: its node fails to start, saying why."""

    async def on_start(self) -> None:
        raise RuntimeError("the ledger file is locked by another process")


#: The mailbox of ``Small``: small enough for a test to fill it.
SMALL_CAPACITY = 10


class Small(Actor):
    """A mailbox of ``SMALL_CAPACITY`` messages and one handler: for tests of
    credit, backpressure and bounds."""

    mailbox_capacity = SMALL_CAPACITY

    @handler
    async def ping(self, who: str) -> str:
        return f"pong {who}"


class Vault(Actor):
    """Opens for whoever asks, and remembers who did: for tests of who may ask."""

    def __init__(self) -> None:
        self.opened: list[str] = []

    @handler
    async def open(self, who: str) -> str:
        self.opened.append(who)
        return f"opened for {who}"


class CountingCalculator(Actor):
    """``calculator``'s ``add``, counting what it ran: so that a refused
    request is seen not to run."""

    name = "calculator"

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    @handler
    async def add(self, a: int, b: int) -> int:
        self.calls.append((a, b))
        return a + b
