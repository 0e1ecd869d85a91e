"""What a handler's exception does (docs/supervision.md, "What crashes an
actor"): in request-reply mode (the default) the caller gets the error and the
actor keeps its state; in OTP mode the caller gets the error and the actor is
restarted fresh by its supervisor. Chosen by the actor's class, its
``ActorSpec`` or its ``SupervisorSpec``; two real nodes, signed messages."""

from __future__ import annotations

import pytest
import trio

from actorctl import (
    Actor,
    ActorSpec,
    ConfigError,
    NotPermitted,
    Rejected,
    RemoteError,
    SupervisorSpec,
    handler,
    open_node,
)
from tests.support.harness import Logs, Secrets, node_pair


class Account(Actor):
    """State that a restart resets; ``fail`` raises inside its handler."""

    def __init__(self) -> None:
        self.balance = 0

    @handler
    async def deposit(self, amount: int) -> int:
        self.balance += amount
        return self.balance

    @handler
    async def fail(self) -> None:
        raise ValueError("no such account")


class OtpAccount(Account):
    handler_errors = "crash"


async def _fail_once(tree: SupervisorSpec, name: str, secrets: Secrets) -> tuple[int, int]:
    """Deposit 5, call ``fail`` (its caller must get the error), deposit 1:
    the balances before and after."""
    async with node_pair([tree], secrets=secrets) as (server, client):
        ref = client.ref(server.address_of(name))
        with trio.fail_after(10):
            before = await ref.ask("deposit", 5)
            with pytest.raises(RemoteError) as caught:
                await ref.ask("fail")
            assert caught.value.type_name == "ValueError"
            assert caught.value.message == "no such account"
            after = await ref.ask("deposit", 1)
    return before, after


async def test_by_default_a_handler_error_answers_its_caller_and_keeps_the_state(
    secrets: Secrets, logs: Logs
) -> None:
    # Given an actor in request-reply mode (the default)
    tree = SupervisorSpec("tree", [ActorSpec(Account, name="account")])
    # When a handler raises, Then its caller gets the error and the state is kept
    assert await _fail_once(tree, "account", secrets) == (5, 6)
    assert logs.of_type("actorctl:supervisor:restart") == []
    assert logs.of_type("actorctl:actor:crashed") == []


@pytest.mark.parametrize(
    "tree",
    [
        SupervisorSpec("tree", [ActorSpec(OtpAccount, name="account")]),
        SupervisorSpec("tree", [ActorSpec(Account, name="account", handler_errors="crash")]),
        SupervisorSpec("tree", [ActorSpec(Account, name="account")], handler_errors="crash"),
        SupervisorSpec(
            "tree",
            [SupervisorSpec("inner", [ActorSpec(Account, name="account")])],
            handler_errors="crash",
        ),
    ],
    ids=["class", "actor-spec", "supervisor-spec", "nested"],
)
async def test_in_otp_mode_a_handler_error_answers_its_caller_and_restarts_the_actor_fresh(
    tree: SupervisorSpec, secrets: Secrets, logs: Logs
) -> None:
    # Given an actor in OTP mode (by its class, its spec or its supervisor's)
    # When a handler raises, Then its caller gets the error, and the actor
    # was restarted fresh: the state is gone
    assert await _fail_once(tree, "account", secrets) == (5, 1)
    [restart] = logs.of_type("actorctl:supervisor:restart")
    assert restart["child"] == "account"
    assert "ValueError: no such account" in restart["reason"]
    [crashed] = logs.of_type("actorctl:actor:crashed")
    assert crashed["released"] == []  # the failing message was answered, not released


async def test_an_actor_spec_overrides_its_supervisors_choice(secrets: Secrets, logs: Logs) -> None:
    # Given a supervisor in OTP mode, and an actor of it that says "reply"
    tree = SupervisorSpec(
        "tree",
        [ActorSpec(OtpAccount, name="account", handler_errors="reply")],
        handler_errors="crash",
    )
    # Then its handler errors only answer the caller
    assert await _fail_once(tree, "account", secrets) == (5, 6)
    assert logs.of_type("actorctl:supervisor:restart") == []


def test_an_unknown_choice_is_refused() -> None:
    with pytest.raises(ConfigError, match="expected one of reply, crash"):
        ActorSpec(Account, handler_errors="restart")


class GuardedAccount(OtpAccount):
    """In OTP mode, with a handler that refuses some callers itself."""

    @handler
    async def close(self) -> None:
        raise NotPermitted("closing an account needs its owner's key")


async def test_in_otp_mode_a_refused_caller_does_not_crash_the_actor(
    secrets: Secrets, logs: Logs
) -> None:
    # Given an actor in OTP mode whose handler refuses a caller (NotPermitted)
    tree = SupervisorSpec("tree", [ActorSpec(GuardedAccount, name="account")])
    async with node_pair([tree], secrets=secrets) as (server, client):
        ref = client.ref(server.address_of("account"))
        with trio.fail_after(10):
            assert await ref.ask("deposit", 5) == 5
            # When the caller is refused, then it is rejected as not permitted
            with pytest.raises(Rejected, match="needs its owner's key"):
                await ref.ask("close")
            # And the actor was not restarted: its state is kept (a caller's
            # refusal is the caller's error, never a way to crash an actor)
            assert await ref.ask("deposit", 1) == 6
    assert logs.of_type("actorctl:actor:crashed") == []


async def test_an_unknown_handler_errors_on_a_class_is_refused_by_name() -> None:
    class Misspelt(Account):
        handler_errors = "Crash"

    # A node hosting it says which class and what it may be, as it starts
    refused = pytest.RaisesExc(ConfigError, match=r"Misspelt.handler_errors = 'Crash': expected")
    with (
        trio.fail_after(10),
        pytest.RaisesGroup(refused, allow_unwrapped=True, flatten_subgroups=True),
    ):
        async with open_node("n1", [Misspelt()], insecure=True):
            pass
