"""Signatures: task calls not made yet (``add.s(2, 2)``), and their wire form.

A signature holds its task through the small :class:`TaskLike` interface, so
that this module does not import the task class (which makes signatures).
docs/protocol.md §14.3 specifies the wire form.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Protocol

from ..._errors import ConfigError
from ...actors import to_wire
from ...supervision import DEFAULT_RETRY_POLICY, RetryPolicy
from ..client._results import AsyncResult
from ..protocol._protocol import CHAIN_SEPARATOR, compact, pack_chain

__all__ = [
    "STEP_OPTIONS",
    "Signature",
    "TaskLike",
    "chain",
    "policy_option",
    "signature_to_wire",
    "wire_options",
]

#: The options a signature carries on the wire (``o``, §14.3).
STEP_OPTIONS: Final = frozenset(
    {"countdown", "expires", "time_limit", "soft_time_limit", "link", "link_error",
     "priority", "sinks", "map", "retry_policy", "acks_late"}
)  # fmt: skip
#: The numbers of a retry policy that travel (``on`` and ``never`` stay with the code).
_POLICY_NUMBERS: Final = (
    "max_retries",
    "interval_start",
    "interval_step",
    "interval_max",
    "jitter",
)


class TaskLike(Protocol):
    """What a signature needs of its task."""

    name: str
    pool: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

    def apply_async(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> AsyncResult: ...

    async def aapply_async(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> AsyncResult: ...


def signature_to_wire(sig: Any, pool: str | None = None) -> dict[str, Any]:
    """A signature (or a task, as its signature without arguments, or a
    signature already in wire form) as it travels in a header; ``p`` is left
    out when it is ``pool``.

    Raises:
        ConfigError: it is none of these.
    """
    if isinstance(sig, dict):
        return sig
    if not isinstance(sig, Signature) and callable(getattr(sig, "s", None)):
        sig = sig.s()
    if not isinstance(sig, Signature):
        raise ConfigError(f"expected a task signature (task.s(...)), got {sig!r}")
    return sig.to_wire(pool)


def policy_option(given: Any, max_retries: Any = None) -> str:
    """A signature's ``retry_policy`` option (a ``RetryPolicy``, or a dict of
    its fields) and ``max_retries`` as the ``retry_policy`` header (§14.6): the
    numbers given, which the worker lays over the task's policy.

    Raises:
        ConfigError: it is neither, or names an unknown field or a bad value.
    """
    if isinstance(given, str):
        return given  # already in wire form (a step read back from a header)
    if isinstance(given, RetryPolicy):
        numbers = {k: getattr(given, k) for k in _POLICY_NUMBERS}
    elif isinstance(given, Mapping):
        RetryPolicy.from_options(given, DEFAULT_RETRY_POLICY)  # raises if it is wrong
        numbers = {k: v for k, v in given.items() if k in _POLICY_NUMBERS}
    elif given is None:
        numbers = {}
    else:
        raise ConfigError(f"retry_policy={given!r} must be a RetryPolicy or a dict of its fields")
    if max_retries is not None:
        RetryPolicy.from_options({"max_retries": max_retries}, DEFAULT_RETRY_POLICY)
        numbers["max_retries"] = max_retries
    return json.dumps(numbers, separators=(",", ":"))


def wire_options(options: Mapping[str, Any], pool: str) -> dict[str, Any]:
    """``options`` with their ``link`` and ``link_error`` signatures, and their
    ``retry_policy`` and ``max_retries`` (as one ``retry_policy``), in wire form."""
    wired = dict(options)
    if "retry_policy" in wired or "max_retries" in wired:
        policy = wired.pop("retry_policy", None)
        wired["retry_policy"] = policy_option(policy, wired.pop("max_retries", None))
    for key in ("link", "link_error"):
        linked = wired.get(key)
        if linked:
            sigs = linked if isinstance(linked, list | tuple) else [linked]
            wired[key] = [signature_to_wire(s, pool) for s in sigs]
    return wired


class Signature:
    """A task call not made yet: ``add.s(2, 2)``; ``add.si(2, 2)`` ignores the
    result of a previous step. Options (``countdown``, ``link``, ...) are kept and
    used when it is sent."""

    def __init__(
        self,
        task: TaskLike,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        options: Mapping[str, Any] | None = None,
        immutable: bool = False,
    ) -> None:
        self.task = task
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.options = dict(options or {})
        if getattr(task, "acks_late", True) is False:
            # at-most-once wherever it is sent from: a chord's header, a worker
            self.options.setdefault("acks_late", False)
        self.immutable = immutable
        _check_policy(self.options)

    def clone(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> Signature:
        """A copy with more arguments (appended, unless immutable) and options."""
        return Signature(
            self.task,
            self.args if self.immutable else (*self.args, *args),
            {**self.kwargs, **(kwargs or {})},
            options={**self.options, **options},
            immutable=self.immutable,
        )

    def set(self, **options: Any) -> Signature:
        """Set options: those of ``apply_async``, e.g. ``retry_policy`` (a
        ``RetryPolicy`` or a dict of its fields) and ``max_retries`` for this
        step's retries, wherever it runs (a chain's step, a group's or chord's
        member, a callback)."""
        _check_policy(options)
        self.options.update(options)
        return self

    def link(self, callback: Signature) -> Signature:
        """Run ``callback`` with this task's result when it succeeds."""
        self.options.setdefault("link", []).append(callback)
        return callback

    def link_error(self, errback: Signature) -> Signature:
        """Run ``errback(task_id, error)`` when this task fails (``error`` is
        ``{"type", "message"}``)."""
        self.options.setdefault("link_error", []).append(errback)
        return errback

    def on_error(self, errback: Signature) -> Signature:
        self.link_error(errback)
        return self

    def __or__(self, other: Signature | chain) -> chain:
        return chain(self, other)

    def to_wire(self, pool: str | None = None) -> dict[str, Any]:
        wire: dict[str, Any] = {"t": self.task.name}
        if self.task.pool != pool:
            wire["p"] = self.task.pool
        if self.args:
            wire["a"] = to_wire(list(self.args))
        if self.kwargs:
            wire["k"] = to_wire(self.kwargs)
        if self.immutable:
            wire["i"] = True
        wired = wire_options(self.options, self.task.pool)  # max_retries joins retry_policy
        options = {k: v for k, v in wired.items() if k in STEP_OPTIONS}
        if options:
            wire["o"] = options
        return wire

    # sending
    def delay(self, *args: Any, **kwargs: Any) -> AsyncResult:
        return self.apply_async(args, kwargs)

    def apply_async(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> AsyncResult:
        sig = self.clone(args, kwargs, **options)
        return sig.task.apply_async(sig.args, sig.kwargs, **sig.options)

    async def adelay(self, *args: Any, **kwargs: Any) -> AsyncResult:
        return await self.aapply_async(args, kwargs)

    async def aapply_async(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> AsyncResult:
        sig = self.clone(args, kwargs, **options)
        return await sig.task.aapply_async(sig.args, sig.kwargs, **sig.options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run it here, now (as calling the task does)."""
        sig = self.clone(args, kwargs)
        return sig.task(*sig.args, **sig.kwargs)

    def __repr__(self) -> str:
        call = ", ".join([*map(repr, self.args), *(f"{k}={v!r}" for k, v in self.kwargs.items())])
        return f"{self.task.name}.{'si' if self.immutable else 's'}({call})"


def _check_policy(options: Mapping[str, Any]) -> None:
    """Refuse a wrong ``retry_policy`` or ``max_retries`` when the signature is made."""
    if options.get("retry_policy") is not None or options.get("max_retries") is not None:
        policy_option(options.get("retry_policy"), options.get("max_retries"))


class chain:
    """Tasks one after another, each getting the previous one's result as its
    first argument (unless made with ``.si``). Its result is the last step's;
    an error in any step stops it and reaches the caller."""

    def __init__(self, *tasks: Signature | chain | Iterable[Signature]) -> None:
        steps: list[Signature] = []
        items: Iterable[Any] = tasks
        if len(tasks) == 1 and not isinstance(tasks[0], Signature | chain):
            items = list(tasks[0])  # chain(generator)
        for item in items:
            if isinstance(item, chain):
                steps.extend(item.steps())
            elif isinstance(item, Signature):
                steps.append(item)
            else:
                raise ConfigError(f"a chain takes task signatures (task.s(...)), got {item!r}")
        if not steps:
            raise ConfigError("a chain needs at least one task")
        self.tasks = steps

    def __or__(self, other: Signature | chain) -> chain:
        return chain(self, other)

    def steps(self) -> list[Signature]:
        return self.tasks

    def header(self) -> str | None:
        """The rest of the chain after its first step, as its header text: the
        next step last, each step's pool written unless it is the previous one's
        (a worker reads a step relative to the pool of the step it just ran)."""
        if len(self.tasks) < 2:
            return None
        steps = [
            compact(step.to_wire(previous.task.pool))
            for previous, step in itertools.pairwise(self.tasks)
        ]
        return pack_chain(CHAIN_SEPARATOR.join(reversed(steps)))

    def _first(
        self, args: Sequence[Any], kwargs: Mapping[str, Any] | None, options: Mapping[str, Any]
    ) -> Signature:
        header = self.header()
        extra = {"chain": header} if header else {}
        return self.tasks[0].clone(args, kwargs, **extra, **options)

    def apply_async(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> AsyncResult:
        first = self._first(args, kwargs, options)
        return first.task.apply_async(
            first.args, first.kwargs, _name=self.tasks[-1].task.name, **first.options
        )

    async def aapply_async(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any
    ) -> AsyncResult:
        first = self._first(args, kwargs, options)
        return await first.task.aapply_async(
            first.args, first.kwargs, _name=self.tasks[-1].task.name, **first.options
        )

    def delay(self, *args: Any, **kwargs: Any) -> AsyncResult:
        return self.apply_async(args, kwargs)

    async def adelay(self, *args: Any, **kwargs: Any) -> AsyncResult:
        return await self.aapply_async(args, kwargs)

    __call__ = delay

    def __repr__(self) -> str:
        return " | ".join(map(repr, self.tasks))
