"""Actors on real nodes talking over real AMQP 1.0 connections on 127.0.0.1."""

from __future__ import annotations

import threading

import pytest
import trio

from actorctl import (
    AskTimeout,
    Modified,
    Rejected,
    RemoteError,
    UnknownActor,
)
from tests.apps.actors import Calculator, Moody
from tests.support.harness import Logs, node_pair


async def test_ask_returns_the_handlers_result_across_nodes() -> None:
    # Given a node hosting a calculator, and a second node that only sends
    async with node_pair([Calculator()]) as (server, client):
        ref = client.ref(server.address_of("calculator"))
        with trio.fail_after(10):
            # When the client asks
            result = await ref.ask("add", 2, 3)
    # Then it gets the result back
    assert result == 5


async def test_an_address_names_host_port_and_actor() -> None:
    async with node_pair([Calculator()]) as (server, client):
        url = f"amqp://127.0.0.1:{server.port}/calculator"
        assert str(server.address_of("calculator")) == url
        with trio.fail_after(10):
            assert await client.ref(url).ask("add", 1, 1) == 2


async def test_sync_handlers_run_in_worker_threads() -> None:
    calculator = Calculator()
    async with node_pair([calculator]) as (server, client):
        with trio.fail_after(10):
            assert await client.ref(server.address_of("calculator")).ask("multiply", 6, 7) == 42
    assert calculator.threads
    assert threading.current_thread().name not in calculator.threads


async def test_tell_delivers_without_waiting_for_a_reply() -> None:
    calculator = Calculator()
    async with node_pair([calculator]) as (server, client):
        with trio.fail_after(10):
            await client.ref(server.address_of("calculator")).tell("remember", {"k": [1, 2]})
            await calculator.told_event.wait()
    assert calculator.told == [{"k": [1, 2]}]


async def test_at_most_once_sends_pre_settled_and_still_arrives() -> None:
    calculator = Calculator()
    async with node_pair([calculator]) as (server, client):
        ref = client.ref(server.address_of("calculator")).with_options(at_most_once=True)
        with trio.fail_after(10):
            await ref.tell("remember", "once")
            await calculator.told_event.wait()
    assert calculator.told == ["once"]


async def test_a_handler_that_raises_sends_the_caller_its_type_and_message(logs: Logs) -> None:
    async with node_pair([Calculator()]) as (server, client):
        ref = client.ref(server.address_of("calculator"))
        with trio.fail_after(10), pytest.raises(RemoteError) as caught:
            await ref.ask("fail", "disk full")
        # And the node keeps serving
        with trio.fail_after(10):
            assert await ref.ask("add", 1, 2) == 3
    assert caught.value.type_name == "ValueError"
    assert caught.value.message == "disk full"
    [failure] = logs.of_type("actorctl:handler:failed")
    assert failure["message_id"]
    assert failure["error"] == "disk full"


async def test_unknown_handler_is_rejected_with_a_condition_naming_it() -> None:
    async with node_pair([Calculator()]) as (server, client):
        ref = client.ref(server.address_of("calculator"))
        with trio.fail_after(10), pytest.raises(Rejected) as caught:
            await ref.ask("divide", 1, 2)
    assert caught.value.condition == "actorctl:unknown-handler"
    assert "'divide'" in caught.value.description
    assert "add" in caught.value.description  # it lists what exists


async def test_wrong_arguments_are_rejected_naming_the_problem() -> None:
    async with node_pair([Calculator()]) as (server, client):
        ref = client.ref(server.address_of("calculator"))
        with trio.fail_after(10):
            with pytest.raises(Rejected) as too_many:
                await ref.deliver("add", 1, 2, 3)
            with pytest.raises(Rejected) as wrong_type:
                await ref.deliver("add", 1, "two")
    assert too_many.value.condition == "actorctl:bad-arguments"
    assert "too many positional arguments" in too_many.value.description
    assert wrong_type.value.condition == "actorctl:bad-arguments"
    assert "'b'" in wrong_type.value.description
    assert "expected int" in wrong_type.value.description


async def test_a_link_to_an_actor_that_does_not_exist_is_refused() -> None:
    async with node_pair([Calculator()]) as (server, client):
        with trio.fail_after(10), pytest.raises(UnknownActor) as caught:
            await client.ref(server.address_of("nobody")).ask("add", 1, 2)
        with trio.fail_after(10):
            assert await client.ref(server.address_of("calculator")).ask("add", 1, 2) == 3
    assert caught.value.condition == "amqp:not-found"
    assert "'nobody'" in caught.value.description


async def test_ask_times_out_with_a_clear_error_and_the_handler_is_cancelled() -> None:
    # (A real clock: the autojump clock would jump while real sockets are idle.)
    async with node_pair([Calculator()]) as (server, client):
        ref = client.ref(server.address_of("calculator")).with_options(timeout=0.3)
        with pytest.raises(AskTimeout) as caught:
            await ref.ask("hang")
        with trio.fail_after(10):
            assert await ref.ask("add", 2, 2) == 4
    assert "'hang'" in str(caught.value)
    assert "within 0.3 s" in str(caught.value)


async def test_become_switches_the_handler_table_and_unbecome_switches_back() -> None:
    async with node_pair([Moody()]) as (server, client):
        ref = client.ref(server.address_of("moody"))
        with trio.fail_after(10):
            assert await ref.ask("shout", "Hi") == "HI"
            await ref.ask("calm_down")
            assert await ref.ask("shout", "Hi") == "hi"
            with pytest.raises(Rejected):
                await ref.ask("calm_down")  # not a handler of the new behaviour
            await ref.ask("back")
            assert await ref.ask("shout", "Hi") == "HI"


async def test_an_open_circuit_behaviour_answers_modified() -> None:
    async with node_pair([Calculator()]) as (server, client):
        ref = client.ref(server.address_of("calculator"))
        with trio.fail_after(10):
            await ref.ask("open_circuit")
            with pytest.raises(Modified) as caught:
                await ref.deliver("add", 1, 2)
    assert caught.value.condition == "actorctl:circuit-open"
    assert "circuit open" in caught.value.description


async def test_many_calls_in_flight_all_get_their_own_reply() -> None:
    results: dict[int, int] = {}
    async with node_pair([Calculator()]) as (server, client):
        ref = client.ref(server.address_of("calculator"))

        async def call(i: int) -> None:
            results[i] = await ref.ask("add", i, i)

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                for i in range(300):
                    nursery.start_soon(call, i)
    assert results == {i: 2 * i for i in range(300)}
