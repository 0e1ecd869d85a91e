"""When a peer's reconnect loop dials, and how a sender waits for the connection.

``Peer.run`` dials the peer, and after a failed attempt pauses with a growing
backoff (``reconnect_backoff``: 50 ms doubling up to 2 s by default), or, while
the peer's breaker is open, until its probe (``_peer_breaker.py``). A sender
that finds no connection waits here:

- it wakes the loop out of its backoff pause, so that a peer that has come
  back is dialled now rather than at the end of the pause; the woken attempt
  starts no sooner than ``WOKEN_GAP`` after the previous one, so that a stream
  of sends to a dead peer does not become a stream of connection attempts;
- it fails with ``PeerUnavailable`` once the peer has been down for the connect
  timeout and an attempt that started after the sender began waiting has
  failed, and in any case the connect timeout after it began waiting;
- while the breaker is open it fails at once (the breaker's probe dials);
- once the peer is known to be gone (:meth:`Dialer.gone`: its lease in etcd
  ended) it fails at once, until a connection is made again or the peer
  registers again (:meth:`Dialer.back`).

What a lost connection left to send again is given up once the peer has been
down for the connect timeout (counted from when it went down, as before).
Nothing here runs per message: only when a connection fails, is made, or is
waited for.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Final, Generic, TypeVar, final

import trio

from ...._errors import PeerUnavailable
from ...._log import log
from ._peer_breaker import PeerBreaker

__all__ = ["BACKOFF", "WOKEN_GAP", "Dialer"]

#: The first and the longest pause between two failed connection attempts.
BACKOFF: Final = (0.05, 2.0)
#: The shortest time between an attempt and the next one that a sender woke.
WOKEN_GAP: Final = 0.5

T = TypeVar("T")


@final
class Dialer(Generic[T]):
    """The reconnect state of the peer ``name``: since when it is down, why the
    last attempt failed, and the senders waiting for it.

    ``ready`` gives the ready connection, or None."""

    def __init__(
        self,
        name: str,
        connect_timeout: float,
        breaker: PeerBreaker,
        ready: Callable[[], T | None],
        backoff: tuple[float, float] = BACKOFF,
    ) -> None:
        self.name = name
        self.connect_timeout = connect_timeout
        self.breaker = breaker
        self.backoff = backoff
        self._ready = ready
        # Since when no connection is ready (None: one is), and why the last attempt failed.
        self.since: float | None = trio.current_time()
        self.last_error = "no connection made yet"
        self._dials = 0  # attempts started
        self._ended = 0  # the number of the last attempt that failed
        self._dialled_at = -WOKEN_GAP
        self._gone: str | None = None  # why the peer is known to be gone (None: it may be up)
        self._wake = trio.Event()  # a sender asks for an attempt now
        self._changed = trio.Event()  # an attempt failed, or a connection is ready

    @property
    def waiting(self) -> int:
        """How many senders wait for a connection."""
        return self._changed.statistics().tasks_waiting

    def dialling(self) -> None:
        """An attempt starts: it is the one every sender waiting so far asked for."""
        self._dials += 1
        self._dialled_at = trio.current_time()
        if self._wake.is_set():
            self._wake = trio.Event()

    def failed(self, why: str, failures: int) -> bool:
        """The attempt failed: say why (now and then), tell the breaker and the
        waiting senders. Returns whether the peer has been down for the connect
        timeout (what waits to be sent again is then given up)."""
        self.last_error = why
        self._ended = self._dials
        since = self.since
        self.breaker.failed(since, self.connect_timeout, why)
        self._news()
        if failures == 1 or failures % 10 == 0:
            log("actorctl:peer:unreachable", peer=self.name, error=why, attempts=failures)
        return since is not None and trio.current_time() - since >= self.connect_timeout

    def gone(self, why: str) -> None:
        """The peer is known to be gone (its lease in etcd ended): senders
        waiting for it, and those that come, fail at once (``PeerUnavailable``)
        rather than after the connect timeout."""
        self._gone = self.last_error = why
        if self.since is None:
            self.since = trio.current_time()
        self._news()

    def back(self) -> None:
        """The peer registered again: senders wait for it as usual."""
        self._gone = None

    def connected(self) -> None:
        """A connection is ready."""
        self.since = None
        self._gone = None
        self.breaker.connected()
        self._news()

    def closed(self) -> None:
        """The ready connection closed."""
        if self.since is None:
            self.since = trio.current_time()
            self.last_error = "the connection closed"

    async def pause(self, backoff: float) -> float:
        """Wait before the next attempt; returns the next backoff. While the
        breaker is closed, a sender cuts the pause short (see ``WOKEN_GAP``)."""
        if not self.breaker.breaker.closed:
            return await self.breaker.pause(backoff, self.backoff[1])
        with trio.move_on_after(backoff * (0.5 + random.random())):
            await self._wake.wait()
            await trio.sleep_until(self._dialled_at + WOKEN_GAP)
        return min(backoff * 2, self.backoff[1])

    async def wait(self) -> T:
        """The ready connection, waiting for one (see the module's text).

        Raises:
            PeerUnavailable: naming the peer, the connect timeout and the last
                error; or the open breaker.
        """
        start = trio.current_time()
        fresh = self._dials + 1  # the first attempt that starts from now on
        self._wake.set()
        while True:
            ready = self._ready()
            if ready is not None:
                return ready
            self.breaker.check(self.last_error)  # open: fail fast, not after the timeout
            if self._gone is not None:
                raise PeerUnavailable(self.unavailable())
            since = self.since
            if since is None:
                since = self.since = trio.current_time()
            give_up = start + self.connect_timeout
            if self._ended >= fresh:  # a fresh attempt failed: only the peer's own bound is left
                give_up = min(give_up, since + self.connect_timeout)
            with trio.move_on_at(give_up):
                await self._changed.wait()
                continue
            raise PeerUnavailable(self.unavailable())

    def unavailable(self) -> str:
        if self._gone is not None:
            return f"node {self.name} is gone: {self._gone}"
        return (
            f"no connection to node {self.name} within "
            f"{self.connect_timeout:g} s (last error: {self.last_error})"
        )

    def _news(self) -> None:
        self._changed.set()
        self._changed = trio.Event()
