"""Reference figures for plain python-qpid-proton (its own reactor, no actorctl).

Two OS processes on 127.0.0.1: ``measure()`` starts ``python bench/_raw.py serve PORT`` as a
subprocess and drives three measurements against it, each over a fresh connection:

* tell: N at-least-once messages (receiver credit 100, accepted and settled one by one),
  messages/s from the first send until the last one is settled at the sender;
* ask: sequential request/reply to a dynamic reply address, p50/p99 round trip in us;
* ask pipelined: the same with 100 requests in flight, calls/s.

``python bench/_raw.py`` runs ``measure()`` with defaults and prints the figures as JSON;
``python bench/_raw.py --smoke`` does so with tiny counts (bench/_smoke.py).
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from collections import deque

from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

CREDIT = 100
WINDOW = 100
WARMUP = 200
PHASE_TIMEOUT_S = 120.0
READY_TIMEOUT_S = 10.0
# ~100 bytes of JSON shaped like an actorctl call body: [args, kwargs].
BODY = json.dumps([[1, 2], {"pad": "x" * 79}]).encode()


def _request(mid: int, reply_to: str | None = None) -> Message:
    return Message(
        body=BODY,
        inferred=True,
        subject="noop",
        id=str(mid),
        reply_to=reply_to,
        content_type="application/json",
    )


class _Server(MessagingHandler):
    """Accepts everything sent to it; answers messages that carry a reply_to address."""

    def __init__(self, port: int) -> None:
        super().__init__(prefetch=CREDIT)
        self.port = port
        self.reply_links: dict[str, object] = {}
        self.backlog: dict[str, deque[Message]] = {}
        self.next_addr = 0
        self.parent = os.getppid()

    def on_start(self, event):
        event.container.acceptor("127.0.0.1", self.port)
        event.container.schedule(1.0, self)
        print(f"ready {self.port}", flush=True)

    def on_timer_task(self, event):
        if os.getppid() != self.parent:  # orphaned: the client is gone, do not linger
            os._exit(0)
        event.container.schedule(1.0, self)

    def on_link_opening(self, event):
        link = event.link
        if link.is_sender and link.remote_source.dynamic:
            self.next_addr += 1
            addr = f"reply-{self.next_addr}"
            link.source.address = addr
            self.reply_links[addr] = link
            self.backlog[addr] = deque()

    def on_link_closing(self, event):
        addr = event.link.source.address if event.link.is_sender else None
        if addr in self.reply_links:
            del self.reply_links[addr], self.backlog[addr]

    def on_message(self, event):
        msg = event.message
        addr = msg.reply_to
        if addr and addr in self.reply_links:
            reply = Message(
                body=BODY,
                inferred=True,
                subject="reply",
                correlation_id=msg.id,
                content_type="application/json",
            )
            self.backlog[addr].append(reply)
            self._drain(addr)

    def on_sendable(self, event):
        addr = event.link.source.address
        if addr in self.reply_links:
            self._drain(addr)

    def _drain(self, addr: str) -> None:
        link, queue = self.reply_links[addr], self.backlog[addr]
        while queue and link.credit > 0:
            link.send(queue.popleft())


class _Phase(MessagingHandler):
    """One client-side measurement on its own connection, bounded by a timer."""

    def __init__(self, url: str) -> None:
        super().__init__(prefetch=CREDIT)
        self.url = url
        self.conn = None
        self.timer = None
        self.error: str | None = None
        self.t0 = self.t1 = 0.0

    def on_start(self, event):
        self.conn = event.container.connect(self.url, reconnect=False)
        self.timer = event.container.schedule(PHASE_TIMEOUT_S, self)

    def on_timer_task(self, event):
        self.error = f"{type(self).__name__} timed out after {PHASE_TIMEOUT_S} s"
        event.container.stop()

    def on_transport_error(self, event):
        cond = event.transport.condition
        self.error = f"transport error: {cond.name if cond else '?'}: {cond and cond.description}"
        event.container.stop()

    def finish(self) -> None:
        self.timer.cancel()
        self.conn.close()

    def run(self) -> _Phase:
        Container(self).run()
        if self.error:
            raise RuntimeError(self.error)
        return self


class _Tell(_Phase):
    def __init__(self, url: str, count: int) -> None:
        super().__init__(url)
        self.count, self.sent, self.settled = count, 0, 0

    def on_start(self, event):
        super().on_start(event)
        event.container.create_sender(self.conn, "noop")

    def on_sendable(self, event):
        sender = event.sender
        if self.sent == 0:
            self.t0 = time.perf_counter()
        while sender.credit > 0 and self.sent < self.count:
            sender.send(_request(self.sent))
            self.sent += 1

    def on_accepted(self, event):
        self.settled += 1
        if self.settled == self.count:
            self.t1 = time.perf_counter()
            self.finish()


class _Ask(_Phase):
    def __init__(self, url: str, count: int, window: int) -> None:
        super().__init__(url)
        self.total, self.window = count + WARMUP, window
        self.sent = self.done = 0
        self.sender = None
        self.reply_to: str | None = None
        self.started: dict[str, float] = {}
        self.latencies: list[float] = []

    def on_start(self, event):
        super().on_start(event)
        self.sender = event.container.create_sender(self.conn, "noop")
        event.container.create_receiver(self.conn, None, dynamic=True)

    def on_link_opened(self, event):
        if event.link.is_receiver:
            self.reply_to = event.link.remote_source.address
            self._pump()

    def on_sendable(self, event):
        self._pump()

    def _pump(self) -> None:
        if self.reply_to is None:
            return
        while (
            self.sent < self.total
            and self.sent - self.done < self.window
            and self.sender.credit > 0
        ):
            self.started[str(self.sent)] = time.perf_counter()
            self.sender.send(_request(self.sent, self.reply_to))
            self.sent += 1

    def on_message(self, event):
        now = time.perf_counter()
        began = self.started.pop(event.message.correlation_id)
        self.done += 1
        if self.done > WARMUP:
            self.latencies.append(now - began)
        elif self.done == WARMUP:
            self.t0 = now
        if self.done == self.total:
            self.t1 = now
            self.finish()
        else:
            self._pump()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(proc: subprocess.Popen, port: int) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([proc.stdout], [], [], left)[0]:
            break
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"server exited before ready (rc={proc.wait(timeout=5)})")
        if line.split() == ["ready", str(port)]:
            return
    raise RuntimeError(f"server did not report ready within {READY_TIMEOUT_S} s")


def measure(tell_count: int = 20000, ask_count: int = 2000, pipelined_count: int = 20000) -> dict:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "serve", str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_ready(proc, port)
        url = f"127.0.0.1:{port}"
        tell = _Tell(url, tell_count).run()
        ask = _Ask(url, ask_count, 1).run()
        piped = _Ask(url, pipelined_count, WINDOW).run()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        proc.stdout.close()
    lat = sorted(ask.latencies)

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, round(q * (len(lat) - 1)))] * 1e6

    return {
        "tell_per_s": tell_count / (tell.t1 - tell.t0),
        "ask_p50_us": pct(0.50),
        "ask_p99_us": pct(0.99),
        "ask_pipelined_per_s": pipelined_count / (piped.t1 - piped.t0),
    }


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        Container(_Server(int(sys.argv[2]))).run()
    elif sys.argv[1:] == ["--smoke"]:  # tiny counts: does it still run? (bench/_smoke.py)
        print(json.dumps(measure(200, 50, 200), indent=2))
    else:
        print(json.dumps(measure(), indent=2))
