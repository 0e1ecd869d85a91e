"""Typed payloads: attrs classes and dataclasses to and from the wire with cattrs."""

from __future__ import annotations

import pytest
import trio

from actorctl import Rejected
from tests.apps.actors import Calculator, Point, User
from tests.support.harness import node_pair


async def test_a_dataclass_parameter_receives_an_instance() -> None:
    async with node_pair([Calculator()]) as (server, client):
        ref = client.ref(server.address_of("calculator"))
        with trio.fail_after(10):
            # sent as an instance, or as the plain JSON object a foreign client sends
            assert (
                await ref.ask("greet", User("Ada", "ada@example.org"))
                == "hello Ada <ada@example.org>"
            )
            assert (
                await ref.ask("greet", {"name": "Bo", "email": "bo@example.org"})
                == "hello Bo <bo@example.org>"
            )


async def test_an_attrs_result_comes_back_as_its_fields() -> None:
    async with node_pair([Calculator()]) as (server, client):
        ref = client.ref(server.address_of("calculator"))
        with trio.fail_after(10):
            assert await ref.ask("norm", Point(-1, 2)) == {"x": 1, "y": 2}


async def test_a_payload_that_does_not_fit_is_rejected_naming_the_field() -> None:
    async with node_pair([Calculator()]) as (server, client):
        ref = client.ref(server.address_of("calculator"))
        with trio.fail_after(10):
            with pytest.raises(Rejected) as missing:
                await ref.ask("greet", {"name": "Ada"})
            with pytest.raises(Rejected) as wrong:
                await ref.ask("norm", {"x": 1, "y": "north"})
    assert missing.value.condition == "actorctl:bad-arguments"
    assert "user.email" in missing.value.description
    assert "p.y" in wrong.value.description
