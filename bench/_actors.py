"""The actor the benchmark talks to: a no-op handler and an echo."""

from __future__ import annotations

from typing import Any

from actorctl import Actor, handler


class Bench(Actor):
    name = "bench"
    mailbox_capacity = 100  # the same credit window as the raw reference

    @handler
    async def noop(self, *args: Any, **kwargs: Any) -> None:
        return None

    @handler
    async def echo(self, *args: Any, **kwargs: Any) -> Any:
        return list(args)


actors = [Bench]
