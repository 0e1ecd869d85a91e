"""The ``chain`` header (docs/protocol.md §14.3): packed in parts, so that each
step unpacks and packs only the last part, and read back step by step in
order whatever its length or form."""

from __future__ import annotations

import base64
import json
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actorctl.tasks.protocol._protocol import (
    CHAIN_PACK_OVER,
    CHAIN_PACKED,
    CHAIN_SEPARATOR,
    next_step,
    pack_chain,
    unpack_chain,
)

steps_of = st.lists(
    st.dictionaries(st.sampled_from("tpak"), st.text(max_size=80), min_size=1), min_size=1
).map(lambda sigs: [json.dumps(s, separators=(",", ":")) for s in sigs])


def walk(header: str) -> list[str]:
    """Every step of a header, next first, as a worker takes them."""
    taken = []
    while header:
        step, header = next_step(header)
        taken.append(step)
    return taken


@given(steps_of)
def test_a_header_gives_back_its_steps_next_first_in_either_form(steps: list[str]) -> None:
    text = CHAIN_SEPARATOR.join(reversed(steps))  # the next step last
    header = pack_chain(text)
    assert header.startswith(CHAIN_PACKED) == (len(text) > CHAIN_PACK_OVER)
    assert unpack_chain(header) == text
    assert walk(header) == steps


def test_a_long_chain_is_packed_in_parts_and_a_step_repacks_only_the_last() -> None:
    steps = [json.dumps({"t": "add", "a": [n]}) for n in range(10_000)]
    header = pack_chain(CHAIN_SEPARATOR.join(reversed(steps)))
    parts = header.removeprefix(CHAIN_PACKED).split(".")
    assert len(parts) == 157  # 10,000 steps in parts of 64
    step, rest = next_step(header)
    assert step == steps[0]
    assert rest.removeprefix(CHAIN_PACKED).split(".")[:-1] == parts[:-1]  # the others as they were
    assert walk(header) == steps


def test_a_header_packed_whole_by_another_writer_is_read() -> None:
    steps = [json.dumps({"t": "mul", "a": [n]}) for n in range(500)]
    text = CHAIN_SEPARATOR.join(reversed(steps))
    whole = CHAIN_PACKED + base64.b64encode(zlib.compress(text.encode(), 9)).decode()
    assert unpack_chain(whole) == text
    assert walk(whole) == steps


def test_a_header_that_does_not_unpack_is_refused() -> None:
    with pytest.raises(ValueError, match="packed chain header does not unpack"):
        next_step(CHAIN_PACKED + "not*base64")
    with pytest.raises(ValueError, match="packed chain header does not unpack"):
        unpack_chain(CHAIN_PACKED + base64.b64encode(b"not zlib").decode())
