"""A short fuzzing pass over the inbound path (tests/support/fuzz_inbox.py runs longer)."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.support.fuzz_inbox import client_bytes, hit, run
from tests.support.keys import make_keys


async def test_the_unmutated_conversation_is_a_valid_call() -> None:
    # The fuzzer's seed input really does reach the handler: mutations start from
    # something that works, so the fuzzing is not just noise against the header.
    from actorctl import open_node
    from tests.support.fuzz_inbox import Target

    target = Target()
    async with open_node("fuzzed", [target], insecure=True) as node:
        with trio.fail_after(10):
            await hit(node.port, client_bytes(b'[["hello"], {}]'))
            await target.got.wait()
    assert target.ran == ["hello"]


async def test_random_and_mutated_frames_never_take_the_node_down() -> None:
    with trio.fail_after(60):
        target = await run(6.0, 300, 1234, {"insecure": True})
    for value in target.ran:
        assert value is not None  # whatever ran was a well-formed call


async def test_a_node_that_requires_authentication_never_runs_fuzzed_input(tmp_path: Path) -> None:
    # Given a node with keys (plain TCP, so the fuzzer's bytes reach the inbox)
    keys = make_keys(tmp_path, "fuzzed", "checker")
    with trio.fail_after(60):
        target = await run(
            4.0,
            200,
            4321,
            {"insecure": True, "keyring": keys["fuzzed"]},
            {"insecure": True, "keyring": keys["checker"]},
        )
    # Then nothing the fuzzer sent was executed, and the node kept serving
    assert target.ran == []
