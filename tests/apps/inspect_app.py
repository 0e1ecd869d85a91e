"""The task app of tests/cli/test_inspect.py: a pool per worker node, a step per
pool (a chain of the three crosses three nodes), and a task that runs until
the test lets it end.
"""

from __future__ import annotations

import trio

from actorctl import App

app = App("inspect")
app.pool("a", concurrency=1)  # one run at a time: a second task is reserved
app.pool("b", concurrency=2)
app.pool("c", concurrency=2)


@app.task(pool="a")
def step_a(x: int) -> int:
    return x + 1


@app.task(pool="b")
def step_b(x: int) -> int:
    return x * 2


@app.task(pool="c")
def step_c(x: int) -> int:
    return x - 3


@app.task(pool="a")
async def hold(port: int, label: str) -> str:
    """Say ``label`` on the test's port once it runs, and run until the test
    answers (or the task is terminated)."""
    async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
        await stream.send_all(label.encode() + b"\n")
        await stream.receive_some(1)
    return label


@app.task(pool="c")
def broken(x: int) -> int:
    """Fails at once: a programming error, never retried."""
    raise TypeError(f"broken on purpose ({x})")
