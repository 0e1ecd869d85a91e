"""A short fuzzing pass over the inbound path (tests/fuzz_inbox.py runs longer)."""

from __future__ import annotations

import trio

from .fuzz_inbox import client_bytes, hit, run


async def test_the_unmutated_conversation_is_a_valid_call() -> None:
    # The fuzzer's seed input really does reach the handler: mutations start from
    # something that works, so the fuzzing is not just noise against the header.
    from actorctl import open_node

    from .fuzz_inbox import Target

    target = Target()
    async with open_node("fuzzed", [target], insecure=True) as node:
        with trio.fail_after(10):
            await hit(node.port, client_bytes(b'[["hello"], {}]'))
            await target.got.wait()
    assert target.ran == ["hello"]


async def test_random_and_mutated_frames_never_take_the_node_down() -> None:
    with trio.fail_after(60):
        target = await run(seconds=6.0, cases=300, seed=1234, insecure=True)
    for value in target.ran:
        assert value is not None  # whatever ran was a well-formed call
