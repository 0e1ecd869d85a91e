"""The publisher-side circuit breaker of one destination peer.

A node that cannot connect to a peer keeps trying (``Peer.run``), and what
is sent there waits for a connection up to the connect timeout. Once the peer
has been unreachable for the connect timeout and ``failures`` more attempts
have failed, the peer's breaker opens: a send there fails at once with
``PeerUnavailable`` (naming the breaker and when it tries again) instead of
each waiting for the connection, durable sends wait in the backlog, and the
node stops dialling until the reset period has passed; then one connection
attempt is the probe (half-open): a send made then waits for it (up to the
connect timeout). A connection closes the breaker; a failed probe opens it
again for longer (exponential growth, capped).

A peer that comes back within the connect timeout (a restarting node) never
trips it. The breaker is kept per endpoint by the outbox, so it outlives a
connection that was closed as idle. Nothing here runs per message: only when
a connection fails, is made, or is waited for.
"""

from __future__ import annotations

import random
from typing import Final, final

import trio

from ...._errors import PeerUnavailable
from ....supervision import Breaker, BreakerPolicy

__all__ = ["PEER_BREAKER", "PeerBreaker"]

#: The default policy of a peer's breaker: 3 failed attempts past the connect
#: timeout; a first probe after 2 s (the longest reconnect backoff), doubling
#: on each failed probe up to 30 s.
PEER_BREAKER: Final = BreakerPolicy(failures=3, reset=2.0, growth="exponential", reset_max=30.0)


@final
class PeerBreaker:
    """The breaker of the peer at ``name`` (``host:port``)."""

    def __init__(self, name: str, policy: BreakerPolicy | None = None) -> None:
        self.breaker = Breaker(f"peer {name}", policy or PEER_BREAKER)
        self._back = trio.Event()  # set by peer_is_back: probe now

    def check(self, last_error: str) -> None:
        """Fail a send at once while the breaker is open; once its reset
        period has passed (the probe is due or under way) the send waits for
        the probe's connection like any other.

        Raises:
            PeerUnavailable: naming the breaker, when it tries again, and the
                last connection error.
        """
        breaker = self.breaker
        if not breaker.closed and trio.current_time() < breaker.reset_at:
            raise PeerUnavailable(f"{breaker.why()} (last error: {last_error})")

    def failed(self, down_since: float | None, connect_timeout: float, error: str) -> None:
        """A connection attempt failed; it counts once the peer has been down
        for the connect timeout (and always for the probe)."""
        breaker = self.breaker
        if not breaker.closed or (
            down_since is not None and trio.current_time() - down_since >= connect_timeout
        ):
            breaker.failed(f"cannot connect: {error}")

    async def pause(self, backoff: float, longest: float) -> float:
        """Wait before the next attempt: ``backoff`` (jittered) while closed,
        else until the reset period has passed, and let that attempt be the
        probe. Returns the next backoff (doubled, at most ``longest``)."""
        breaker = self.breaker
        if breaker.closed:
            await trio.sleep(backoff * (0.5 + random.random()))
        else:
            with trio.move_on_at(breaker.reset_at):
                await self._back.wait()
            self._back = trio.Event()
            breaker.admit()
        return min(backoff * 2, longest)

    def peer_is_back(self) -> None:
        """Its node is known to be up again (it registered in the cluster's
        membership): the probe is now, not at the end of a reset period that
        failed attempts before it started may have grown to half a minute."""
        breaker = self.breaker
        if not breaker.closed:
            breaker.reset_at = min(breaker.reset_at, trio.current_time())
            self._back.set()

    def connected(self) -> None:
        """A connection is ready: the breaker closes."""
        if not self.breaker.closed:
            self.breaker.close("the connection was made")
