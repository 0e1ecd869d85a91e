"""The engine's socket writes: a busy spell's output goes out together, a lone
message at once (issue 30). Real sockets on 127.0.0.1, plain TCP; writes are
counted, never timed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import trio
import trio.testing
from proton import Link

from actorctl.cluster import Engine, EngineHandler
from tests.support.rawpeer import RawPeer

REPLIES = 200


class _Replier(EngineHandler):
    """The server's side: opens the reply link the client attaches."""

    def __init__(self) -> None:
        self.link: Link | None = None
        self.attached = trio.Event()

    def on_link_remote_open(self, engine: Engine, link: Link) -> None:
        if link.state & Link.LOCAL_UNINIT and link.is_sender:
            link.source.address = "$reply/test"
            link.snd_settle_mode = Link.SND_SETTLED  # replies are pre-settled
            link.open()
            self.link = link
            self.attached.set()
            engine.wake()


@asynccontextmanager
async def _pair() -> AsyncIterator[tuple[Engine, Any, RawPeer]]:
    """A server engine with an open reply link to a client that granted credit
    for every reply: (server engine, its raw reply link, the client)."""
    replier = _Replier()
    served: list[Engine] = []
    async with trio.open_nursery() as nursery:

        async def serve(stream: trio.SocketStream) -> None:
            engine = Engine(stream, replier, server=True, container_id="server", peer="client")
            served.append(engine)
            await engine.run()

        listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        client = RawPeer()
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        engine = Engine(stream, client, server=False, container_id="client", peer="server")
        client.engine = engine
        engine.connection.open()
        client.session = engine.connection.session()
        client.session.open()
        nursery.start_soon(engine.run)
        engine.wake()
        client.receiver(credit=REPLIES + 10)
        with trio.fail_after(10):
            await replier.attached.wait()
            await client.wait(lambda: all(state.opened for state in client.links.values()))
        assert replier.link is not None
        yield served[0], replier.link._impl, client
        nursery.cancel_scope.cancel()


async def test_replies_of_successive_loop_turns_share_writes() -> None:
    """Replies made one loop turn apart (as a worker's tasks make them, one
    after another) go out in far fewer writes than replies."""
    async with _pair() as (server, link, client):
        await trio.testing.wait_all_tasks_blocked()
        before = server.writes
        for number in range(REPLIES):
            server.send_settled(link, b"%d" % number, b"reply %d" % number)
            await trio.lowlevel.checkpoint()  # the next reply comes a loop turn later
        await client.wait(lambda: len(client.messages) == REPLIES)
        writes = server.writes - before
        assert client.messages == [b"reply %d" % number for number in range(REPLIES)]
        # Before: about one write per reply. Now about one per GATHER_TURNS
        # turns while they keep coming (12 or 13 here), with room to spare.
        assert writes <= REPLIES // 8, writes


async def test_a_lone_reply_is_written_at_once() -> None:
    """After a quiet spell, a reply is written in the next loop turn: nothing
    waits to gather with it."""
    async with _pair() as (server, link, client):
        await trio.testing.wait_all_tasks_blocked()
        before = server.writes
        server.send_settled(link, b"lone", b"a lone reply")
        # The writer runs in the next turn, before or after this task in it.
        await trio.lowlevel.checkpoint()
        await trio.lowlevel.checkpoint()
        assert server.writes == before + 1
        await client.wait(lambda: client.messages == [b"a lone reply"])


async def test_what_one_loop_turn_sends_is_written_together_at_its_end() -> None:
    """After a quiet spell, the replies one loop turn makes go out in one
    write at the end of that turn (before trio's I/O wait), not after the
    writer task's turn: by the time the sending task runs again."""
    async with _pair() as (server, link, client):
        await trio.testing.wait_all_tasks_blocked()
        before = server.writes
        for number in range(5):
            server.send_settled(link, b"t%d" % number, b"turn %d" % number)
        assert server.writes == before  # nothing is written in the middle of a turn
        await trio.lowlevel.checkpoint()  # the turn ends: its output is written
        assert server.writes == before + 1
        await client.wait(lambda: len(client.messages) == 5)
        assert client.messages == [b"turn %d" % number for number in range(5)]
        assert server.writes == before + 1
