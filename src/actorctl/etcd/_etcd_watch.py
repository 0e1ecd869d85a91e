"""A watch of a key or a prefix in etcd: its changes, in order, from a revision on.

A watch is one long HTTP answer from etcd's gateway (``POST /v3/watch``), one
JSON message per line. :class:`Watch` turns it into :class:`WatchEvent`\\ s and
keeps :attr:`Watch.next_revision`, the revision to watch from again: a caller
that loses the watch (etcd restarted, a member gone) watches again from there
and misses nothing, as long as etcd has not compacted that revision away
(:class:`EtcdCompacted` then says to read the keys again).

A connection can die without a word (a host gone, a partition): no message
would ever come. So a watch that has heard nothing for ``idle`` seconds opens
a new stream from :attr:`Watch.next_revision`, which is bounded like any call
and raises :class:`EtcdUnavailable` when etcd cannot be reached: a watch never
waits on a dead connection for longer than ``idle`` plus the client's timeout.
"""

from __future__ import annotations

import ssl
from collections import deque
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any, final

import trio

from ._etcd_data import WatchEvent, key_range, number, revision_of, watch_event
from ._etcd_wire import NO_TOKEN, EtcdCompacted, EtcdError, EtcdUnavailable, Wire

__all__ = ["Watch"]


@final
class Watch:
    """The changes of ``key`` (every key under it, with ``prefix``), in revision
    order, from ``start_revision`` (None: from now). Made by
    :meth:`EtcdClient.watch <actorctl.etcd._etcd.EtcdClient.watch>`; use it as::

        async with client.watch("/a/", prefix=True, start_revision=r) as watch:
            async for event in watch:
                ...

    Entering the block waits until etcd has set the watch up (bounded by the
    client's timeout): every change after that is seen.

    Attributes:
        next_revision: the revision from which a new watch would see exactly
            the changes this one has not yet handed out.

    Raises (entering, or iterating):
        EtcdUnavailable: etcd could not be reached, or the watch's connection
            broke: watch again from ``next_revision``.
        EtcdCompacted: etcd no longer has ``start_revision``.
    """

    def __init__(
        self,
        wire: Wire,
        key: str,
        *,
        prefix: bool,
        start_revision: int | None,
        idle: float,
        timeout: float,
    ) -> None:
        self._wire = wire
        self._key = key
        self._range = key_range(key, prefix=prefix)
        self._from_now = start_revision is None
        self.next_revision = start_revision or 0
        self._idle = idle
        self._timeout = timeout
        self._stack: AsyncExitStack | None = None
        self._messages: AsyncIterator[dict[str, Any]] | None = None
        self._events: deque[WatchEvent] = deque()
        self._token: str | None = None

    async def __aenter__(self) -> Watch:
        await self._open()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self._close()

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> WatchEvent:
        """The next change; waits for one as long as the caller lets it."""
        while not self._events:
            if self._messages is None:
                raise EtcdUnavailable(f"the watch of {self._key!r} is closed")
            with trio.move_on_after(self._idle) as quiet:
                try:
                    message = await anext(self._messages)
                except (StopAsyncIteration, trio.BrokenResourceError, OSError, ssl.SSLError) as exc:
                    await self._close()
                    raise self._broken(str(exc) or "etcd ended the stream") from None
            if quiet.cancelled_caught:  # nothing heard: make sure the connection lives
                await self._close()
                await self._open()
                continue
            await self._take(message)
        return self._events.popleft()

    async def _open(self) -> None:
        body: dict[str, Any] = dict(self._range, progress_notify=True)
        if self.next_revision:
            body["start_revision"] = str(self.next_revision)
        stack = AsyncExitStack()
        first, self._messages = await stack.enter_async_context(
            self._wire.stream("/v3/watch", {"create_request": body}, self._timeout)
        )
        self._token = self._wire.token  # what it was opened with (etcd's auth)
        self._stack = stack
        await self._take(first)

    async def _close(self) -> None:
        stack, self._stack, self._messages = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    async def _take(self, message: dict[str, Any]) -> None:
        """Read one message of the stream: events, or news of the watch itself."""
        if "error" in message:  # the gateway's word for a stream that failed
            error = message["error"]
            text = error.get("message", error) if isinstance(error, dict) else error
            await self._close()
            raise self._broken(f"etcd said: {text}")
        result = message.get("result", {})
        if result.get("canceled"):
            await self._close()
            compacted = number(result, "compact_revision")
            if compacted:
                raise EtcdCompacted(
                    f"watch of {self._key!r} from revision {self.next_revision}: etcd has "
                    f"compacted it (it keeps revisions from {compacted}); read the keys "
                    "again and watch from the revision after that read",
                    compacted,
                )
            reason = result.get("cancel_reason") or "no reason given"
            if any(why in reason for why in NO_TOKEN):
                # etcd (3.5) cancels a watch whose token it no longer takes: a
                # new token, and the watch set up again, as after a break
                self._wire.forget_token(self._token)
                raise self._broken(f"etcd cancelled it: {reason}")
            raise EtcdError(f"etcd cancelled the watch of {self._key!r}: {reason}")
        events = [watch_event(e) for e in result.get("events", ())]
        if events:
            self._events.extend(events)
            self.next_revision = events[-1].mod_revision + 1
        elif self._from_now or not result.get("created"):
            # Set up "from now", or a progress report: everything up to the
            # header's revision has been seen. (Set up from a past revision,
            # the header is etcd's current revision and the past is yet to come.)
            self.next_revision = max(self.next_revision, revision_of(result) + 1)
        self._from_now = False

    def _broken(self, why: str) -> EtcdUnavailable:
        return EtcdUnavailable(
            f"the watch of {self._key!r} broke ({why}); "
            f"watch again from revision {self.next_revision}"
        )
